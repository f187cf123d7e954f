"""Teacher backends for the ``teacher`` stage (Parallel-R1 Sec. 3.1 cold-start data; NPR's self-distillation).

Every backend has ``generate(problems) -> Iterator[record]``, yielding each problem's record with a
``response`` as soon as it exists; the stage appends them to a resumable store (``store.RawStore``).

| backend   | what writes the trace                                    | needs                             |
|-----------|----------------------------------------------------------|-----------------------------------|
| scripted  | exact traces from the synthetic arithmetic (strategies)  | synthetic problems                |
| self      | the model's own K sampled solutions + a voting summary   | a model (default: the base stage) |
| hf        | a transformers model, zero-shot teacher prompt           | a model                           |
| openai    | any OpenAI-compatible endpoint (vLLM server, hosted API) | a reachable endpoint              |
| vllm      | vLLM's offline engine, in vLLM's own venv (a subprocess) | its python: PARATHINK_VLLM_PYTHON |
"""

from parathink.config.teacher import BACKENDS
from parathink.teacher.openai_http import TeacherUnavailable
from parathink.teacher.store import RawStore

__all__ = ["BACKENDS", "RawStore", "TeacherUnavailable"]
