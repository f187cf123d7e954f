"""A registered version as ``ParallelTextGenerationPipeline``: the engine's decoding behind transformers' pipeline,
loaded by ``models:/`` URI with the decode settings its registration recorded (a real MLflow SQLite store).

The model is the engine's toy (``parathink.testing.toy``: taught to write all three grammars in seconds), logged
with the transformers flavor exactly as a stage's checkpoint is (``parathink.tracking.flavor.register``).
"""

from __future__ import annotations

import mlflow
import pytest
import torch
from mlflow.tracking import MlflowClient

from parathink.engine import Engine, SamplingConfig
from parathink.testing.toy import KINDS, toy_model
from parathink.tracking.flavor import DECODE_KEY, register
from parathink.tracking.parallel_pipeline import ParallelTextGenerationPipeline, load_pipeline

NAME = "parathink-toy"


@pytest.fixture(scope="module")
def registered(tmp_path_factory):
    """The toy registered as version 1 of NAME, decode = structured, 3 paths; (tracking uri, model, tokenizer)."""
    torch.set_num_threads(1)
    tmp = tmp_path_factory.mktemp("pipeline")
    model, tok = toy_model()
    model.save_pretrained(tmp / "model")
    tok.save_pretrained(tmp / "model")
    uri = f"sqlite:///{tmp / 'mlflow.db'}"
    mlflow.set_tracking_uri(uri)
    client = MlflowClient(tracking_uri=uri)
    exp = client.create_experiment("toy", artifact_location=str(tmp / "artifacts"))
    run = client.create_run(exp)
    version = register(client, NAME, run.info.run_id, tmp / "model", stage="sft", grammar="parallel_r1",
                       tags={}, decode={"mode": "structured", "num_paths": 3})
    assert str(version.version) == "1"
    yield uri, model, tok
    mlflow.set_tracking_uri(None)


def prompt(i: int) -> str:
    return f"{KINDS['parallel_r1']} question {i}:"


def _engine_texts(model, tok, mode: str, num_paths: int, i: int, **sampling) -> list[str]:
    engine = Engine(model, tok, grammar="parallel_r1", mode=mode, num_paths=num_paths)
    return engine.generate_texts([prompt(i)], SamplingConfig(seed=i, **sampling))[0]


def test_registered_decode_settings_drive_the_pipeline(registered):
    """The metadata carries the decode settings; the loaded pipeline writes what the engine writes with them, for the
    same seed (it is the engine, not a re-implementation): blocks whose paths were forked 3 at a time."""
    uri, model, tok = registered
    meta = mlflow.models.get_model_info(f"models:/{NAME}/1").metadata
    assert meta[DECODE_KEY] == {"mode": "structured", "num_paths": 3}
    pipe = load_pipeline(f"models:/{NAME}/1")
    assert isinstance(pipe, ParallelTextGenerationPipeline)
    outs = [pipe(prompt(i), max_new_tokens=96, seed=i, return_full_text=False)[0]["generated_text"] for i in range(6)]
    assert outs == [_engine_texts(model, tok, "structured", 3, i, max_new_tokens=96)[0] for i in range(6)]
    engine = Engine(model, tok, grammar="parallel_r1", mode="structured", num_paths=3)
    samples = [engine.generate([tok.encode(prompt(i), add_special_tokens=False)],
                               SamplingConfig(max_new_tokens=96, seed=i))[0] for i in range(6)]
    assert [s.text for s in samples] == outs
    assert sum(s.num_blocks for s in samples) >= 3  # the toy opens a block in most responses
    for s in samples:  # every block's 3 paths opened by the engine's fork (the toy itself learnt 2)
        forced = sum(1 for t, m in zip(s.response_ids, s.loss_mask) if t in engine.tags.path_open and m == 0)
        assert forced >= 3 * s.num_blocks, s.text


def test_call_options(registered):
    """return_full_text, num_return_sequences, greedy decoding, per-call decode overrides; unknown options refused."""
    pipe = load_pipeline(f"models:/{NAME}/1")
    full = pipe(prompt(1), max_new_tokens=48, seed=3)[0]["generated_text"]
    assert full.startswith(prompt(1)) and full == prompt(1) + pipe(prompt(1), max_new_tokens=48, seed=3,
                                                                  return_full_text=False)[0]["generated_text"]
    assert len(pipe(prompt(2), max_new_tokens=48, num_return_sequences=4)) == 4
    greedy = [pipe(prompt(2), max_new_tokens=48, do_sample=False, seed=s)[0]["generated_text"] for s in (1, 2)]
    assert greedy[0] == greedy[1]
    _, model, tok = registered
    assert pipe(prompt(4), max_new_tokens=96, seed=4, num_paths=2, return_full_text=False)[0]["generated_text"] \
        == _engine_texts(model, tok, "structured", 2, 4, max_new_tokens=96)[0]
    with pytest.raises(ValueError, match="unsupported argument.*repetition_penalty"):
        pipe(prompt(1), repetition_penalty=1.2)


def test_without_decode_settings_the_error_says_what_to_pass(registered, tmp_path):
    """A version registered without decode settings is refused in one line that names what to pass; passed by
    hand, it loads; a pipeline built with neither refuses to generate, naming the settings."""
    uri, model, tok = registered
    client = MlflowClient(tracking_uri=uri)
    model.save_pretrained(tmp_path / "model")
    tok.save_pretrained(tmp_path / "model")
    run = client.create_run(client.get_experiment_by_name("toy").experiment_id)
    old = register(client, NAME, run.info.run_id, tmp_path / "model", stage="sft", grammar="parallel_r1", tags={})
    with pytest.raises(ValueError, match=f"models:/{NAME}/{old.version}: no parathink.format / {DECODE_KEY}"):
        load_pipeline(f"models:/{NAME}/{old.version}")
    pipe = load_pipeline(f"models:/{NAME}/{old.version}", grammar="parallel_r1", mode="causal", num_paths=1)
    assert pipe(prompt(5), max_new_tokens=96, seed=5, return_full_text=False)[0]["generated_text"] \
        == _engine_texts(model, tok, "causal", 1, 5, max_new_tokens=96)[0]
    bare = mlflow.transformers.load_model(f"models:/{NAME}/1", pipeline_class=ParallelTextGenerationPipeline)
    with pytest.raises(ValueError, match="grammar, mode, num_paths not set"):
        bare(prompt(0), max_new_tokens=8)
