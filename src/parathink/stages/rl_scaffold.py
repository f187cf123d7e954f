"""rl_scaffold: hard problems with the S2 alternating reward for the first steps, then accuracy alone
(Parallel-R1 §4.3 and §5, "parallel thinking as a mid-training exploration scaffold").

Settings: hydra_conf/stage/rl_scaffold.yaml. The loop is parathink.training.rl (shared by every GRPO-family stage).
"""

from __future__ import annotations

from parathink.quality.rl_gate import KEYS as GATE_KEYS  # noqa: F401  (the runner's)

STAGE = "rl_scaffold"
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
