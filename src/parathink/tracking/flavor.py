"""Registered versions a consumer can load: each model stage's checkpoint logged with MLflow's transformers flavor.

``mlflow.transformers.load_model("models:/parathink-<experiment>@champion")`` then returns a text-generation
pipeline (model and tokenizer, the tag tokens single special tokens of it), and the version's page shows what it
is: the format, its tag tokens and grammar, the prompt it expects, how its run decoded it (``parathink.decode``) and
a signature (text in, text out, generation params). A pipeline that writes whole parallel blocks (paths forked by
the engine, as the structured layout was trained) is ``parathink.tracking.parallel_pipeline.load_pipeline(uri)``.
The run directory stays the source of truth for training; the registry is the hand-off to serving (docs/lifecycle.md:
how a vLLM server loads the champion by alias).

A checkpoint transformers cannot load (the runner tests' stand-in models) is registered as its raw files, as before,
and the log says so in one line.
"""

from __future__ import annotations

import importlib
import json
import time
from pathlib import Path

from parathink.logs import log

FLAVOR_TAG = "parathink.flavor"  # on a version: transformers | raw
DECODE_KEY = "parathink.decode"  # in the MLmodel metadata: {"mode", "num_paths"} as the run's eval decoded it


def is_transformers_checkpoint(model_dir: Path) -> bool:
    """Whether ``config.json`` names an architecture transformers knows (the flavor needs one)."""
    from transformers import CONFIG_MAPPING

    try:
        model_type = json.loads((model_dir / "config.json").read_text(encoding="utf-8")).get("model_type")
    except (OSError, ValueError):
        return False
    return isinstance(model_type, str) and model_type in CONFIG_MAPPING


def grammar_rule(grammar: str) -> str:
    """The grammar's production as its parser module (the one ``Grammar.parse`` comes from) documents it."""
    from parathink.formats.grammar import get_grammar

    doc = importlib.import_module(get_grammar(grammar).parse.__module__).__doc__ or ""
    return "\n".join(line.strip() for line in doc.splitlines() if line.startswith("    ")).strip()


def metadata(grammar: str, tokenizer, decode: dict | None = None) -> dict:
    """What the version's MLmodel records beside the model: enough to prompt it, decode it as its run's ``eval``
    did (``decode``: mode and paths per block, which ``parallel_pipeline.load_pipeline`` reads) and parse what it
    writes."""
    import parathink
    from parathink.data.prompts import PLAIN_TEMPLATE, has_chat_template
    from parathink.formats.tags import TAGS

    return {"parathink.format": grammar, "parathink.tag_tokens": list(TAGS[grammar]),
            "parathink.tag_token_ids": {t: tokenizer.convert_tokens_to_ids(t) for t in TAGS[grammar]},
            "parathink.grammar": grammar_rule(grammar),
            "parathink.prompt": "the tokenizer's chat template" if has_chat_template(tokenizer) else PLAIN_TEMPLATE,
            "parathink.parse": f"parathink.formats.parse(text, {grammar!r})",
            # The tags are special tokens, which a text-generation pipeline (and vLLM) drop from the text by default.
            "parathink.generate_kwargs": {"skip_special_tokens": False},
            **({DECODE_KEY: dict(decode)} if decode else {}),
            "parathink.version": parathink.__version__}


def log_transformers(run_id: str, model_dir: Path, *, grammar: str, decode: dict | None = None) -> tuple[str, float]:
    """Log ``model_dir`` into run ``run_id`` with the transformers flavor; (the logged model's URI, seconds taken).

    The fluent API is the flavor's only way in; the run is entered by id (it exists already, the stage's own) and the
    tracker's status is set again by the caller when the stage closes it.
    """
    import mlflow
    import torch
    import transformers
    from mlflow.models import infer_signature

    from parathink.modeling import load_model

    t0 = time.perf_counter()
    model, tok = load_model(model_dir, add_tags=False)  # as written; ParaThinker's path vectors stay in its weights
    signature = infer_signature("Problem: 2 + 3\nSolution:\n", "<Parallel>...</Parallel> \\boxed{5}",
                                params={"max_new_tokens": 320, "do_sample": True, "temperature": 1.0})
    # Pinned here instead of inferred: inference loads the model again in a subprocess (seconds, GBs for a 4B).
    requirements = [f"transformers=={transformers.__version__}", f"torch=={torch.__version__.split('+')[0]}"]
    with mlflow.start_run(run_id=run_id):
        info = mlflow.transformers.log_model({"model": model, "tokenizer": tok}, name="model",
                                             task="text-generation", signature=signature,
                                             metadata=metadata(grammar, tok, decode), pip_requirements=requirements)
    return info.model_uri, time.perf_counter() - t0


def register(client, name: str, run_id: str, model_dir: Path, *, stage: str, grammar: str,
             tags: dict[str, str], decode: dict | None = None):
    """Register the checkpoint as a new version of ``name``: with the transformers flavor when transformers can load
    it, else as its raw files (the run's ``model`` artifact, which the caller logged); returns the version."""
    from parathink.tracking.registry import register_model

    if not is_transformers_checkpoint(model_dir):
        log(f"registry: {stage}'s model/config.json names no transformers architecture; registered as raw files "
            f"(no MLflow flavor)")
        return register_model(client, name, run_id, stage=stage, tags={**tags, FLAVOR_TAG: "raw"})
    uri, seconds = log_transformers(run_id, model_dir, grammar=grammar, decode=decode)
    client.log_metric(run_id, "registry.flavor_log_s", seconds)
    log(f"registry: {stage}'s model logged with the transformers flavor in {seconds:.1f} s ({uri})")
    return register_model(client, name, run_id, stage=stage, source=uri,
                          tags={**tags, FLAVOR_TAG: "transformers", "parathink.format": grammar})
