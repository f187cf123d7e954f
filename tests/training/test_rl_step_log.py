"""The RL step log (parathink.training.rl.log_step and what reads it back): metrics.jsonl, hashed with the stage's
output, holds no wall-clock figure; the tracker still gets every one, and the times go to their own file."""

import json

from parathink.training import rl


class Recorder:
    def __init__(self):
        self.logged = []

    def log_metrics(self, metrics, step=None):
        self.logged.append((step, dict(metrics)))


def _lines(path):
    return [json.loads(x) for x in path.read_text().splitlines()]


def _log(folder, steps):
    folder.mkdir(exist_ok=True)
    tracker, path = Recorder(), folder / "metrics.jsonl"
    for step, seconds in steps:
        rl.log_step(tracker, path, {"step": step, "reward_mean": 0.5, "loss": float("nan"), "rollout_s": seconds,
                                    "update_s": 2 * seconds, "tokens_per_s": 100 / seconds}, step)
    return tracker, path


def test_a_record_with_timings_goes_to_the_tracker_whole_and_its_times_to_the_unhashed_file(tmp_path):
    tracker, path = _log(tmp_path, [(1, 0.5), (2, 0.25)])
    assert tracker.logged[0] == (1, {"step": 1, "reward_mean": 0.5, "loss": tracker.logged[0][1]["loss"],
                                     "rollout_s": 0.5, "update_s": 1.0, "tokens_per_s": 200.0})
    assert _lines(path) == [{"step": 1, "reward_mean": 0.5, "loss": None}, {"step": 2, "reward_mean": 0.5,
                                                                             "loss": None}]
    assert _lines(tmp_path / "timings.jsonl") == [{"step": 1, "rollout_s": 0.5, "update_s": 1.0, "tokens_per_s": 200.0},
                                                  {"step": 2, "rollout_s": 0.25, "update_s": 0.5,
                                                   "tokens_per_s": 400.0}]


def test_the_same_steps_at_other_speeds_write_the_same_step_log(tmp_path):
    _, fast = _log(tmp_path / "fast", [(1, 0.1), (2, 0.1)])
    _, slow = _log(tmp_path / "slow", [(1, 9.0), (2, 7.0)])
    assert fast.read_bytes() == slow.read_bytes()


def test_a_resume_truncates_the_times_with_the_steps_and_the_summary_reads_the_seconds_from_them(tmp_path):
    _, path = _log(tmp_path, [(1, 1.0), (2, 1.0), (3, 1.0)])
    rl._truncate_metrics(path, 2)
    assert [r["step"] for r in _lines(path)] == [r["step"] for r in _lines(tmp_path / "timings.jsonl")] == [1, 2]
    summary = rl.summarise(rl._read_metrics(path), timed=rl._read_metrics(tmp_path / "timings.jsonl"))
    assert summary["steps"] == 2.0 and summary["seconds"] == 6.0  # (1 + 2) seconds a step
