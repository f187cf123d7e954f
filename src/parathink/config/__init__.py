"""The configuration layer: one module per section of the composed config, below everything that reads it.

Each section's dataclass is the Hydra schema of its ``hydra_conf/stage/*.yaml`` file (``base``, ``teacher``,
``filter``, ``sft``, ``rl`` for the four GRPO-family stages, ``eval``, ``promote``), with its ``check``;
``thresholds`` holds every gate's schema, ``fields`` the declared bounds, ``paths`` where config files resolve.
The training loops, the gates and the stages import their config from here, never from the runner
(``pipeline/``, which composes and validates the whole).
"""
