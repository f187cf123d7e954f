"""grpo_baseline: the comparison run of Parallel-R1 Table 2, plain GRPO on hard problems from the base
model, causal mode, accuracy reward, no parallel SFT.

Settings: hydra_conf/stage/grpo_baseline.yaml. The loop is parathink.training.rl (shared by every GRPO-family stage).
"""

from __future__ import annotations

from parathink.quality.rl_gate import KEYS as GATE_KEYS  # noqa: F401  (the runner's)

STAGE = "grpo_baseline"
DATA_PARALLEL = True  # under torchrun every process samples and trains its share (parathink.training.rl)


def validate(cfg) -> None:
    from parathink.training.rl import stage_config

    stage_config(cfg, STAGE)


def gate(cfg, out) -> list:
    """No non-finite loss, the probe reward not collapsed, the parallel-rate floor, the KL bound (docs/gates.md)."""
    from parathink.quality.rl_gate import rl_gate

    return rl_gate(cfg, STAGE, out)


def run(cfg, ctx) -> dict[str, float]:
    from parathink.training.rl import run_stage

    return run_stage(cfg, ctx, STAGE)
