"""parathink: teach language models to think in parallel (Parallel-R1, NPR, ParaThinker)."""

__version__ = "0.1.0"
