"""What a stage declares of itself for placement and the memory model: ``StageRole``, the ``role`` of its
``StageSpec``. The pipeline reads it off each stage and passes it down, so the cluster profile's checks and the
memory model name no stage: a plug-in stage that trains a model says so here and is sized like one."""

from __future__ import annotations

from dataclasses import dataclass

# The memory model's estimates (``memory_model.stage_budget``), by what a stage holds on its device:
# the model's weights alone (pretraining a tiny model, or loading one to probe it), the teacher's vLLM engines,
# SFT's training states and activations, RL's training states plus its rollout engine's KV cache, eval's engine.
MEMORY_KINDS = ("weights", "teacher", "sft", "rl", "eval")


@dataclass(frozen=True)
class StageRole:
    # Which estimate sizes the stage on its device (MEMORY_KINDS); None: it holds no model (filter, promote),
    # so no memory is estimated or checked for it.
    memory: str | None = None
    # It trains the model it loads: gradients and Adam states count against each GPU (ZeRO-2 shards them).
    trains_model: bool = False
    # Its gate samples the published model (``<stage>.gate.probe``): the stage needs the larger of the two.
    probes_model: bool = False

    def __post_init__(self):
        if self.memory is not None and self.memory not in MEMORY_KINDS:
            raise ValueError(f"StageRole.memory: {self.memory!r} is not one of {', '.join(MEMORY_KINDS)}")

    @property
    def loads_model(self) -> bool:
        return self.memory is not None


NO_MODEL = StageRole()
