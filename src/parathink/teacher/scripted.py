"""The ``scripted`` teacher: parallel traces for the synthetic domain, written from each problem's arithmetic.

Parallel-R1 (Sec. 3.1) asks a strong teacher for paths that explore different approaches and a summary that
reconciles them. On the synthetic domain we can write such traces exactly. Each path follows a different
strategy, chosen per problem in the configured order among those that apply:

- ``left_to_right``: the base's own skill, one operation per line with the running value carried;
- ``regroup``: every run of two or more consecutive + / - steps is first combined into one net change,
  which is then applied (a different order of the same arithmetic);
- ``backwards``: left to right, then the chain undone from the result back to the start as a check.

Each path ends with ``\\boxed{N}``; the summary states the vote (``traces.voted_trace``; every path agrees here).
docs/calibration.md warns that a strategy harder than the base's skill (here: ``regroup``'s signed sums) costs a
tiny model accuracy after SFT; the strategy list is therefore configuration, not code.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from parathink.data.synthetic import running_values
from parathink.teacher.traces import voted_trace

_INVERSE = {"+": "-", "-": "+", "*": "/", "/": "*"}


def _lines(start: int, ops: list[list]) -> list[str]:
    out, v = [], start
    for (op, n), nxt in zip(ops, running_values(start, ops)):
        out.append(f"{v} {op} {n} = {nxt}")
        v = nxt
    return out


def left_to_right(start: int, ops: list[list]) -> str | None:
    answer = running_values(start, ops)[-1]
    return "\n".join(_lines(start, ops) + [f"\\boxed{{{answer}}}"])


def _runs(ops: list[list]) -> list[list[list]]:
    """Ops split into maximal runs of + / - and single * or / steps."""
    runs: list[list[list]] = []
    for op, n in ops:
        if op in "+-" and runs and runs[-1][0][0] in "+-":
            runs[-1].append([op, n])
        else:
            runs.append([[op, n]])
    return runs


def regroup(start: int, ops: list[list]) -> str | None:
    runs = _runs(ops)
    if not any(len(r) > 1 for r in runs):
        return None  # nothing to regroup: this path would repeat left_to_right
    out, v = [], start
    for run in runs:
        if len(run) == 1:
            op, n = run[0]
            nxt = running_values(v, [run[0]])[-1]
            out.append(f"{v} {op} {n} = {nxt}")
            v = nxt
            continue
        net = sum(n if op == "+" else -n for op, n in run)
        first_op, first_n = run[0]
        terms = ("-" if first_op == "-" else "") + str(first_n)
        terms += "".join(f" {op} {n}" for op, n in run[1:])
        out.append(f"{terms} = {net}")
        nxt = v + net
        out.append(f"{v} + {net} = {nxt}" if net >= 0 else f"{v} - {-net} = {nxt}")
        v = nxt
    return "\n".join(out + [f"\\boxed{{{v}}}"])


def backwards(start: int, ops: list[list]) -> str | None:
    values = running_values(start, ops)
    out = _lines(start, ops)
    v = values[-1]
    checks = []
    for op, n in reversed(ops):
        prev = running_values(v, [[_INVERSE[op], n]])[-1]
        checks.append(f"{v} {_INVERSE[op]} {n} = {prev}")
        v = prev
    out += ["Check:"] + checks + [f"{v} is the start.", f"\\boxed{{{values[-1]}}}"]
    return "\n".join(out)


STRATEGIES: dict[str, Callable[[int, list[list]], str | None]] = {
    "left_to_right": left_to_right,
    "regroup": regroup,
    "backwards": backwards,
}


def scripted_trace(record: dict, strategies: list[str], num_paths: int, prefix_steps: int = 0) -> str:
    """The parallel trace of one synthetic record.

    ``prefix_steps`` operations are solved sequentially before the block (the block then covers the rest),
    so the block need not sit at the start; 0 puts the whole solution in parallel.
    """
    if "start" not in record or "ops" not in record:
        raise ValueError(f"scripted teacher: record {record.get('id')!r} has no 'start'/'ops' "
                         f"(only the synthetic domain can be scripted)")
    start, ops = int(record["start"]), [list(o) for o in record["ops"]]
    k = max(0, min(prefix_steps, len(ops) - 1))
    prefix = "\n".join(_lines(start, ops[:k]))
    block_start = running_values(start, ops[:k])[-1] if k else start
    paths = []
    for name in strategies:
        text = STRATEGIES[name](block_start, ops[k:])
        if text is not None:
            paths.append(text)
        if len(paths) == num_paths:
            break
    if len(paths) < 2:  # every block needs two paths: fall back to a second left-to-right
        paths.append(left_to_right(block_start, ops[k:]))
    response, _, _ = voted_trace(paths, prefix)
    return response


class ScriptedTeacher:
    """Backend ``scripted``: no model, exact traces (see the module docstring)."""

    name = "scripted"

    def __init__(self, strategies: list[str], num_paths: int = 2, prefix_steps: int = 0):
        unknown = [s for s in strategies if s not in STRATEGIES]
        if unknown:
            raise ValueError(f"teacher.scripted.strategies: unknown {unknown}; expected among {sorted(STRATEGIES)}")
        if num_paths < 2:
            raise ValueError(f"teacher.scripted.num_paths must be >= 2, got {num_paths}")
        self.strategies, self.num_paths, self.prefix_steps = list(strategies), num_paths, prefix_steps

    def generate(self, problems: list[dict]) -> Iterator[dict]:
        for p in problems:
            yield {**p, "response": scripted_trace(p, self.strategies, self.num_paths, self.prefix_steps)}
