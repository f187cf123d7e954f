"""The teacher stage end to end (scripted backend on the synthetic set), its config checks and its resume."""

import json

import pytest
from hydra import compose, initialize_config_dir

from parathink.errors import ConfigError
from parathink.pipeline.compose import config_dir
from parathink.stages import teacher
from parathink.stages.context import StageContext


def _cfg(*overrides):
    with initialize_config_dir(version_base=None, config_dir=str(config_dir())):
        return compose(config_name="config", overrides=list(overrides))


def test_scripted_teacher_writes_raw_jsonl_in_problem_order(tmp_path):
    cfg = _cfg("teacher.backend=scripted", "data.cold_start.0.n=40", "data.cold_start.1.n=20")
    teacher.validate(cfg)
    ctx = StageContext.standalone("teacher", tmp_path)
    ctx.progress = False
    metrics = teacher.run(cfg, ctx)
    raw = [json.loads(line) for line in (ctx.out_dir / "raw.jsonl").read_text().splitlines()]
    assert len(raw) == 60 and [r["level"] for r in raw] == ["easy"] * 40 + ["hard"] * 20
    assert all(set(r) >= {"id", "source", "problem", "answer", "level", "response"} for r in raw)
    assert metrics["parallel_rate"] == 1.0 and metrics["accuracy"] == 1.0 and metrics["generated"] == 60
    # A rerun in the same work dir generates nothing: every record is already stored.
    again = teacher.run(cfg, ctx)
    assert again["generated"] == 0 and again["resumed"] == 60
    assert (ctx.out_dir / "raw.jsonl").read_text().count("\n") == 60


@pytest.mark.parametrize("overrides, key", [
    (["teacher.backend=gpt"], "teacher.backend"),
    (["teacher.backend=openai"], "teacher.openai.model"),
    (["teacher.backend=hf"], "teacher.hf.model"),
    (["teacher.self.num_paths=1"], "teacher.self.num_paths"),
    (["teacher.self.summary=prose"], "teacher.self.summary"),
    (["teacher.backend=scripted", "format=npr"], "teacher.grammar"),
    (["teacher.backend=scripted", "data=gsm8k"], "teacher.problems[0].source"),
])
def test_bad_config_names_the_key(overrides, key):
    with pytest.raises(ConfigError, match=key.replace("[", r"\[").replace("]", r"\]")):
        teacher.validate(_cfg(*overrides))


def test_vllm_backend_says_what_is_missing(tmp_path, monkeypatch):
    from parathink.errors import ConfigError

    # vLLM runs in its own venv (the trainer image's /opt/vllm); where there is none, one line says where to point.
    monkeypatch.setenv("PARATHINK_VLLM_PYTHON", str(tmp_path / "no-venv" / "bin" / "python"))
    cfg = _cfg("teacher.backend=vllm", "teacher.vllm.model=Qwen/Qwen3-8B", "teacher.limit=2")
    teacher.validate(cfg)
    with pytest.raises(ConfigError, match="no vLLM venv at .*no-venv.*PARATHINK_VLLM_PYTHON"):
        teacher.run(cfg, StageContext.standalone("teacher", tmp_path))


def test_self_backend_end_to_end_on_a_saved_model(tmp_path):
    """Mechanics of `self` through the stage: load a checkpoint, sample, wrap (an untrained model: noise)."""
    import torch
    from omegaconf import OmegaConf

    from parathink.data import synthetic
    from parathink.modeling import build_tiny_model, save_model
    from parathink.modeling.tokenizer import train_tokenizer

    torch.set_num_threads(1)
    tok = train_tokenizer(synthetic.corpus(300), vocab_size=300)
    arch = {"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1,
            "head_dim": 16, "intermediate_size": 64, "max_position_embeddings": 512, "tie_word_embeddings": True}
    save_model(build_tiny_model(OmegaConf.create({"config": arch}), tok), tok, tmp_path / "base" / "model")
    cfg = _cfg("teacher.limit=3", "teacher.self.max_new_tokens=8", "teacher.self.num_paths=2")
    ctx = StageContext.standalone("teacher", tmp_path)  # teacher.self.model=null: the base stage's model/
    ctx.progress = False
    metrics = teacher.run(cfg, ctx)
    raw = [json.loads(line) for line in (ctx.out_dir / "raw.jsonl").read_text().splitlines()]
    assert metrics["generated"] == 3 and [r["teacher"] for r in raw] == ["self"] * 3
    assert all(r["response"].startswith("<Parallel>\n<Path>\n") and len(r["path_answers"]) == 2 for r in raw)
