"""A registered version as a pipeline that writes the parallel format whole: ``parathink.engine`` behind
transformers' text-generation pipeline.

A model trained with the structured layout (path-private attention, positions restarted at each ``<Path>``) learnt
each path as a branch the engine forks from the block's prefix, not as text that follows the previous path. Plain
``generate`` (a stock pipeline, vLLM) therefore writes the tags but not the block: one path, then the next path's
tags with nothing in them (docs/findings.md, issue 30). This pipeline decodes the way ``eval`` does: the engine
forks ``num_paths`` paths where the model opens a block and writes the summary under the layout it was trained
with. Causal-layout models (the GPU experiments' ``eval.mode: causal``) decode one token after another here as well.

    from parathink.tracking.parallel_pipeline import load_pipeline
    pipe = load_pipeline("models:/parathink-tiny@champion")   # mode, paths, grammar from the version's metadata
    pipe("Problem: 12 + 7 * 3\\nSolution:\\n", max_new_tokens=320, temperature=0)[0]["generated_text"]

or, with the decode settings given by hand, ``mlflow.transformers.load_model(uri, pipeline_class=
ParallelTextGenerationPipeline, mode="structured", num_paths=3, grammar="parallel_r1")``.
"""

from __future__ import annotations

from typing import Any

from transformers import TextGenerationPipeline

from parathink.tracking.flavor import DECODE_KEY

_FORWARD = ("grammar", "mode", "num_paths", "max_new_tokens", "temperature", "top_p", "do_sample", "seed")


class ParallelTextGenerationPipeline(TextGenerationPipeline):
    """``text-generation`` whose decoding is ``parathink.engine``'s: ``[{"generated_text": ...}]`` per prompt,
    the response with its tags (they are special tokens, kept), after the prompt unless ``return_full_text=False``.

    Decode settings (at load or per call): ``grammar`` (parallel_r1 | npr | parathinker), ``mode`` (structured |
    causal), ``num_paths``; sampling: ``max_new_tokens``, ``temperature`` (0 or ``do_sample=False``: greedy),
    ``top_p``, ``seed``, ``num_return_sequences``. Any other generation argument is refused by name: the engine
    would not honour it.
    """

    _engine_key: tuple | None = None  # the settings of the engine built last, reused while a call's settings match
    _engine_obj = None

    def _sanitize_parameters(self, return_full_text=None, num_return_sequences=None, **kwargs):
        unknown = sorted(set(kwargs) - set(_FORWARD))
        if unknown:
            raise ValueError(f"ParallelTextGenerationPipeline: unsupported argument(s) {', '.join(unknown)}; "
                             f"it takes {', '.join(_FORWARD)}, num_return_sequences, return_full_text")
        forward = {k: v for k, v in kwargs.items() if v is not None}
        if num_return_sequences is not None:
            forward["num_return_sequences"] = int(num_return_sequences)
        post = {} if return_full_text is None else {"return_full_text": bool(return_full_text)}
        return {}, forward, post

    def preprocess(self, prompt_text, **_: Any) -> dict:
        if not isinstance(prompt_text, str):
            raise ValueError(f"ParallelTextGenerationPipeline: a prompt must be a string (the model's plain "
                             f"prompt, docs/lifecycle.md), got {type(prompt_text).__name__}")
        return {"prompt_text": prompt_text}

    def _engine(self, grammar: str, mode: str, num_paths: int):
        from parathink.engine import Engine

        key = (grammar, mode, int(num_paths))
        if self._engine_key != key:
            self._engine_obj = Engine(self.model, self.tokenizer, grammar=grammar, mode=mode, num_paths=int(num_paths))
            self._engine_key = key
        return self._engine_obj

    def _forward(self, model_inputs: dict, grammar: str | None = None, mode: str | None = None,
                 num_paths: int | None = None, max_new_tokens: int = 320, temperature: float = 1.0,
                 top_p: float = 1.0, do_sample: bool = True, seed: int | None = None,
                 num_return_sequences: int = 1) -> dict:
        from parathink.engine import SamplingConfig

        missing = [n for n, v in (("grammar", grammar), ("mode", mode), ("num_paths", num_paths)) if v is None]
        if missing:
            raise ValueError(f"ParallelTextGenerationPipeline: {', '.join(missing)} not set: load with "
                             f"load_pipeline(uri) (reads the version's {DECODE_KEY} metadata) or pass them")
        sampling = SamplingConfig(temperature=0.0 if not do_sample else float(temperature), top_p=float(top_p),
                                  max_new_tokens=int(max_new_tokens), seed=seed)
        texts = self._engine(grammar, mode, num_paths).generate_texts([model_inputs["prompt_text"]], sampling,
                                                                       num_samples=num_return_sequences)[0]
        return {"prompt_text": model_inputs["prompt_text"], "texts": texts}

    def postprocess(self, model_outputs: dict, return_full_text: bool = True, **_: Any) -> list[dict]:
        head = model_outputs["prompt_text"] if return_full_text else ""
        return [{"generated_text": head + text} for text in model_outputs["texts"]]


def load_pipeline(model_uri: str, **overrides: Any) -> ParallelTextGenerationPipeline:
    """The version at ``model_uri`` (``models:/NAME@ALIAS``, ``models:/NAME/N``, ``runs:/...``) as a
    ``ParallelTextGenerationPipeline``, decoding as its metadata says (``overrides`` win)."""
    import mlflow

    meta = mlflow.models.get_model_info(model_uri).metadata or {}
    decode = {"grammar": meta.get("parathink.format"), **(meta.get(DECODE_KEY) or {}), **overrides}
    if decode.get("grammar") is None or decode.get("mode") is None:
        raise ValueError(f"{model_uri}: no parathink.format / {DECODE_KEY} in the version's metadata (registered "
                         f"before they were recorded?); pass grammar=, mode= and num_paths= to load_pipeline")
    return mlflow.transformers.load_model(model_uri, pipeline_class=ParallelTextGenerationPipeline, **decode)
