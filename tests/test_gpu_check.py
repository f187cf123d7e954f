"""The GPU check script (benchmarks/gpu_check.py) keeps working: its dry run on the CPU runs every section's logic
at toy sizes, as a lent GPU's call would run it at the real ones, and measures what it claims (fp32 within 1e-4,
bf16 visibly not; the Qwen3-4B section's graphs check, decode, fork, SFT and RL parts and its headline names)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _load_gpu_check():
    import importlib.util

    sys.path.insert(0, str(ROOT / "benchmarks"))
    spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "benchmarks/gpu_check.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_gpu_check_dry_run_on_cpu(tmp_path):
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks/gpu_check.py"), "--device", "cpu", "--quick",
                           "--only", "consistency", "engine_tiny", "qwen3_4b", "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert [p.name for p in tmp_path.iterdir()] == ["gpu_dry_run.json"]  # written where asked, nothing else
    record = json.loads((tmp_path / "gpu_dry_run.json").read_text())
    assert record["failed_sections"] == []
    c = record["consistency"]
    assert c["fp32_within_1e-4"] and c["fp32_structured"]["forks"] > 0
    for mode in ("causal", "structured"):
        assert c[f"fp32_{mode}"]["max_abs_diff"] <= 1e-4
        # bf16 really ran: its mismatch is orders of magnitude above fp32's (CPU: mean ~5e-3 nats per token)
        assert c[f"bf16_weights_{mode}"]["mean_abs_diff"] > 1e-3
        assert c[f"fp32_weights_bf16_autocast_{mode}"]["mean_abs_diff"] > 1e-3
    tiny = record["engine_tiny"]
    assert tiny["engine_tok_s"] > 0 and set(tiny["fork_speedup"]) == {"2"} and tiny["decode_check"]["passed"]
    assert not any("cpu" in k for k in tiny)  # process CPU time means nothing for GPU work
    q = record["qwen3_4b"]
    assert q["decode_check"]["passed"] and q["decode_check"]["forks"] > 0
    assert q["decode_check"]["graphs_vs_static_max_logprob_diff"] == 0.0
    assert set(q["decode"]) >= {"1", "2", "4"} and q["decode"]["4"]["engine_bandwidth_fraction"] > 0
    assert q["decode"]["4"]["engine_no_graphs_tok_s"] > 0 and q["decode"]["4"]["graph_captures_timed"] == 0
    assert set(q["fork"]["fork_speedup"]) == {"2", "4"}
    assert q["sft"]["tokens_per_step"] == 128 and "scaled_dot_product" in " ".join(q["sft"]["attention"]["names"])
    assert q["rl"]["rollouts"] == 4 and q["rl"]["update_recompute_s"] > 0
    assert set(q["headline"]) >= {"engine_bandwidth_fraction_b64", "engine_over_generate_b64", "sft_mfu_4096"}
    assert "== gpu_check on cpu; failed: none" in proc.stdout


def test_stages_section_names_the_missing_run_dir_and_its_remedy(tmp_path):
    gpu_check = _load_gpu_check()
    (tmp_path / "base").mkdir()
    (tmp_path / "base/_manifest.json").write_text("{}")
    with pytest.raises(FileNotFoundError, match=r"lacks the published stages \['teacher', 'filter'\].*gpu_prepare.sh"):
        gpu_check.stages({}, tmp_path, quick=True)


def test_a_part_over_its_time_box_is_recorded_and_the_next_runs():
    """The time boxes: a slow part stops at its box (an error in the record), and the call goes on."""
    import time

    gpu_check = _load_gpu_check()
    gpu_check.DEVICE = "cpu"  # boxes 10x longer on a CPU
    slow, fast = {}, {}
    assert not gpu_check.box(slow, 0.05, lambda part: time.sleep(5))
    assert "OutOfTime" in slow["error"] and slow["section_s"] < 2
    outer = {}
    assert gpu_check.box(outer, 5, lambda part: part.update(inner=gpu_check.box(fast, 1, lambda p: p.update(x=1))))
    assert outer["inner"] and fast["x"] == 1
