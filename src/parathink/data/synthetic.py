"""The synthetic arithmetic domain: GSM8K-like word problems with integer answers (docs/design.md, "The tiny default").

A problem is a start value and a short chain of operations on one quantity ("Mia has 12 marbles. She finds 5
more. She gives away 3. How many marbles does Mia have now?"). Two levels, as docs/calibration.md measured them:

- ``easy``: 2-3 steps of + and - on numbers up to 20 (Parallel-R1's GSM8K stage: learn the format on easy data);
- ``hard``: 4-6 steps from a start of 5-50 with at least one x (by 2-9) or exact / (by 2-9), the running value
  never above 200 (the DAPO-like stage).

Determinism and splits. ``generate`` is a pure function of its arguments. The split a problem belongs to is a
hash of its arithmetic alone (start and operations, not its wording), independent of the seed, so a train set and
a test set drawn with any seeds never share a problem, not even one reworded.

Records follow the source schema (``id, source, problem, answer, level``) plus ``start`` and ``ops`` (a list of
``[op, operand]`` with op in ``+ - * /``) which the scripted teacher and ``worked_solution`` read.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from parathink.errors import BadInput

SOURCE = "synthetic"
LEVELS_ORDER = ("easy", "hard")
SPLITS = ("train", "test")
# Far beyond any real set (GSM8K has 7.5k train problems, DAPO-Math-17k 17k); a typo such as 1e9 would otherwise
# run for an hour and fill memory before anything says so.
MAX_PROBLEMS = 1_000_000


@dataclass(frozen=True)
class LevelSpec:
    """What a problem of one level may contain (docs/calibration.md, "Setup")."""

    min_steps: int
    max_steps: int
    start_range: tuple[int, int]  # inclusive
    add_range: tuple[int, int]  # operand of + and -, inclusive
    ops: tuple[str, ...]  # operations a step may use
    max_value: int  # the running value stays in [0, max_value]
    needs_mul_or_div: bool = False  # at least one * or / per problem
    factor_range: tuple[int, int] = (2, 9)  # operand of * and /, inclusive
    # Relative odds of each op at a free step (the forced * or / step aside): mostly + and -, so a problem
    # stays a GSM8K-like chain rather than a tower of products.
    op_weights: tuple[tuple[str, float], ...] = (("+", 1.0), ("-", 1.0), ("*", 0.4), ("/", 0.4))


LEVELS: dict[str, LevelSpec] = {
    "easy": LevelSpec(min_steps=2, max_steps=3, start_range=(1, 20), add_range=(1, 20), ops=("+", "-"),
                      max_value=40),
    "hard": LevelSpec(min_steps=4, max_steps=6, start_range=(5, 50), add_range=(1, 50), ops=("+", "-", "*", "/"),
                      max_value=200, needs_mul_or_div=True),
}

# 1 problem in TEST_MODULUS lands in the test split (10%); the split is a property of the problem itself.
TEST_MODULUS = 10

_NAMES = [("Mia", "She", "her"), ("Tom", "He", "his"), ("Ava", "She", "her"), ("Leo", "He", "his"),
          ("Zoe", "She", "her"), ("Sam", "He", "his"), ("Ivy", "She", "her"), ("Ben", "He", "his"),
          ("Nora", "She", "her"), ("Max", "He", "his"), ("Lily", "She", "her"), ("Omar", "He", "his")]
_ITEMS = ["apples", "marbles", "stickers", "coins", "books", "pencils", "cards", "shells", "stamps", "cookies",
          "beads", "toy cars"]
# One phrase per op keeps the text short; a few variants keep it GSM8K-like. {n} is the operand.
_PHRASES = {
    "+": ["{P} buys {n} more.", "{P} finds {n} more.", "{P} gets {n} more from a friend."],
    "-": ["{P} gives away {n}.", "{P} loses {n}.", "{P} sells {n}."],
    "*": ["Then {p} number of {item} becomes {n} times as large.", "{P} ends up with {n} times as many."],
    "/": ["{P} splits them into {n} equal groups and keeps one group.",
          "{P} divides them equally into {n} bags and keeps one bag."],
}


def _apply(value: int, op: str, operand: int) -> int:
    if op == "+":
        return value + operand
    if op == "-":
        return value - operand
    if op == "*":
        return value * operand
    return value // operand  # "/" is only drawn when exact


def running_values(start: int, ops: list[list]) -> list[int]:
    """The value after each operation: ``[v1, ..., vk]`` (the last one is the answer)."""
    values, v = [], start
    for op, operand in ops:
        v = _apply(v, op, int(operand))
        values.append(v)
    return values


def split_of(start: int, ops: list[list]) -> str:
    """The split a problem belongs to, from its arithmetic alone (seed- and wording-independent)."""
    key = f"{start}|" + "|".join(f"{op}{n}" for op, n in ops)
    bucket = int.from_bytes(hashlib.sha1(key.encode()).digest()[:4], "big") % TEST_MODULUS
    return "test" if bucket == 0 else "train"


def _legal_steps(value: int, spec: LevelSpec) -> list[tuple[str, int]]:
    lo, hi = spec.add_range
    flo, fhi = spec.factor_range
    steps: list[tuple[str, int]] = []
    for op in spec.ops:
        if op in "+-":
            steps += [(op, n) for n in range(lo, hi + 1) if 0 <= _apply(value, op, n) <= spec.max_value]
        elif op == "*":
            steps += [(op, n) for n in range(flo, fhi + 1) if value * n <= spec.max_value and value > 0]
        elif op == "/":
            steps += [(op, n) for n in range(flo, fhi + 1) if value > 0 and value % n == 0]
    return steps


def _draw_arithmetic(rng: random.Random, spec: LevelSpec) -> tuple[int, list[list]] | None:
    """One start value and chain of operations, or None when a draw painted itself into a corner."""
    start = rng.randint(*spec.start_range)
    k = rng.randint(spec.min_steps, spec.max_steps)
    # Pick the step that must be * or / first, so every hard problem has one (uniform over positions).
    forced = rng.randrange(k) if spec.needs_mul_or_div else -1
    value, ops = start, []
    for i in range(k):
        legal = _legal_steps(value, spec)
        if i == forced:
            legal = [s for s in legal if s[0] in "*/"]
        if not legal:
            return None
        # Choose the op first, then the operand: otherwise + and - (many operands) would crowd out * and /.
        by_op: dict[str, list[tuple[str, int]]] = {}
        for s in legal:
            by_op.setdefault(s[0], []).append(s)
        names = sorted(by_op)
        weights = dict(spec.op_weights)
        op = rng.choices(names, weights=[weights.get(o, 1.0) for o in names])[0]
        _, operand = rng.choice(by_op[op])
        ops.append([op, operand])
        value = _apply(value, op, operand)
    return start, ops


def _word_problem(rng: random.Random, start: int, ops: list[list]) -> str:
    name, pron, poss = rng.choice(_NAMES)
    item = rng.choice(_ITEMS)
    parts = [f"{name} has {start} {item}."]
    for op, n in ops:
        parts.append(rng.choice(_PHRASES[op]).format(P=pron, p=poss, n=n, item=item))
    parts.append(f"How many {item} does {name} have now?")
    return " ".join(parts)


def _record(level: str, split: str, start: int, ops: list[list], problem: str) -> dict:
    digest = hashlib.sha1(problem.encode()).hexdigest()[:12]
    return {"id": f"syn-{level}-{digest}", "source": SOURCE, "problem": problem,
            "answer": str(running_values(start, ops)[-1]), "level": level, "split": split,
            "start": start, "ops": ops}


def _check(level: str, split: str, n: int) -> LevelSpec:
    if level not in LEVELS:
        raise ValueError(f"synthetic level {level!r} is unknown; expected one of {sorted(LEVELS)}")
    if split not in SPLITS:
        raise ValueError(f"synthetic split {split!r} is unknown; expected one of {list(SPLITS)}")
    if n < 0:
        raise ValueError(f"synthetic n must be >= 0, got {n}")
    return LEVELS[level]


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_spec(spec: Mapping[str, Any], where: str, seed: int = 0) -> tuple[str, str, int, int]:
    """(level, split, n, seed) of a problem-set entry ``{source: synthetic, level, split, n[, seed]}``; BadInput
    naming ``where`` and the key when one is missing, unknown, not an integer or out of bounds."""
    level, split, n, own_seed = spec.get("level"), spec.get("split"), spec.get("n"), spec.get("seed", seed)
    if level not in LEVELS:
        raise BadInput(f"{where}.level: {level!r} is not one of {', '.join(LEVELS_ORDER)}")
    if split not in SPLITS:
        raise BadInput(f"{where}.split: {split!r} is not one of {', '.join(SPLITS)}")
    if not _is_int(n) or not 1 <= n <= MAX_PROBLEMS:
        raise BadInput(f"{where}.n: must be an integer from 1 to {MAX_PROBLEMS:,}, got {n!r}")
    if not _is_int(own_seed):
        raise BadInput(f"{where}.seed: must be an integer, got {own_seed!r}")
    return level, split, n, own_seed


def iter_problems(level: str, split: str, seed: int = 0) -> Iterator[dict]:
    """Endless stream of distinct problems of one level and split, deterministic by seed."""
    spec = _check(level, split, 0)
    rng = random.Random(f"parathink-synthetic|{level}|{split}|{seed}")
    seen: set[str] = set()
    while True:
        drawn = _draw_arithmetic(rng, spec)
        if drawn is None:
            continue
        start, ops = drawn
        if split_of(start, ops) != split:
            continue
        problem = _word_problem(rng, start, ops)
        if problem in seen:
            continue
        seen.add(problem)
        yield _record(level, split, start, ops, problem)


def generate(level: str, split: str, n: int, seed: int = 0) -> list[dict]:
    """``n`` distinct problems of ``level`` (easy | hard) from ``split`` (train | test), deterministic by seed."""
    _check(level, split, n)
    stream = iter_problems(level, split, seed)
    return [next(stream) for _ in range(n)]


def _solution_text(start: int, ops: list[list], values: list[int]) -> str:
    lines, v = [], start
    for (op, n), nxt in zip(ops, values):
        lines.append(f"{v} {op} {n} = {nxt}")
        v = nxt
    lines.append(f"\\boxed{{{v}}}")
    return "\n".join(lines)


def worked_solution(record: dict) -> str:
    """The sequential solution the tiny base is pretrained on: one line per operation, running value carried.

    ``12 + 5 = 17`` / ``17 - 3 = 14`` / ``\\boxed{14}``. Kept this regular on purpose: a ~1M-parameter model
    learns it in minutes (docs/calibration.md, "Base pretraining").
    """
    start, ops = int(record["start"]), record["ops"]
    return _solution_text(start, ops, running_values(start, ops))


_SLIPS = [d for d in range(-9, 10) if d]  # how far a slipped result lands from the right one


def slipped_solution(record: dict, rng: random.Random) -> str:
    """A worked solution with one arithmetic slip (a result off by 1-9 at a random step), carried on faithfully
    from the wrong value, so its answer is wrong: the kind of wrong path the tiny model writes itself.

    Division after the slip floors (the slip can make it inexact). A slip that a later floor erases is redrawn.
    """
    start, ops = int(record["start"]), record["ops"]
    answer = running_values(start, ops)[-1]
    while True:
        step, delta = rng.randrange(len(ops)), rng.choice(_SLIPS)
        values, v = [], start
        for i, (op, n) in enumerate(ops):
            v = _apply(v, op, int(n)) + (delta if i == step else 0)
            values.append(v)
        if values[-1] != answer:
            return _solution_text(start, ops, values)


def corpus(n: int, seed: int = 0) -> list[str]:
    """``n`` texts (prompt + worked solution, half easy, half hard, train split) for tokenizer training."""
    from parathink.data.prompts import build_prompt

    per_level = [n - n // 2, n // 2]
    texts: list[str] = []
    for level, k in zip(LEVELS_ORDER, per_level):
        texts += [build_prompt(r["problem"]) + worked_solution(r) for r in generate(level, "train", k, seed)]
    return texts
