"""Data-parallel RL on two real processes (torchrun, gloo on CPU; DDP, DeepSpeed ZeRO-2 and ZeRO-3): the update over
each process's share of a step equals the one-process update over the whole step, a stage launched under torchrun
trains and publishes once, and a killed run resumes exactly."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from rl_helpers import TORCHRUN_PREAMBLE, assert_trained, rl_cfg, sampled_batch

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
HELPERS = str(HERE / "rl_helpers.py")

pytestmark = pytest.mark.usefixtures("rl_test_setup")

UPDATE_SCRIPT = """
import contextlib, importlib.util, json, sys, torch
from parathink import distributed
procs = distributed.group()  # joins the two processes before accelerate, as train() does
from accelerate import Accelerator
from parathink.engine import Engine
from parathink.modeling import load_model
from parathink.rewards import register
from parathink.training.rl import update
from parathink.training.rl_parallel import deepspeed_plugin
from parathink.training.rl_rollouts import StepBatch

spec = importlib.util.spec_from_file_location("rl_helpers", sys.argv[1])
helpers = importlib.util.module_from_spec(spec); spec.loader.exec_module(helpers)
register("test_digits")(helpers.digit_share)
torch.set_num_threads(1)
model, tok = load_model(sys.argv[2])
engine = Engine(model, tok, "parallel_r1", "structured", 2)
batch = helpers.sampled_batch(engine, tok, flat_group=True)  # the same draws on both processes
# Process r trains on group r alone: group 0 is flat, so process 0 has nothing to train and runs a dummy pass.
mine = [r for r in batch.rollouts if r.group == procs.rank]
ds = None if sys.argv[4] == "ddp" else sys.argv[4]
cfg = helpers.rl_cfg(lr=1.0, grad_clip=0.0, micro_batch_size=3, deepspeed=ds)
accelerator = Accelerator(cpu=ds is None, deepspeed_plugin=deepspeed_plugin(cfg))
before = {n: p.detach().clone() for n, p in model.named_parameters()}
opt = torch.optim.SGD(model.parameters(), lr=1.0)
sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda i: 1.0)
wrapped, opt, sched = accelerator.prepare(model, opt, sched)
assert type(wrapped).__name__ == ("DistributedDataParallel" if ds is None else "DeepSpeedEngine"), type(wrapped)
stats = update(accelerator, wrapped, None, engine, opt, sched, StepBatch(rollouts=mine, all_rollouts=mine), cfg, procs)
whole = contextlib.nullcontext()
if ds is not None and "zero3" in ds:  # each process holds a slice of every parameter: gather them to compare
    import deepspeed
    assert any(p.numel() == 0 for p in model.parameters())  # sharded indeed: this process holds slices
    whole = deepspeed.zero.GatheredParameters(list(model.parameters()))
with whole:
    delta = {n: (p.detach() - before[n]).tolist() for n, p in model.named_parameters()}
json.dump({"delta": delta, "stats": stats}, open(f"{sys.argv[3]}.{procs.rank}.json", "w"))
"""


def shipped(launch: str) -> str:
    """The launch's ``<stage>.deepspeed`` value: null for DDP, else the shipped ZeRO file."""
    return "null" if launch == "ddp" else str(ROOT / "hydra_conf" / "deepspeed" / f"{launch}.json")


def sgd_json(tmp_path: Path, launch: str) -> Path:
    """The shipped ZeRO file, allowed the test's plain SGD (DeepSpeed vets optimisers it has not tested)."""
    ds = json.loads(Path(shipped(launch)).read_text())
    path = tmp_path / f"{launch}.json"
    path.write_text(json.dumps({**ds, "zero_allow_untested_optimizer": True}))
    return path


@pytest.mark.slow  # launches two torchrun processes
@pytest.mark.parametrize("launch", ["ddp", "zero2", "zero3"])
def test_two_process_update_equals_the_one_process_update(tiny_checkpoint, tmp_path, torchrun, launch):
    """SGD at lr 1 on the two processes' shares (process 0's group all flat, so it trains on zero-weight rows
    only: one for DDP, as many micro-batches as process 1 for ZeRO-2/3) against SGD on the whole batch in one
    process: the same parameters after the step, the same logged loss and entropy."""
    from accelerate import Accelerator

    from parathink.engine import Engine
    from parathink.modeling import load_model
    from parathink.training.rl import update

    script = tmp_path / "ddp_update.py"
    script.write_text(UPDATE_SCRIPT)
    ds = "ddp" if launch == "ddp" else str(sgd_json(tmp_path, launch))
    proc = torchrun(str(script), HELPERS, str(tiny_checkpoint), str(tmp_path / "out"), ds)
    assert proc.returncode == 0, proc.stderr[-3000:]
    ranks = [json.loads((tmp_path / f"out.{r}.json").read_text()) for r in (0, 1)]

    model, tok = load_model(tiny_checkpoint)
    engine = Engine(model, tok, "parallel_r1", "structured", 2)
    batch = sampled_batch(engine, tok, flat_group=True)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    stats = update(Accelerator(cpu=True), model, None, engine, opt, torch.optim.lr_scheduler.LambdaLR(opt, lambda i: 1.0),
                   batch, rl_cfg(lr=1.0, grad_clip=0.0, micro_batch_size=3))
    moved = 0.0
    for n, p in model.named_parameters():
        want = p.detach() - before[n]
        moved = max(moved, float(want.abs().max()))
        for r in ranks:  # both processes hold the same parameters after the step
            torch.testing.assert_close(torch.tensor(r["delta"][n]), want, atol=1e-6, rtol=1e-4, msg=n)
    assert moved > 1e-4  # the step did move the parameters: the comparison is not between two no-ops
    for r in ranks:
        assert abs(r["stats"]["loss"] - stats["loss"]) < 1e-6 and abs(r["stats"]["entropy"] - stats["entropy"]) < 1e-6


# ZeRO-2 is left out here as in the resume test below (~90 s a case): the update test above runs the shipped ZeRO-2
# file's engine, and the stage's AdamW, checkpoint and publish go through the same DeepSpeed calls as ZeRO-3's.
@pytest.mark.slow  # launches two torchrun processes
@pytest.mark.parametrize("launch", ["ddp", "zero3"])
def test_a_stage_under_torchrun_trains_on_both_processes_and_publishes_once(tiny_checkpoint, tmp_path, torchrun,
                                                                            launch):
    """`parathink stage grpo_baseline` on two processes, under DDP, ZeRO-2 or ZeRO-3 (with its AdamW and a step-2
    checkpoint): the probe's and the step's rollouts are the two processes' shares gathered, one manifest and
    one metrics file are written, the scratch is cleared."""
    import shutil

    run = tmp_path / "run"
    shutil.copytree(tiny_checkpoint, run / "base" / "model")
    s = "grpo_baseline"
    proc = torchrun("-m", "parathink.cli", "stage", s, f"run_dir={run}", "tracking=none",
                    f"{s}.steps=3", f"{s}.prompts_per_step=4", f"{s}.group_size=2", f"{s}.token_budget=100",
                    f"{s}.problems.n=16", f"{s}.checkpoint_every=2", f"{s}.probe_prompts=3", f"{s}.max_minutes=0",
                    f"{s}.deepspeed={shipped(launch)}", f"{s}.gate.min_probe_reward=null")  # untrained: reward -1
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"{s}: running on 2 processes" in proc.stderr
    manifest = json.loads((run / s / "_manifest.json").read_text())
    assert manifest["metrics"]["processes"] == 2.0 and manifest["metrics"]["steps"] == 3.0
    # The probe's 3 problems split 2 + 1 over the processes, 2 rollouts each: 6 when gathered.
    assert manifest["metrics"]["probe_n"] == 6.0
    rows = [json.loads(x) for x in (run / s / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3]  # rank 0 alone wrote them
    assert all(r["rollouts_trained"] == 8.0 for r in rows)  # 4 problems x 2 rollouts: both shares
    assert (run / s / "model" / "model.safetensors").exists()
    assert not (run / ".work" / s).exists() and not list((run / ".tmp").glob(f"{s}*"))


RESUME_SCRIPT = TORCHRUN_PREAMBLE + """
cfg = helpers.rl_cfg(probe_prompts=4, deepspeed=None if sys.argv[5] == "ddp" else sys.argv[5])
kill = helpers.KillAt(4) if sys.argv[4] == "kill" else None
summary = helpers.train_standalone(cfg, sys.argv[3], sys.argv[2], tracker=kill)[1]
if distributed.group().is_main:
    print("resumed_from_step", summary["resumed_from_step"])
"""


# ZeRO-2 is left out here (~95 s a case on a slow CI host): its checkpoint goes through the same DeepSpeed save and
# load as ZeRO-3's, which also covers the partitioned parameters and the engine's whole copy after a resume.
@pytest.mark.slow  # launches two torchrun processes
@pytest.mark.parametrize("launch", ["ddp", "zero3"])
def test_two_process_resume_after_a_kill_is_exact(tiny_checkpoint, tmp_path, torchrun, launch):
    """Rank 0 dies in step 4, after the step-2 checkpoint (torchrun then stops rank 1); the relaunch resumes both
    processes from it and ends with the weights and per-step rewards of an uninterrupted two-process run."""
    from safetensors.torch import load_file

    script = tmp_path / "ddp_resume.py"
    script.write_text(RESUME_SCRIPT)
    ds = "ddp" if launch == "ddp" else shipped(launch)
    common = (str(script), HELPERS, str(tiny_checkpoint))
    assert torchrun(*common, str(tmp_path / "a"), "straight", ds).returncode == 0
    assert torchrun(*common, str(tmp_path / "b"), "kill", ds).returncode != 0
    saved = tmp_path / "b" / ".work" / "rl_test" / "checkpoint"  # what the relaunch resumes from, not a fresh start
    assert json.loads((saved / "trainer_state.json").read_text())["step"] == 2
    if launch == "ddp":  # (under DeepSpeed on CPU accelerate counts one process and names both files _0)
        assert {"random_states_0.pkl", "random_states_1.pkl"} <= {f.name for f in saved.iterdir()}
    proc = torchrun(*common, str(tmp_path / "b"), "straight", ds)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "resumed_from_step 2.0" in proc.stdout  # a restart from scratch would end the same way
    a = load_file(str(tmp_path / "a" / "rl_test" / "model" / "model.safetensors"))
    b = load_file(str(tmp_path / "b" / "rl_test" / "model" / "model.safetensors"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert_trained(tiny_checkpoint, a)
    rows = [[json.loads(x) for x in (tmp_path / run / "rl_test" / "metrics.jsonl").read_text().splitlines()]
            for run in ("a", "b")]
    assert [r["step"] for r in rows[1]] == [1, 2, 3, 4] and all(r["rollouts_trained"] > 0 for r in rows[0])
    assert [r["reward_mean"] for r in rows[0]] == [r["reward_mean"] for r in rows[1]]
