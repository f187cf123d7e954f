"""What the ``sft`` stage's validation and its quality gate need from ``parathink.training.sft``, without torch:
``parathink plan`` validates every stage in the orchestrator image, which has none. (Issue 20 part 2 gives ``sft`` a
typed config here and has ``training/sft.py`` import these; until then a test keeps the two copies equal.)"""

COLLATORS = ("causal", "structured")
OVERLONG = ("drop", "truncate")


def start_stage(cfg) -> str | None:
    """The stage whose ``model/`` SFT starts from; None when ``sft.init`` is a model source (dir, s3://, hub id)."""
    init = str(cfg.sft.init)
    return init if init in ("base", "sft") or init.startswith("rl_") else None
