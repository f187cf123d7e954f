"""The one text-generation interface: ``generate_texts(prompts, sampling, num_samples) -> list[list[str]]``.

``Engine`` offers it; so does the teacher's ``HFGenerator`` (transformers' ``generate``). Prompt-major: ``out[i]``
holds the ``num_samples`` responses to ``prompts[i]``; ``sampling`` is a ``SamplingConfig``. The module is
torch-free so that code which only names the interface does not load torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from parathink.engine.sampling import SamplingConfig


class TextGenerator(Protocol):
    def generate_texts(self, prompts: list[str], sampling: SamplingConfig,
                       num_samples: int = 1) -> list[list[str]]: ...
