"""The CPU rehearsal: every GPU experiment, as `parathink run experiment=E scale=cpu` under torchrun with 2 processes.

`scale=cpu` (hydra_conf/scale/cpu.yaml) keeps every setting of the experiment that picks a code path (ZeRO-2, bf16
weights with fp32 masters, gradient checkpointing, the collators and modes, rewards, gates and their probes, the data
sources and the verl evaluation file) and shrinks only sizes, so that what would stop the GPU run on day one stops
here first (docs/gpu.md, "The CPU rehearsal"). Each experiment runs in its own run directory; they share one stage
cache, so a prefix two experiments have in common (base, teacher, filter, sft of the Parallel-R1 family) runs once.
The order below puts the experiment that computes a prefix before the ones that reuse it.

    make rehearsal                                  # these tests alone
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest
from rehearsal_data import OUT, files, render

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
# parallel_r1_seen computes base, teacher and filter; unseen_s1 a structured sft that unseen_s2 and scaffold reuse;
# grpo_baseline reuses seen's base; npr and parathinker have grammars (and parathinker a model) of their own.
EXPERIMENTS = ("parallel_r1_seen", "parallel_r1_unseen_s1", "parallel_r1_unseen_s2", "scaffold", "grpo_baseline",
               "npr", "parathinker", "grpo_baseline+vllm")
# An experiment with settings of its own: grpo_baseline's causal RL and its eval (and the gates' probes) sampled by vLLM
# colocated with each rank (parathink.vllm_rollout), under the same launcher and ZeRO-2 chain; the cache gives it base.
VARIANTS = {"grpo_baseline+vllm": ("grpo_baseline", ["grpo_baseline.rollout.backend=vllm", "eval.rollout.backend=vllm"])}
TIMEOUT_S = 600  # one experiment; ~1-3 minutes each on 2 cores
# Stages that hold a model on a device: each records its estimate and its measured peak (docs/gpu.md)
MODEL_STAGES = ("base", "teacher", "sft", "rl_easy", "rl_hard", "rl_scaffold", "grpo_baseline", "eval")


@pytest.fixture(scope="session")
def stage_cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("rehearsal_cache")


def rehearse(experiment: str, run_dir: Path, stage_cache: Path, port: int,
             extra: list[str] = ()) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", str(port),
           "-m", "parathink.cli", "run", f"experiment={experiment}", "scale=cpu", "tracking=none",
           f"run_dir={run_dir}", f"stage_cache={stage_cache}", *extra]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "CI": "true", "DS_ACCELERATOR": "cpu", "VLLM_NO_USAGE_STATS": "1"}
    env.setdefault("PARATHINK_VLLM_PYTHON", str(REPO / ".venv-vllm" / "bin" / "python"))  # make vllm-venv
    # cwd: the scale's local data files are named relative to the checkout
    return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=TIMEOUT_S, env=env)


def memory_overruns(run_dir: Path, stages: list[str]) -> list[str]:
    """Stages whose measured peak exceeds their estimate, or that recorded none or no peak (``device_memory`` in
    ``<stage>/_timings.json``; ``parathink.placement.peak.check_run`` compares bytes and names a stage it could not check)."""
    from parathink.placement.peak import check_run

    return check_run(run_dir, [name for name in stages if name in MODEL_STAGES])


def record(experiment: str, seconds: float, cpu: float, run_dir: Path, stages: dict) -> None:
    """One line per experiment (its times, each stage's status, time and device_memory) appended to the file
    ``PARATHINK_REHEARSAL_RECORD`` names (`make rehearsal`: bench-results/rehearsal.jsonl), for docs/gpu.md's
    ledger; nothing without it."""
    path = os.environ.get("PARATHINK_REHEARSAL_RECORD")
    if not path:
        return
    memory = {}
    for name in stages:
        timings = run_dir / name / "_timings.json"
        memory[name] = json.loads(timings.read_text()).get("device_memory") if timings.exists() else None
    line = {"experiment": experiment, "seconds": round(seconds, 1), "cpu_s": round(cpu, 1),
            "stages": {name: {"status": e["status"], "duration_s": e["duration_s"], "device_memory": memory[name]}
                       for name, e in stages.items()}}
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(line) + "\n")


def _children_cpu_s() -> float:
    """CPU seconds of the finished child processes (both ranks): wall time on a shared host says little."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_experiment_rehearses_on_cpu(experiment, stage_cache, tmp_path, free_port):
    run_dir = tmp_path / "run"
    label, (experiment, extra) = experiment, VARIANTS.get(experiment, (experiment, []))
    started, cpu = time.monotonic(), _children_cpu_s()
    proc = rehearse(experiment, run_dir, stage_cache, free_port(), extra)
    seconds, cpu = time.monotonic() - started, _children_cpu_s() - cpu
    tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-40:])
    assert proc.returncode == 0, f"{experiment}: exit {proc.returncode} after {seconds:.0f} s\n{tail}"
    run = json.loads((run_dir / "run.json").read_text())
    from parathink.pipeline.compose import compose

    stages = list(compose([f"experiment={experiment}", "scale=cpu", *extra]).stages)
    assert sorted(run["stages"]) == sorted(stages), run["stages"]
    for name, entry in run["stages"].items():
        assert entry["status"] in ("ran", "cached") and entry["gate_passed"], (name, entry)
    print(f"{experiment}: {seconds:.0f} s ({cpu:.0f} CPU-s); "
          + ", ".join(f"{n} {e['status']} {e['duration_s']:.0f} s" for n, e in run["stages"].items()))
    record(label, seconds, cpu, run_dir, run["stages"])
    overruns = memory_overruns(run_dir, stages)
    assert not overruns, f"{label}: " + "; ".join(overruns)
    if extra:  # the vLLM variant: its rollouts and its eval rows came from vLLM
        metrics = [json.loads(line) for line in (run_dir / "grpo_baseline" / "metrics.jsonl").read_text().splitlines()]
        assert all(m["weight_sync_bytes"] > 0 for m in metrics), metrics
        rows = json.loads((run_dir / "eval" / "results.json").read_text())["stages"]
        assert {r["generator"] for stage in rows.values() for r in stage.values()} == {"vllm:causal"}, rows


def test_rehearsal_data_is_what_its_generator_writes():
    """The committed files in hydra_conf/scale/cpu_data are rehearsal_data.py's output (rerun it after editing it)."""
    for name, rows in files().items():
        assert (OUT / name).read_text(encoding="utf-8") == render(rows), f"{name}: run tests/rehearsal/rehearsal_data.py"
