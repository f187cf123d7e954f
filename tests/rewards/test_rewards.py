import pytest

from parathink.formats import parse
from parathink.rewards import REWARDS, get_reward

PARALLEL = parse("<Parallel><Path>a</Path><Path>b</Path></Parallel><Summary>s</Summary> \\boxed{1}")
PLAIN = parse("just \\boxed{1}")
BROKEN = parse("<Parallel><Path>a</Path></Parallel><Summary>s</Summary> \\boxed{1}")
assert PARALLEL.parallel and PLAIN.valid and not PLAIN.parallel and not BROKEN.valid


def test_registry_names():
    assert set(REWARDS) == {"accuracy", "parallel_x_accuracy", "tiered", "alternating", "scaffold", "npr_format"}
    with pytest.raises(ValueError, match="unknown reward scheme 'acc'"):
        get_reward("acc")


@pytest.mark.parametrize(
    "name, trace, correct, expected",
    [
        ("accuracy", PLAIN, True, 1.0), ("accuracy", PARALLEL, False, -1.0), ("accuracy", BROKEN, True, 1.0),
        ("parallel_x_accuracy", PARALLEL, True, 1.0), ("parallel_x_accuracy", PLAIN, True, -1.0),
        ("parallel_x_accuracy", PARALLEL, False, -1.0), ("parallel_x_accuracy", BROKEN, True, -1.0),
        ("tiered", PARALLEL, True, 1.2), ("tiered", PLAIN, True, 1.0), ("tiered", BROKEN, True, -1.0),
        ("tiered", PARALLEL, False, -1.0),
    ],
)
def test_table(name, trace, correct, expected):
    assert get_reward(name)(trace, correct, 1) == expected


def test_alternating_windows():
    fn = get_reward("alternating")
    got = [fn(PARALLEL, True, s) for s in range(1, 22)]
    # (s-1) mod 10 < 8 -> accuracy (1.0), else tiered (1.2 for a parallel correct trace)
    assert got == [1.0] * 8 + [1.2, 1.2] + [1.0] * 8 + [1.2, 1.2] + [1.0]
    with pytest.raises(ValueError):
        fn(PARALLEL, True, 0)


def test_scaffold_switches_to_accuracy():
    default = get_reward("scaffold")
    assert default(PARALLEL, True, 200) == 1.2 and default(PARALLEL, True, 201) == 1.0
    early = get_reward("scaffold", switch_step=9)
    assert early(PARALLEL, True, 9) == 1.2 and early(PARALLEL, True, 10) == 1.0


def test_npr_format():
    npr_ok = parse("<guideline><plan>1: a</plan></guideline><step>1: a</step><takeaway>t</takeaway>", "npr")
    npr_bad = parse("<guideline><plan>1: a</plan></guideline><takeaway>t</takeaway>", "npr")
    fn = get_reward("npr_format")
    assert fn(npr_ok, True, 1) == 1.0 and fn(npr_ok, False, 1) == -1.0
    bad = fn(npr_bad, True, 1)
    assert -2.0 < bad <= -1.5
    assert -2.0 < fn(parse("no block", "npr"), True, 1) < -1.0
