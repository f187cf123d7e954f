"""The GPU check script (benchmarks/gpu_check.py) keeps working: its dry run on the CPU, as a lent GPU's call
would run it, measures what it claims (fp32 within 1e-4, bf16 visibly not)."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_gpu_check_dry_run_on_cpu():
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks/gpu_check.py"), "--device", "cpu", "--quick",
                           "--only", "consistency", "engine_tiny"], capture_output=True, text=True, timeout=600,
                          cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    record = json.loads((ROOT / "bench-results/gpu_dry_run.json").read_text())
    assert record["failed_sections"] == []
    c = record["consistency"]
    assert c["fp32_within_1e-4"] and c["fp32_structured"]["forks"] > 0
    for mode in ("causal", "structured"):
        assert c[f"fp32_{mode}"]["max_abs_diff"] <= 1e-4
        # bf16 really ran: its mismatch is orders of magnitude above fp32's (CPU: mean ~5e-3 nats per token)
        assert c[f"bf16_weights_{mode}"]["mean_abs_diff"] > 1e-3
        assert c[f"fp32_weights_bf16_autocast_{mode}"]["mean_abs_diff"] > 1e-3
    tiny = record["engine_tiny"]
    assert tiny["engine_tok_s"] > 0 and set(tiny["fork_speedup"]) == {"2", "4"}
    assert "== gpu_check on cpu; failed: none" in proc.stdout


def test_stages_section_names_the_missing_run_dir_and_its_remedy(tmp_path):
    import importlib.util

    import pytest

    spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "benchmarks/gpu_check.py")
    gpu_check = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gpu_check)
    (tmp_path / "base").mkdir()
    (tmp_path / "base/_manifest.json").write_text("{}")
    with pytest.raises(FileNotFoundError, match=r"lacks the published stages \['teacher', 'filter'\].*gpu_prepare.sh"):
        gpu_check.stages(tmp_path, quick=True)
