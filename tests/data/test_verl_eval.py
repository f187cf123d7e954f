"""The eval stage and the experiments on a combined verl file: sets by data_source, k from the file's repeats."""

import json
from pathlib import Path

import pytest
from verl_files import REPEATS, combined_rows, write

from parathink.evaluation import sets as eval_sets
from parathink.pipeline import runner

MODEL_STAGE = str(Path(__file__).parents[1] / "stages" / "model_stage.py")


def test_eval_stage_takes_k_from_repeats_and_reports_it(tmp_path, monkeypatch):
    monkeypatch.setenv("CI", "true")
    evals = write(tmp_path / "test.parquet", combined_rows("parallel_r1"))
    run_dir = tmp_path / "run"
    ovr = [f"run_dir={run_dir}", f"+stage_modules.base={MODEL_STAGE}", "stages=[base,eval]", "eval.models=[base]",
           "eval.sets.easy=null", "eval.sets.hard=null", "eval.sampling.max_new_tokens=8", "tracking=none",
           f"+eval.sets.aime={{source:verl,uri:'{evals}',data_source:APO_AIME24}}",  # no k: the file's 4
           f"+eval.sets.math={{source:verl,uri:'{evals}',data_source:APO_MATH300,k:2}}"]
    assert runner.main_run(ovr) == 0
    rows = json.loads((run_dir / "eval" / "results.json").read_text())["stages"]["base"]
    aime, math = rows["aime"], rows["math"]
    assert (aime["k"], aime["k_from"], aime["repeats"], aime["n_problems"], aime["n"]) == \
        (REPEATS, "repeats", REPEATS, 2, 2 * REPEATS)
    assert (math["k"], math["k_from"], math["repeats"], math["n_problems"], math["n"]) == (2, "config", 1, 3, 6)
    per_problem = [json.loads(x) for x in (run_dir / "eval" / "base" / "aime.jsonl").read_text().splitlines()]
    assert [p["id"] for p in per_problem] == ["verl-APO_AIME24-0", "verl-APO_AIME24-1"]
    assert all(len(p["samples"]) == REPEATS for p in per_problem)


def test_a_set_without_k_whose_rows_per_problem_differ_is_refused(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("CI", "true")
    evals = write(tmp_path / "test.parquet", combined_rows())
    ovr = [f"run_dir={tmp_path / 'run'}", f"+stage_modules.base={MODEL_STAGE}", "stages=[base,eval]",
           "eval.models=[base]", "eval.sets.easy=null", "eval.sets.hard=null", "tracking=none",
           f"+eval.sets.all={{source:verl,uri:'{evals}'}}"]
    assert runner.main_run(ovr) == 2
    assert "eval.sets.all.k: not set, and its rows per problem differ (3 problems x1, 4 problems x4); set k" \
        in capsys.readouterr().err


@pytest.mark.parametrize("experiment, k", [("parallel_r1_seen", 16), ("npr", 8)])
def test_the_paper_experiments_read_the_combined_file_from_one_uri(tmp_path, capsys, experiment, k):
    evals = write(tmp_path / "test.parquet", combined_rows("parallel_r1"))
    cfg = runner.compose([f"experiment={experiment}", f"eval.benchmarks={evals}"])
    runner.validate(cfg, [str(s) for s in cfg.stages])
    sets = {name: dict(spec) for name, spec in eval_sets.active_sets(cfg).items()}
    problems = {name: eval_sets._problems(spec, 0) for name, spec in sets.items()}
    assert {name: (len(recs), sets[name]["k"]) for name, recs in problems.items()} == \
        {"aime24": (2, k), "aime25": (1, k), "amc23": (1, k), "math": (3, 1)}
    assert problems["amc23"][0]["answer"] == "\\frac{5}{6}" and problems["math"][0]["problem"] == "Compute $\\dbinom{6}{2}$."
    assert capsys.readouterr().err.count("columns of the verl layout, not of") == 4  # one note per set
