"""The scripted teacher: every trace parallel and correct, paths by genuinely different strategies."""

import pytest

from parathink.data import synthetic
from parathink.formats import parse
from parathink.grading import grade
from parathink.teacher.scripted import ScriptedTeacher, backwards, left_to_right, regroup, scripted_trace


@pytest.mark.parametrize("level", ["easy", "hard"])
@pytest.mark.parametrize("prefix_steps", [0, 1])
def test_every_scripted_trace_is_parallel_and_correct(level, prefix_steps):
    for r in synthetic.generate(level, "train", 300, seed=1):
        text = scripted_trace(r, ["left_to_right", "regroup", "backwards"], 3, prefix_steps)
        trace = parse(text)
        assert trace.parallel, (text, trace.errors)
        assert grade(text, r["answer"]) == (r["answer"], True)
        # Each path carries its own result where the summary can copy it.
        for path in trace.blocks[0].paths:
            assert path.text.rstrip().endswith("\\boxed{" + r["answer"] + "}")
        assert f"Most give {r['answer']}." in trace.blocks[0].summary.text


def test_strategies_differ_and_compute_the_same_result():
    start, ops = 12, [["+", 5], ["-", 3], ["*", 2], ["+", 4], ["+", 1]]  # 12+5-3=14, *2=28, +4+1=33
    assert left_to_right(start, ops) == "12 + 5 = 17\n17 - 3 = 14\n14 * 2 = 28\n28 + 4 = 32\n32 + 1 = 33\n\\boxed{33}"
    assert regroup(start, ops) == "5 - 3 = 2\n12 + 2 = 14\n14 * 2 = 28\n4 + 1 = 5\n28 + 5 = 33\n\\boxed{33}"
    back = backwards(start, ops)
    assert "Check:\n33 - 1 = 32\n32 - 4 = 28\n28 / 2 = 14\n14 + 3 = 17\n17 - 5 = 12\n12 is the start." in back
    # A run that nets negative is applied as a subtraction.
    assert regroup(20, [["-", 9], ["+", 2]]) == "-9 + 2 = -7\n20 - 7 = 13\n\\boxed{13}"
    # No run of two + / - steps: regrouping would only repeat left_to_right, so it does not apply.
    assert regroup(10, [["+", 2], ["*", 3]]) is None


def test_num_paths_and_fallback_when_a_strategy_does_not_apply():
    r = {"id": "x", "start": 10, "ops": [["+", 2], ["*", 3]]}
    trace = parse(scripted_trace(r, ["regroup", "left_to_right"], 2))
    assert trace.parallel and len(trace.blocks[0].paths) == 2  # regroup skipped, left_to_right twice at worst
    with pytest.raises(ValueError, match="only the synthetic domain"):
        scripted_trace({"id": "gsm8k-1", "problem": "p", "answer": "1"}, ["left_to_right"], 2)
    with pytest.raises(ValueError, match="unknown"):
        ScriptedTeacher(["sideways"], 2)
    with pytest.raises(ValueError, match=">= 2"):
        ScriptedTeacher(["left_to_right"], 1)
