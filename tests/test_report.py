"""parathink.report: the run's report card, from what the run published."""

import json
import subprocess
import sys

from parathink import report

MANIFESTS = {
    "sft": {"duration_s": 300.4, "output_hash": "aaaa", "finished_at": 1796144401.0,
            "metrics": {"steps": 415.0, "peak_rss_mb": 1408.2},
            "gates": {"enabled": True, "passed": True, "expectations": []}},
    "rl_hard": {"duration_s": 171.9, "output_hash": "bbbb", "finished_at": 1796144709.0,
                "metrics": {"steps": 19.0, "accuracy_first": 0.209375, "accuracy_last": 0.18203125,
                            "reward_first": -0.58, "relative_position_last": float("nan")},
                "gates": {"enabled": True, "passed": False,
                          "expectations": [{"name": "reward_not_nan", "passed": True},
                                           {"name": "parallel_rate_last", "passed": False}]}},
    "eval": None,
}
RUN = {"created": 1796143479.7, "stages": {"sft": {"status": "skipped"}, "rl_hard": {"status": "ran"}},
       "mlflow": {"parent_run_id": "abc123", "uri": "sqlite:///mlflow.db"}}
RESULTS = {"settings": {"format": "parallel_r1"},
           "stages": {"base": {"hard": {"n": 1600, "k": 8, "accuracy": 0.184375, "pass_at_k": 0.535,
                                        "parallel_rate": 0.0, "relative_position": None}},
                      "sft": {"hard": {"n": 1600, "k": 8, "accuracy": 0.234, "pass_at_k": 0.545,
                                       "parallel_rate": 0.972, "relative_position": 0.0}}},
           "vs_start": {"sft": {"hard": {"start": "base", "delta": 0.05, "se": 0.016}}}}


def test_render_names_each_stage_its_gate_and_the_paired_differences():
    text = report.render("tiny", "/runs/tiny", ["sft", "rl_hard", "eval"], RUN, MANIFESTS, RESULTS,
                         ["report/figure3_rl_curves.png"])
    assert "| sft | skipped | 300 | 415 | 1408 | passed | aaaa |" in text
    assert "| rl_hard | ran | 172 | 19 | - | FAILED: parallel_rate_last | bbbb |" in text
    assert "| eval | not run | - | - | - | off | - |" in text
    assert "Gate reports: `rl_hard/_gates/report.md`" in text
    assert "| rl_hard | 0.209 | 0.182 | - | - | - | - |" in text  # NaN shows as "-", not "nan"
    assert "hard +5.0 ± 1.6" in text  # the paired difference, in points
    assert "23.4" in text and "18.4" in text
    assert "![figure3_rl_curves](report/figure3_rl_curves.png)" in text
    assert "parent run `abc123`" in text


def test_render_without_eval_says_so():
    text = report.render("tiny", "/runs/x", ["sft"], {}, {"sft": MANIFESTS["sft"]}, None, [])
    assert "No evaluation in this run" in text and "Figure 3" not in text


def test_a_real_run_gets_its_report_from_the_cli(tmp_path):
    run_dir = tmp_path / "run"
    env_cmd = [sys.executable, "-m", "parathink.cli"]
    subprocess.run(env_cmd + ["run", "stages=[teacher,filter]", "teacher.self.model=builtin:tiny_base",
                              "data.cold_start.0.n=40", "data.cold_start.1.n=40", "tracking=none",
                              f"run_dir={run_dir}"], check=True, capture_output=True, timeout=600)
    (run_dir / "report.md").unlink(missing_ok=True)  # the runner writes one: the CLI must write it again
    done = subprocess.run(env_cmd + ["report", str(run_dir)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(run_dir / "report.md")
    text = (run_dir / "report.md").read_text()
    accepted = json.loads((run_dir / "filter" / "_manifest.json").read_text())["metrics"]["records"]
    assert "| teacher | ran |" in text and "| filter | ran |" in text and accepted == 80
    assert text.index("| teacher |") < text.index("| filter |")  # the order they ran in
    assert "No evaluation in this run" in text


def test_a_folder_that_is_no_run_is_one_line_and_exit_2(tmp_path):
    done = subprocess.run([sys.executable, "-m", "parathink.cli", "report", str(tmp_path)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [f"parathink report: run_dir: {tmp_path} has no published stage "
                                                  "and no run.json"]
