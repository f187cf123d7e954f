"""Figure-3 curves from RL metrics.jsonl files, the PNGs, and the non-MLflow tracking backends."""

import json
import math
from pathlib import Path

from parathink.pipeline import runner
from parathink.tracking.plots import figure3, find_value, read_curves, table_png

PNG = b"\x89PNG\r\n\x1a\n"


def test_read_curves_accepts_prefixed_keys_and_nan(tmp_path):
    path = tmp_path / "metrics.jsonl"
    rows = [{"step": 1, "accuracy": 0.1, "parallel_rate": 0.9, "relative_position": float("nan")},
            {"step": 2, "train/accuracy": 0.2, "rollout.parallel_rate": 0.8, "relative_position": 0.3}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    curves = read_curves(path)
    assert curves["accuracy"] == ([1, 2], [0.1, 0.2])
    assert curves["parallel_rate"] == ([1, 2], [0.9, 0.8])
    assert math.isnan(curves["relative_position"][1][0])
    assert find_value({"x": 1}, "accuracy") is None
    out = figure3({"rl_hard": curves}, tmp_path / "f.png")
    assert out.read_bytes()[:8] == PNG
    row = {"accuracy": 0.5, "pass_at_k": 0.7, "parallel_rate": 0.9, "relative_position": 0.3}
    assert table_png({"stages": {"sft": {"hard": row}}}, tmp_path / "t.png").read_bytes()[:8] == PNG


def test_jsonl_backend_writes_one_file_per_stage(curriculum):
    assert runner.main_run(curriculum.overrides("tracking=jsonl", stages=("prep", "train"))) == 0
    lines = (Path(curriculum.run_dir) / ".tracking" / "train.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    assert records[0]["params"]["stage"]["steps"] == 4
    assert [r["step"] for r in records if r.get("metrics", {}).get("loss")] == [1, 2, 3, 4]
