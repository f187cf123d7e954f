"""experiment=npr_tiny and experiment=parathinker_tiny end to end on a few steps: every stage of each recipe runs
through the runner from the shipped base, the teacher's traces and the filter's accepted traces parse in the recipe's
grammar, and eval writes the recipe's rows (ParaThinker's at 1, 2, 4 and 8 paths, each sample with that many thoughts).

The experiment files are shrunk by overrides: 48 teacher problems, 3 SFT steps, 2 RL steps, 4 test problems x 2. Three
SFT steps learn no format, so the gates that check a learnt format (sft, rl_hard) are off here; they are the gate tests'.
ParaThinker's run is tracked in MLflow (a SQLite store in the test's folder): its rows' names ('hard@8') are not
legal MLflow keys as they stand.
"""

import json
from collections import Counter

import pytest
from mlflow.tracking import MlflowClient

from parathink.evaluation import results as results_file
from parathink.formats import parse
from parathink.pipeline import runner

SHRINK = ["data.cold_start.0.n=24", "data.cold_start.1.n=24", "sft.max_steps=3",
          "sft.path_replay.n=16", "sft.vote_replay.n=8", "sft.gate.enabled=false", "eval.sets.easy.n=4",
          "eval.sets.hard.n=4", "eval.sets.easy.k=2", "eval.sets.hard.k=2"]


def _run(tmp_path, experiment: str, *extra: str, tracking: str = "tracking=none"):
    run_dir = tmp_path / experiment
    assert runner.main_run([f"experiment={experiment}", f"run_dir={run_dir}", tracking, *SHRINK, *extra]) == 0
    return run_dir


def _lines(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.slow
def test_npr_tiny_runs_every_stage(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    run_dir = _run(tmp_path, "npr_tiny", "rl_hard.steps=2", "rl_hard.prompts_per_step=2", "rl_hard.group_size=2",
                   "rl_hard.probe_prompts=0", "rl_hard.gate.enabled=false")
    raw = [parse(r["response"], "npr") for r in _lines(run_dir / "teacher" / "raw.jsonl")]
    accepted = [parse(r["response"], "npr") for r in _lines(run_dir / "filter" / "accepted.jsonl")]
    assert len(raw) == 48 and sum(t.parallel for t in raw) == 48  # the self teacher writes NPR's grammar
    assert accepted and all(t.parallel for t in accepted)
    plans = Counter(len(b.plans) for t in raw for b in t.blocks)
    assert set(plans) <= {2, 3, 4, 5} and len(plans) >= 2  # as many plans as a decided vote needs: the count varies
    # npr_tiny keeps teacher.self.fork=start: the guideline opens every response (where the block opens when the
    # samples share lines, fork=agreed, is tests/teacher/test_grammar_traces.py's, on samples built to share them).
    assert all(t.blocks[0].start == 0 and t.blocks[0].plans for t in raw)
    steps = _lines(run_dir / "rl_hard" / "metrics.jsonl")
    assert [s["step"] for s in steps] == [1, 2]
    results = results_file.read(run_dir / "eval")  # the rows with their times (kept in eval/_timings.json)
    assert results["settings"]["format"] == "npr" and set(results["stages"]) == {"base", "sft", "rl_hard"}
    for row in results["stages"]["rl_hard"].values():
        assert {"paths_hist", "relative_position", "path_accuracy", "seconds_per_sample"} <= set(row)


@pytest.mark.slow
def test_parathinker_tiny_runs_every_stage_and_scores_each_path_count(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    run_dir = _run(tmp_path, "parathinker_tiny", f"tracking.uri={uri}", tracking="tracking=sqlite")
    raw = [parse(r["response"], "parathinker") for r in _lines(run_dir / "teacher" / "raw.jsonl")]
    assert len(raw) == 48 and all(t.parallel and t.blocks[0].start == 0 for t in raw)
    assert {len(t.blocks[0].paths) for t in raw} == {2, 3, 4}  # trained on 2 to 4 thoughts
    results = json.loads((run_dir / "eval" / "results.json").read_text())
    assert set(results["stages"]["base"]) == {"easy", "hard"}  # the sequential row: no path counts
    assert set(results["stages"]["sft"]) == {"easy", "hard", *(f"{s}@{n}" for s in ("easy", "hard") for n in (1, 2, 4, 8))}
    for n in (1, 2, 4, 8):
        for problem in _lines(run_dir / "eval" / "sft" / f"hard@{n}.jsonl"):
            for sample in problem["samples"]:  # the engine opens n thoughts, in order, each once
                opened = [f"<think{i}>" for i in range(1, 9) if f"<think{i}>" in sample["response"]]
                assert opened[:n] == [f"<think{i}>" for i in range(1, n + 1)], sample["response"]
    assert results["stages"]["sft"]["hard@4"] == results["stages"]["sft"]["hard"]  # eval.num_paths = 4: one row
    assert results["vs_start"]["sft"]["hard@8"]["start_set"] == "hard"
    # MLflow: the eval run's metrics and the sft model version's tags, one per row, '@' written as '_'
    client = MlflowClient(tracking_uri=uri)
    (sft,) = client.search_model_versions("name='parathink-parathinker_tiny' and tags.stage='sft'")
    assert sft.tags["eval.hard_8.accuracy"] == str(results["stages"]["sft"]["hard@8"]["accuracy"])
    evals = client.search_runs([client.get_experiment_by_name("parathink-parathinker_tiny").experiment_id],
                               filter_string="tags.`parathink.stage` = 'eval'")
    assert evals[0].data.metrics["sft.easy_1.accuracy"] == results["stages"]["sft"]["easy@1"]["accuracy"]


@pytest.mark.parametrize("overrides,message", [
    (["experiment=parathinker_tiny", "teacher.self.fork=agreed"], "teacher.self.fork: a ParaThinker block opens"),
    (["experiment=npr_tiny", "teacher.self.path_count=most"], "teacher.self.path_count: 'most' is not one of"),
    (["experiment=npr_tiny", "teacher.self.min_paths=6"], "teacher.self.min_paths: must be in 1..num_paths=5"),
    (["experiment=parathinker_tiny", "eval.path_counts=[1,0]"], "eval.num_paths / eval.path_counts: 0 is not"),
    (["experiment=tiny", "sft.relabel_thoughts=true"], "sft.relabel_thoughts: needs format=parathinker"),
    (["experiment=parathinker_tiny", "sft.vote_replay.fork=agreed"], "sft.vote_replay.fork='agreed': a ParaThinker"),
])
def test_bad_recipe_settings_are_one_line_errors(overrides, message, capsys):
    assert runner.main_plan(overrides) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1 and "Traceback" not in err
