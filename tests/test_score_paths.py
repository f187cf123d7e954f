"""The one score path: the trace filter, RL's reward and ``parathink score`` give a completion the same verdicts.

Real parsing and grading throughout: the filter reads the records as the filter stage does, RL scores them as its
loop does (``rl_rollouts.score``), and ``parathink score`` runs as users run it (a subprocess).
"""

import json
import subprocess
import sys
from types import SimpleNamespace

import pytest

from parathink.quality.traces import FilterConfig, filter_records, read_raw
from parathink.rewards import get_reward
from parathink.training.rl_rollouts import score

COMPLETIONS = {
    "parallel_r1": [
        "<Parallel><Path>3+4=7</Path><Path>4+3=7</Path></Parallel><Summary>7</Summary>\n\\boxed{7}",
        "3 + 4 = 7\n\\boxed{7}",
        "3 + 4 = 8\n\\boxed{8}",
        "<Parallel><Path>3+4=7</Path></Parallel>\n\\boxed{7}",  # one path: invalid, answer right
        "<Parallel><Path> </Path><Path>7</Path></Parallel><Summary>s</Summary> \\boxed{7}",  # an empty path
        "x </Path> \\boxed{7}",  # a stray tag
        "<Parallel><Path>a</Path><Path>b</Path></Parallel><Summary>s</Summary> no answer",
        "Final Answer: 7",
    ],
    "npr": [
        "<guideline><plan>1: add</plan><plan>2: count</plan></guideline><step>1: 3+4=7</step><step>2: 7</step>"
        "<takeaway>7</takeaway>\n\\boxed{7}",
        "<guideline></guideline><takeaway>t</takeaway> \\boxed{7}",
        "plain \\boxed{6}",
    ],
    "parathinker": [
        "<think1>3+4=7</think1><think2>4+3=7</think2><summary>7</summary> \\boxed{7}",
        "<think1>a</think1><summary>s</summary> \\boxed{7}",
        "plain \\boxed{8}",
    ],
}
GOLD = "7"


@pytest.mark.parametrize("grammar, scheme, step", [("parallel_r1", "tiered", 1), ("parallel_r1", "npr_format", 1),
                                                   ("npr", "alternating", 9), ("parathinker", "parallel_x_accuracy", 3)])
def test_filter_rl_and_score_agree(tmp_path, grammar, scheme, step):
    texts = COMPLETIONS[grammar]
    raw = tmp_path / "raw.jsonl"
    raw.write_text("".join(json.dumps({"problem": f"p{i}", "answer": GOLD, "response": t}) + "\n"
                           for i, t in enumerate(texts)))

    out = tmp_path / "scored.jsonl"
    res = subprocess.run([sys.executable, "-m", "parathink.cli", "score", str(raw), "--format", grammar,
                          "--scheme", scheme, "--step", str(step), "--output", str(out)], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    cli = [json.loads(line) for line in out.read_text().splitlines()]

    judged = filter_records(read_raw(raw), FilterConfig(grammar=grammar, min_chars=0, max_chars=10_000)).judged

    fn = get_reward(scheme)
    rl = [score(0, SimpleNamespace(response_ids=[0]), t, GOLD, grammar, fn, step) for t in texts]

    assert len(cli) == len(judged) == len(rl) == len(texts)
    for text, c, j, r in zip(texts, cli, judged, rl):
        assert c["valid"] == j.valid == r.trace.valid, text
        assert c["parallel"] == j.parallel == r.trace.parallel, text
        assert c["blocks"] == j.num_blocks == len(r.trace.blocks), text
        assert c["errors"] == r.trace.errors == [x.split(":", 1)[1] for x in j.reasons if x.startswith("format:")]
        assert c["correct"] == j.correct == r.correct, text
        assert c["extracted"] == j.extracted, text
        assert c["reward"] == r.reward, text
    # the cases cover both verdicts of each kind, so agreement is not agreement on a constant
    assert {c["valid"] for c in cli} == {True, False} and {c["correct"] for c in cli} == {True, False}
