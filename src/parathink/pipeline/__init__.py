"""The hallway: what chains the stages and what composes and checks the config they read.

``compose`` (Hydra composition, the run's config), ``schema`` (the root config's declared types and bounds),
``runner`` (``parathink run`` / ``stage``: a stage's inputs, cache, lock, run, gate and publication) and
``gating`` (a stage's gate judged on its finished output). It imports the stages; nothing below it imports
``parathink.pipeline`` or ``parathink.stages`` (``tests/test_layers.py``).
"""
