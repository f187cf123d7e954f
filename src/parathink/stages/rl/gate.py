"""The gate after every GRPO-family stage (the four of ``stages/rl/``), from its own records.

Read from the stage's ``metrics.jsonl`` (one line per step) and its manifest metrics (the start/end probe of
``training.rl``); no model is loaded:
- every configured step ran (``steps``): the ``max_minutes`` safety stop did not cut RL short;
- no step with a non-finite loss or reward (each such step was skipped: the stage trained on less than it says);
- the probe reward not collapsed: at the end at least ``min_probe_reward`` (the Parallel-R1 rewards lie in
  [-1, 1.2]; -1 is every rollout wrong or unformatted, what an RL stage after an undertrained SFT sees for its whole
  budget) and not more than ``max_probe_reward_drop`` below the start's, on the same problems and draws;
- the parallel rate not below ``min_parallel_rate`` over the last ``window`` steps, for the stages whose reward
  asks for the format (R_parallel x R_acc on the easy problems; the scaffold phase of ``reward=scaffold``);
- the KL to the reference model, over the last ``window`` steps, within ``max_kl`` (only with ``kl_coef`` > 0).
"""

from __future__ import annotations

import math
from pathlib import Path

from parathink import jsonl
from parathink.quality.expectations import Expectation, at_least, at_most, equals, not_applicable
from parathink.quality.gate import GateInput, gate_section


def _finite(x) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x)


def read_steps(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [row for _, row in jsonl.read(path)]


def nonfinite_steps(rows: list[dict]) -> int:
    """Steps skipped for a NaN loss or reward, or logged with a non-finite loss (written as null)."""
    return sum(1 for r in rows if r.get("skipped_nan") or ("loss" in r and not _finite(r["loss"])))


def _tail_mean(rows: list[dict], key: str, window: int) -> float:
    values = [r[key] for r in rows[-window:] if _finite(r.get(key))]
    return sum(values) / len(values) if values else float("nan")


def _reward_checks(metrics: dict, g: dict) -> list[Expectation]:
    if "probe_reward_end" in metrics:
        name, end, start, note = "probe_reward_end", metrics["probe_reward_end"], metrics["probe_reward_start"], \
            f"{int(metrics.get('probe_n', 0))} probe samples"
    else:  # no probe (probe_prompts=0): the training reward of the first and last steps stands in
        name, end, start, note = "train_reward_last", metrics.get("reward_last"), metrics.get("reward_first"), \
            "training reward, probe_prompts=0"
    checks = []
    if g["min_probe_reward"] is not None:
        checks.append(at_least(name, end, g["min_probe_reward"], note))
    if g["max_probe_reward_drop"] is not None and _finite(start):
        checks.append(at_least(f"{name}_vs_start", end, round(start - g["max_probe_reward_drop"], 6),
                               f"start {start:.3f} - {g['max_probe_reward_drop']}"))
    return checks


def _parallel_check(rows: list[dict], rl, g: dict) -> Expectation:
    if g["min_parallel_rate"] is None:
        return not_applicable("parallel_rate", f"no floor for reward={rl.reward}")
    phase = [r for r in rows if rl.reward != "scaffold" or r["step"] <= rl.scaffold_steps]
    where = f"last {min(g['window'], len(phase))} steps" + (" of the scaffold phase" if rl.reward == "scaffold" else "")
    return at_least("parallel_rate", _tail_mean(phase, "parallel_rate", g["window"]), g["min_parallel_rate"], where)


def _kl_check(rows: list[dict], rl, g: dict) -> Expectation:
    if rl.kl_coef <= 0:
        return not_applicable("kl", "no reference model (kl_coef=0)")
    if g["max_kl"] is None:
        return not_applicable("kl", "max_kl=null")
    return at_most("kl", _tail_mean(rows, "kl", g["window"]), g["max_kl"], f"last {min(g['window'], len(rows))} steps")


def _steps_check(rows: list[dict], rl, stage: str) -> Expectation:
    """Every configured step ran: a stage is its ``steps`` steps, so a run cut short by the ``max_minutes``
    safety stop is a smaller stage than the config promises, and is not published as the stage."""
    short = len(rows) < rl.steps
    return equals("steps", len(rows), rl.steps,
                  f"the safety stop {stage}.max_minutes={rl.max_minutes} cut RL short" if short else "")


def rl_gate(cfg, stage: str, out: GateInput) -> list[Expectation]:
    from omegaconf import OmegaConf

    from parathink.config.rl import RLConfig

    g = gate_section(cfg, stage)
    rl = RLConfig.from_cfg(OmegaConf.to_container(cfg[stage], resolve=True), stage)
    rows = read_steps(out.folder / "metrics.jsonl")
    return [_steps_check(rows, rl, stage),
            at_most("nonfinite_steps", nonfinite_steps(rows), g["max_nonfinite_steps"], "NaN loss or reward"),
            *_reward_checks(out.metrics, g), _parallel_check(rows, rl, g), _kl_check(rows, rl, g)]
