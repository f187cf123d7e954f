"""The four GRPO-family stages, one module: they differ only in config (``hydra_conf/stage/rl.yaml`` and each
stage's own file), the loop is ``parathink.training.rl``.

- ``rl_easy``: easy problems, R_parallel x R_acc, from the cold-start SFT model (Parallel-R1 §3.3, stage 1 of RL:
  make the model use the parallel format before the problems get hard);
- ``rl_hard``: hard problems, the accuracy reward (§3.3, stage 2);
- ``rl_scaffold``: hard problems, the S2 alternating reward for the first steps, then accuracy alone (§4.3 and §5,
  "parallel thinking as a mid-training exploration scaffold");
- ``grpo_baseline``: plain GRPO from the base model, causal, accuracy reward (Table 2's baseline).

The runner finds each as ``parathink.stages.rl:<name>`` (``parathink.stages.BUILTIN``), a ``StageSpec`` that reads
the config section of its own name.
"""

from __future__ import annotations

from pathlib import Path

from omegaconf import OmegaConf

from parathink.config.rl import RLConfig
from parathink.config.thresholds import RLThresholds
from parathink.placement.roles import StageRole
from parathink.stages import RL_STAGES
from parathink.stages.contract import Gate, StageSpec
from parathink.training.stage_state import own_training_state


def rl_config(cfg, stage: str) -> RLConfig:
    """``<stage>``'s RLConfig, checked (a ConfigError naming ``<stage>.<key>``); no torch is imported."""
    node = OmegaConf.to_container(cfg[stage], resolve=True)
    if node.get("deepspeed"):  # written relative to the checkout; found in the wheel's copy in a pod
        from parathink.pipeline.compose import resolve_config_path

        node["deepspeed"] = resolve_config_path(str(node["deepspeed"]))
    return RLConfig.from_cfg(node, stage)


def rl_stage(name: str) -> StageSpec:
    """One GRPO-family stage: its section is the config's ``name``."""

    def validate(cfg) -> None:
        rl_config(cfg, name)

    def gate(cfg, out) -> list:
        """No non-finite loss, the probe reward not collapsed, the parallel-rate floor, the KL bound (docs/gates.md)."""
        from parathink.stages.rl.gate import rl_gate

        return rl_gate(cfg, name, out)

    def run(cfg, ctx) -> dict[str, float]:
        """Start from ``<init_from>/model`` and train."""
        from parathink.training.rl import train

        settings = rl_config(cfg, name)
        init_dir = Path(ctx.input(settings.init_from)) / "model"
        return train(settings, ctx, init_dir, stage=name, grammar=str(cfg.format), model_cfg=cfg.get("model"))

    # Under torchrun every process samples and trains its share (parathink.training.rl). A reset of accelerate's and
    # DeepSpeed's process-wide state around the run lets stages follow each other in one process (stage_state says
    # why that, and not a process per stage).
    return StageSpec(run=own_training_state(run), validate=validate, gate=Gate(gate, RLThresholds), data_parallel=True,
                     role=StageRole(memory="rl", trains_model=True))


rl_easy, rl_hard, rl_scaffold, grpo_baseline = (rl_stage(name) for name in RL_STAGES)
