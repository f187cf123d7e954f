"""benchmarks/bench_peer.py, the engine against vLLM (issue 49): its smoke run on the tiny model gives both sides'
figures in the JSON that `make bench` writes, every output having the tokens asked and their log-probs; a missed
target is named."""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from parathink.testing.vllm_server import check_installed

ROOT = Path(__file__).resolve().parents[1]


def _bench():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    spec = importlib.util.spec_from_file_location("bench_peer", ROOT / "benchmarks/bench_peer.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_case_below_its_target_is_named_with_its_figure():
    bench = _bench()
    cases = [{"model": "tiny", "case": "independent", "rows": 64, "engine_mode": "causal", "engine_over_vllm": 1.2},
             {"model": "tiny", "case": "shared_prefix", "rows": 64, "engine_mode": "fork (parathinker, structured)",
              "engine_over_vllm": 1.2},
             {"model": "smollm2", "case": "independent", "rows": 64, "engine_mode": "causal", "engine_over_vllm": 0.9}]
    assert bench.missed(cases) == ["tiny shared_prefix 64 rows: engine/vLLM 1.20 < 1.5",
                                   "smollm2 independent 64 rows: engine/vLLM 0.90 < 1.0"]


@pytest.mark.vllm
@pytest.mark.slow
def test_the_quick_run_times_both_sides_on_the_tiny_model(tmp_path):
    check_installed()
    out = tmp_path / "peer.json"
    subprocess.run([sys.executable, str(ROOT / "benchmarks/bench_peer.py"), "--quick", "--engine-threads", "1",
                    "--out", str(out)], check=True, cwd=ROOT, timeout=600)
    record = json.loads(out.read_text())
    new = record["settings"]["new_tokens"]
    assert record["settings"]["quick"] and record["settings"]["engine_threads"] == 1
    assert record["settings"]["host_cores"] == len(os.sched_getaffinity(0))
    assert record["vllm_start_s"]["tiny"] > 0
    cases = {(c["model"], c["case"]): c for c in record["cases"]}
    assert set(cases) == {("tiny", "independent"), ("tiny", "shared_prefix")}
    assert cases["tiny", "shared_prefix"]["engine_mode"].startswith("fork")  # the tiny tokenizer has the tags
    for c in cases.values():
        tokens = c["rows"] * new
        for side in ("engine", "vllm"):
            figures = c[side]
            # Every output got `new` tokens (EOS banned), each with its log-prob (vLLM: logprobs=0).
            assert figures["tokens"] == tokens and figures["logprobs"] >= tokens, (c["case"], side, figures)
            assert figures["tok_s"] > 0 and figures["tok_per_cpu_s"] > 0 and figures["peak_rss_bytes"] > 2 ** 20
        assert c["vllm"]["processes"] >= 2  # vLLM's engine core ran apart from the driver, and was counted
        assert c["engine_over_vllm"] == pytest.approx(c["vllm"]["wall_s"] / c["engine"]["wall_s"])
        assert c["engine_over_vllm_cpu"] > 0
    assert "engine_causal_over_vllm" in cases["tiny", "shared_prefix"]


def test_engine_threads_below_one_is_refused_in_one_line():
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks/bench_peer.py"), "--engine-threads", "0"],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "--engine-threads must be at least 1, got 0" in out.stderr, out.stderr[-500:]
