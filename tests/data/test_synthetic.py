"""The synthetic domain: levels as docs/calibration.md measured them, determinism, disjoint splits, worked solutions."""

import re

import pytest

from parathink.data import synthetic
from parathink.data.prompts import PLAIN_TEMPLATE


@pytest.mark.parametrize("level", ["easy", "hard"])
def test_records_follow_the_schema_and_the_level(level):
    spec = synthetic.LEVELS[level]
    for r in synthetic.generate(level, "train", 300, seed=3):
        assert set(r) >= {"id", "source", "problem", "answer", "level", "start", "ops"}
        assert r["source"] == "synthetic" and r["level"] == level
        assert spec.min_steps <= len(r["ops"]) <= spec.max_steps
        assert spec.start_range[0] <= r["start"] <= spec.start_range[1]
        values = synthetic.running_values(r["start"], r["ops"])
        assert all(0 <= v <= spec.max_value for v in values)
        assert r["answer"] == str(values[-1])
        assert {op for op, _ in r["ops"]} <= set(spec.ops)
        if level == "hard":
            assert any(op in "*/" for op, _ in r["ops"])
        for op, n in r["ops"]:
            if op in "*/":
                assert 2 <= n <= 9
            else:
                assert spec.add_range[0] <= n <= spec.add_range[1]
        # Every operand is stated in the words of the problem, in order.
        assert [int(x) for x in re.findall(r"\d+", r["problem"])] == [r["start"]] + [n for _, n in r["ops"]]


def test_deterministic_by_seed_and_distinct():
    a = synthetic.generate("easy", "train", 200, seed=7)
    assert a == synthetic.generate("easy", "train", 200, seed=7)
    assert a != synthetic.generate("easy", "train", 200, seed=8)
    assert len({r["problem"] for r in a}) == len({r["id"] for r in a}) == 200
    # A prefix of a longer draw: asking for more never reshuffles the first ones.
    assert synthetic.generate("easy", "train", 50, seed=7) == a[:50]


@pytest.mark.parametrize("level", ["easy", "hard"])
def test_train_and_test_never_share_a_problem_whatever_the_seeds(level):
    train = synthetic.generate(level, "train", 2000, seed=0)
    test = synthetic.generate(level, "test", 300, seed=1) + synthetic.generate(level, "test", 300, seed=0)

    def arithmetic(r):
        return (r["start"], tuple(map(tuple, r["ops"])))

    assert not {arithmetic(r) for r in train} & {arithmetic(r) for r in test}
    assert all(r["split"] == "test" for r in test) and all(r["split"] == "train" for r in train)


def test_worked_solution_is_one_line_per_operation_and_ends_boxed():
    r = {"start": 12, "ops": [["+", 5], ["*", 3], ["/", 3], ["-", 4]]}
    assert synthetic.worked_solution(r) == "12 + 5 = 17\n17 * 3 = 51\n51 / 3 = 17\n17 - 4 = 13\n\\boxed{13}"
    for rec in synthetic.generate("hard", "test", 50):
        sol = synthetic.worked_solution(rec)
        assert sol.endswith("\\boxed{" + rec["answer"] + "}")
        assert len(sol.splitlines()) == len(rec["ops"]) + 1


def test_slipped_solution_has_one_wrong_step_carried_on_faithfully():
    import random

    rng = random.Random(0)
    for rec in synthetic.generate("hard", "train", 50):
        right, slip = synthetic.worked_solution(rec).splitlines(), synthetic.slipped_solution(rec, rng).splitlines()
        assert len(slip) == len(right) and slip[-1] != right[-1]  # same shape, wrong answer
        first = next(i for i, (a, b) in enumerate(zip(right, slip)) if a != b)
        assert slip[first].rsplit(" ", 1)[0] == right[first].rsplit(" ", 1)[0]  # the slip is in the result
        assert 1 <= abs(int(slip[first].split()[-1]) - int(right[first].split()[-1])) <= 9
        for line, nxt in zip(slip[first:-2], slip[first + 1:-1]):  # each later line starts from the wrong value
            v, op, n, _, out = nxt.split()
            assert v == line.split()[-1] and int(out) == synthetic._apply(int(v), op, int(n))
        assert slip[-1] == "\\boxed{" + slip[-2].split()[-1] + "}"


def test_corpus_mixes_levels_with_the_prompt_template():
    texts = synthetic.corpus(10, seed=0)
    assert len(texts) == 10
    head = PLAIN_TEMPLATE.split("{problem}")[0]
    assert all(t.startswith(head) and "\\boxed{" in t for t in texts)
    assert sum("*" in t or "/" in t for t in texts) >= 5  # the hard half


@pytest.mark.parametrize("args, word", [(("medium", "train", 3), "level"), (("easy", "dev", 3), "split"),
                                        (("easy", "train", -1), "n")])
def test_bad_arguments_name_what_was_wrong(args, word):
    with pytest.raises(ValueError, match=word):
        synthetic.generate(*args)
