"""The gate after ``eval``: promotion must never compare half an eval.

- every model stage this run trains (``stages`` and ``eval.models`` both name it) was evaluated;
- every evaluated model has every configured set with at least the set's problems x k samples;
- no NaN or infinity in the figures promotion and the tables read (``FIGURES``).
The expected sizes come from the config (the same problem sources the eval stage loads), not from the results
file, so an eval that silently evaluated less cannot vouch for itself.
"""

from __future__ import annotations

import math

from parathink.evaluation import results as results_file
from parathink.quality.expectations import Expectation, at_least, equals
from parathink.quality.gate import GateInput, gate_section

FIGURES = ("accuracy", "pass_at_k", "parallel_rate", "valid_rate")


def expected_samples(cfg, seed: int) -> dict[str, int]:
    """Configured set -> problems x k, as the eval stage would sample it."""
    from omegaconf import OmegaConf

    from parathink.evaluation.sets import active_sets, problems_and_k

    out = {}
    for name, node in active_sets(cfg).items():
        records, k = problems_and_k(name, OmegaConf.to_container(node, resolve=True), seed)
        out[name] = len(records) * int(k["k"])
    return out


def _short_sets(evaluated: dict, expected: dict[str, int]) -> list[str]:
    short = []
    for model, sets in evaluated.items():
        for name, need in expected.items():
            row = sets.get(name)
            if not isinstance(row, dict):
                short.append(f"{model}/{name}: missing")
            elif not isinstance(row.get("n"), int) or row["n"] < need:
                short.append(f"{model}/{name}: {row.get('n')} of {need} samples")
    return short


def _nonfinite(evaluated: dict) -> list[str]:
    return [f"{model}/{name}.{key}" for model, sets in evaluated.items() for name, row in sets.items()
            if isinstance(row, dict) for key in FIGURES
            if not (isinstance(row.get(key), (int, float)) and math.isfinite(row[key]))]


def _listed(items: list[str]) -> str:
    return "; ".join(items[:4]) + (f"; +{len(items) - 4} more" if len(items) > 4 else "")


def eval_gate(cfg, out: GateInput) -> list[Expectation]:
    g = gate_section(cfg, "eval")
    evaluated = results_file.read(out.folder)["stages"]
    trained = [s for s in map(str, cfg.eval.models) if s in [str(x) for x in cfg.get("stages", [])]]
    missing = [s for s in trained if s not in evaluated]
    expected = expected_samples(cfg, out.seed)
    short, nonfinite = _short_sets(evaluated, expected), _nonfinite(evaluated)
    pairs = len(evaluated) * len(expected)
    return [at_least("models_evaluated", len(evaluated), g["min_models"]),
            equals("run_models_missing", len(missing), 0, _listed(missing)),
            equals("sets_complete", pairs - len(short), pairs, _listed(short)),
            equals("nonfinite_figures", len(nonfinite), 0, _listed(nonfinite))]
