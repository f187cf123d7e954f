"""The data-parallel and DeepSpeed bookkeeping of the RL loop, so that ``rl.py`` reads as the algorithm.

Under a multi-process launch (torchrun, ``accelerate launch``) every process samples its share of a step and
trains on the rollouts it sampled; DDP or DeepSpeed averages the gradients. That is correct only when

- the loss's normaliser and the logged statistics are the whole step's (``StepGroup.sums``);
- every process runs the backward passes the collectives inside them expect (``StepGroup.passes``: a process short
  of them runs zero-weight rows, ``add_zero_weight_rows``);
- only a pass's last micro-batch synchronises (``StepGroup.micro_step``);
- under ZeRO-3, the engine samples with a whole copy of the policy (``sampling_policy``, ``sync_policy``).

One process is the identity of all of this: ``StepGroup`` over ``distributed.Group()`` sums nothing, needs no extra
pass and never skips a synchronisation.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from parathink import distributed
from parathink.config.rl import RLConfig
from parathink.errors import ConfigError


@dataclass
class StepGroup:
    """The processes of one RL update and what they must agree on."""

    accelerator: Any
    procs: distributed.Group

    @property
    def deepspeed(self) -> bool:
        from accelerate.utils import DistributedType

        return self.accelerator.distributed_type == DistributedType.DEEPSPEED

    def sums(self, *values) -> tuple[float, ...]:
        """Each value summed over the processes, in one exchange."""
        return self.procs.sums(*values)

    def any(self, flag: bool) -> bool:
        """True on every process when one says so: the processes take the same branches."""
        return self.procs.any(flag)

    def passes(self, mine: int) -> int:
        """How many micro-batches this process must run when it has ``mine``: under DeepSpeed as many as the busiest
        process (each ZeRO backward reduce-scatters; each ZeRO-3 forward, with or without grad, gathers the
        parameters), under DDP at least one (the pass's last backward all-reduces), alone what it has."""
        if self.deepspeed:
            return max(self.procs.gather(mine))
        return max(mine, 1) if self.procs.size > 1 else mine

    def backward(self, loss: torch.Tensor) -> None:
        """DDP and DeepSpeed average the processes' gradients; each loss is a share of the step's sum."""
        self.accelerator.backward(loss * self.procs.size)

    @contextlib.contextmanager
    def micro_step(self, model, last: bool):
        """One micro-batch's forward and backward. Only the pass's last synchronises: DDP all-reduces in it (no_sync
        must cover the others' forwards too), DeepSpeed takes it as the accumulation boundary and steps in it."""
        if last:
            yield
            return
        state = self.accelerator.gradient_state
        state._set_sync_gradients(False)  # what accelerator.backward hands DeepSpeed as the boundary flag
        try:
            with self.accelerator.no_sync(model):
                yield
        finally:
            state._set_sync_gradients(True)

    def fill_missing_grads(self, model) -> None:
        """A pass in which no rollout was active leaves gradients unset: zero them, so Adam moves as usual.
        (Under DeepSpeed the optimiser has stepped inside the last backward already.)"""
        if self.deepspeed:
            return
        for p in model.parameters():
            if p.requires_grad and p.grad is None:
                p.grad = torch.zeros_like(p)


def add_zero_weight_rows(rollouts: list, tensors: tuple, batches: list[list[int]], need: int,
                         sampled: list) -> tuple[list, tuple, list[list[int]]]:
    """Give a process short of ``need`` micro-batches that many: one more rollout (the first it ``sampled``) with
    zero advantage and a zeroed loss mask, run as each missing micro-batch. Zero loss, zero gradient, the same
    collectives. ``tensors`` are the step's [B, T] tensors and [B] advantages (None for an absent one), each given
    a zero row; the first sets the width."""
    if len(batches) >= need:
        return rollouts, tensors, batches
    rollouts = rollouts + [dataclasses.replace(sampled[0], advantage=0.0)]
    width = max(tensors[0].shape[1], len(rollouts[-1].sample.response_ids))
    grown = tuple(None if t is None else _zero_row(t, width) for t in tensors)
    return rollouts, grown, batches + [[len(rollouts) - 1]] * (need - len(batches))


def _zero_row(t: torch.Tensor, width: int) -> torch.Tensor:
    """``t`` [B, T] zero-padded to ``width`` columns, with one more row of zeros: [B + 1, max(T, width)];
    ``t`` [B] with one more zero: [B + 1]."""
    if t.dim() == 1:
        return torch.cat([t, t.new_zeros(1)])
    out = t.new_zeros(t.shape[0] + 1, max(t.shape[1], width))
    out[:t.shape[0], :t.shape[1]] = t
    return out


# ----------------------------------------------------------------------------------------------------------------
# the launch: DeepSpeed settings, what is refused, the module the engine samples with


def deepspeed_plugin(cfg: RLConfig):
    """accelerate's DeepSpeed plugin from ``cfg.deepspeed`` (a JSON file, ZeRO stage 0-3), or None.

    The JSON's batch and clipping values are set from the RL settings: one micro-batch of ``micro_batch_size``
    rollouts per backward and one accumulation step, because the loop marks the step's last backward as the
    boundary itself (an RL step has as many micro-batches as it kept rollouts, not a fixed count).
    """
    if not cfg.deepspeed:
        return None
    from accelerate.utils import DeepSpeedPlugin

    ds = json.loads(Path(cfg.deepspeed).read_text(encoding="utf-8"))
    ds.pop("train_batch_size", None)
    ds.update({"train_micro_batch_size_per_gpu": cfg.micro_batch_size, "gradient_accumulation_steps": 1,
               "gradient_clipping": max(0.0, cfg.grad_clip)})
    for precision in ("bf16", "fp16"):
        ds[precision] = {**ds.get(precision, {}), "enabled": cfg.mixed_precision == precision}
    zero = ds.setdefault("zero_optimization", {})
    if zero.get("reduce_bucket_size") == "auto":
        zero["reduce_bucket_size"] = int(5e8)
    return DeepSpeedPlugin(hf_ds_config=ds)


def check_launch(accelerator, cfg: RLConfig, stage: str) -> None:
    """Refuse a launch the loop would get wrong, before any rollout.

    DeepSpeed from an accelerate config file bypasses the batch settings ``deepspeed_plugin`` makes. FSDP is
    refused: accelerate turns it on only on accelerators, so that path cannot be tested on the CPU machines this
    project is built on; ZeRO-3 (``hydra_conf/deepspeed/zero3.json``) shards the parameters the same way and is.
    DDP and ZeRO-1/2/3 from ``<stage>.deepspeed`` are what the loop implements; the step's problems are split evenly.
    """
    from accelerate.utils import DistributedType

    kind = accelerator.distributed_type
    if kind == DistributedType.FSDP or (kind == DistributedType.DEEPSPEED and not cfg.deepspeed):
        raise ConfigError(f"{stage}: RL stages run under DDP or DeepSpeed ZeRO set by {stage}.deepspeed (ZeRO-3 "
                          f"shards parameters as FSDP does), got {kind.value} from the launcher; launch `parathink "
                          f"stage {stage}` with torchrun or a plain multi-GPU accelerate config")
    processes = distributed.group().size  # not accelerator.num_processes: 1 under DeepSpeed on CPU
    if cfg.prompts_per_step % processes:
        raise ConfigError(f"{stage}.prompts_per_step={cfg.prompts_per_step}: must be a multiple of the "
                          f"{processes} processes, each samples an equal share of the step's problems")


def zero_stage(cfg: RLConfig) -> int:
    """The ZeRO stage ``cfg.deepspeed`` asks for (0 without DeepSpeed)."""
    if not cfg.deepspeed:
        return 0
    ds = json.loads(Path(cfg.deepspeed).read_text(encoding="utf-8"))
    return int((ds.get("zero_optimization") or {}).get("stage", 0))


def sampling_policy(accelerator, model, whole_copy):
    """The module the engine samples with, and the one the stage publishes.

    Under DDP and ZeRO-1/2 it is the training model itself: every process holds all its parameters, so the engine
    sees each update at once. Under ZeRO-3 a process holds a slice of each parameter; sampling through the
    training model would gather every layer for every decoded token. The engine gets ``whole_copy`` instead (one
    more model's parameters in memory), which ``sync_policy`` refreshes after each optimiser step: one gather
    per step.
    """
    if whole_copy is None:
        return accelerator.unwrap_model(model)
    policy = whole_copy.to(accelerator.device)
    sync_policy(model, policy)
    return policy


@torch.no_grad()
def sync_policy(model, policy) -> None:
    """Copy the ZeRO-3 training model's parameters into the engine's whole copy. One parameter is gathered at a
    time, so at most one extra parameter is whole at once; every process gathers in the same order (each gather
    is a collective)."""
    import deepspeed

    trained = dict(model.module.named_parameters())
    for name, p in policy.named_parameters():
        with deepspeed.zero.GatheredParameters([trained[name]]):
            p.copy_(trained[name])
