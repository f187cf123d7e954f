"""The teacher's gate on crafted raw traces: a good file passes with data docs; invalid traces or missing responses
fail with the observed figure."""

import json

from parathink.pipeline.compose import compose
from parathink.quality.gate import GateInput
from parathink.stages.teacher.gate import teacher_gate

GOOD = "<Parallel><Path>a \\boxed{1}</Path><Path>b \\boxed{1}</Path></Parallel><Summary>1</Summary> \\boxed{1}"


def _gate(tmp_path, responses, problems=None, *overrides):
    with (tmp_path / "raw.jsonl").open("w") as f:
        for i, response in enumerate(responses):
            f.write(json.dumps({"id": f"q{i}", "source": "s", "problem": f"p{i}", "answer": "1",
                                "response": response}) + "\n")
    out = GateInput(stage="teacher", folder=tmp_path, gate_dir=tmp_path / "_gates",
                    metrics={"problems": float(problems or len(responses))}, output_hash="h", seed=0,
                    cache_dir=tmp_path, input_hash=lambda s: None, resolve_input=lambda s: tmp_path / s)
    cfg = compose(["experiment=tiny", f"run_dir={tmp_path}", *overrides])
    return {c.name: (c.observed, c.passed) for c in teacher_gate(cfg, out)}


def test_good_traces_pass_with_data_docs(tmp_path):
    assert _gate(tmp_path, [GOOD] * 4) == {"records_with_response_share": (1.0, True), "raw.records": (4, True),
                                           "raw.valid_rate": (1.0, True)}
    assert (tmp_path / "_gates" / "data_docs" / "index.html").exists()


def test_broken_traces_and_empty_responses_fail(tmp_path):
    got = _gate(tmp_path, [GOOD, "<Path>a", "<Path>b", "<Path>c", ""], None, "teacher.gate.data_docs=false")
    assert got["records_with_response_share"] == (0.8, False) and got["raw.valid_rate"] == (0.4, False)
    assert not (tmp_path / "_gates").exists()
