"""The eval stage's test sets: which are configured, and each one's problems and k, as the stage samples them.

Read by the stage (``stages/eval/``) and by its gate (``stages/eval/gate.py``: every set complete),
so that both count the same samples.
"""

from __future__ import annotations

from omegaconf import DictConfig

from parathink.errors import ConfigError
from parathink.logs import log

SET_KEYS = ("k",)  # keys of an eval set entry that are not problem-source keys


def active_sets(cfg: DictConfig) -> dict:
    """The configured test sets; an experiment disables an inherited one by setting it to null."""
    return {name: spec for name, spec in cfg.eval.sets.items() if spec is not None}


def _problems(spec: dict, seed: int) -> list[dict]:
    from parathink.data.sources import load_problems

    return load_problems({k: v for k, v in spec.items() if k not in SET_KEYS}, seed=seed)


def _set_k(name: str, spec: dict, records: list[dict]) -> dict:
    """The set's k: the config's, else how many rows repeat each problem in its file (Parallel-R1's combined
    file: 16 for AIME and AMC, 1 for MATH); ``k_from`` and ``repeats`` go into the set's results."""
    from parathink.data.sources import repeats

    counts = repeats(records) or {1: 0}
    file_k = next(iter(counts)) if len(counts) == 1 else None
    if spec.get("k") is not None:
        k = int(spec["k"])
        if file_k not in (None, 1, k):
            log(f"eval: {name}: k={k} from the config; its file repeats each problem {file_k} times")
        return {"k": k, "k_from": "config", "repeats": file_k}
    if file_k is None:
        mixed = ", ".join(f"{n} problems x{r}" for r, n in sorted(counts.items()))
        raise ConfigError(f"eval.sets.{name}.k: not set, and its rows per problem differ ({mixed}); set k")
    return {"k": file_k, "k_from": "repeats", "repeats": file_k}


def problems_and_k(name: str, spec: dict, seed: int) -> tuple[list[dict], dict]:
    """The set's problems and its k (with where k came from), as the stage samples them."""
    records = _problems(spec, seed)
    return records, _set_k(name, spec, records)
