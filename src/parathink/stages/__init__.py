"""One function per curriculum stage, and the runner that chains them.

A stage NAME is the module ``parathink.stages.NAME``, whose ``STAGE`` (``parathink.stages.contract.StageSpec``) says
everything it gives the runner (``run(cfg, ctx)``, optionally ``validate``, a gate, ...), except where ``BUILTIN``
says otherwise: the four GRPO-family stages are one
module, ``rl.py``. A config's ``stage_modules`` maps further names (plug-in stages).
"""

RL_STAGES = ("rl_easy", "rl_hard", "rl_scaffold", "grpo_baseline")
# Every built-in stage, in the curriculum's order.
CURRICULUM = ("base", "teacher", "filter", "sft", *RL_STAGES, "eval", "promote")
BUILTIN = {name: f"parathink.stages.rl:{name}" for name in RL_STAGES}
