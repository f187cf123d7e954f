"""The `sft` stage end to end on a tiny model: structured and causal collators, per-step metrics, resume after
a kill (same weights as an uninterrupted run), bad input refused before training, DeepSpeed ZeRO-2 on CPU."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from parathink.data.synthetic import corpus, generate, running_values
from parathink.errors import ConfigError
from parathink.modeling import add_tag_tokens, build_tiny_model, load_model, save_model
from parathink.modeling.tokenizer import train_tokenizer
from parathink.stages import sft as sft_stage
from parathink.stages.context import StageContext

ROOT = Path(__file__).resolve().parents[2]
CONF = str(ROOT / "hydra_conf")


def scripted_trace(record: dict) -> str:
    """Two paths (the worked chain, and the same chain restated), a summary and the boxed answer."""
    start, ops = int(record["start"]), record["ops"]
    values = running_values(start, ops)
    chain = "\n".join(f"{a} {op} {n} = {b}" for (op, n), a, b in zip(ops, [start] + values, values))
    answer = values[-1]
    return (f"<Parallel><Path>{chain}</Path><Path>{chain}\nso {answer}</Path></Parallel>"
            f"<Summary>Both paths give {answer}.</Summary>\n\\boxed{{{answer}}}")


class Tracker:
    def __init__(self):
        self.metrics, self.params = [], {}

    def log_params(self, p):
        self.params.update(p)

    def log_metrics(self, m, step=None):
        self.metrics.append((step, dict(m)))

    def log_artifact(self, *a, **k):
        pass


@pytest.fixture(scope="module")
def run_root(tmp_path_factory):
    """A run directory with base/model (a fresh tiny model) and filter/accepted.jsonl (scripted traces)."""
    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("run")
    tok = train_tokenizer(corpus(300, seed=5))
    cfg = OmegaConf.load(ROOT / "hydra_conf/model/tiny.yaml")
    model = build_tiny_model(cfg, tok)
    add_tag_tokens(model, tok)
    save_model(model, tok, root / "base" / "model")
    (root / "filter").mkdir()
    with (root / "filter" / "accepted.jsonl").open("w") as f:
        for r in generate("easy", "train", 48, seed=2):
            f.write(json.dumps({"id": r["id"], "source": r["source"], "problem": r["problem"],
                                "answer": r["answer"], "response": scripted_trace(r)}) + "\n")
    return root


def config(*overrides):
    with initialize_config_dir(config_dir=CONF, version_base=None):
        return compose(config_name="config", overrides=["sft.global_batch=8", "sft.micro_batch=4", "sft.max_steps=4",
                                                        "sft.save_steps=2", "sft.max_minutes=0",
                                                        "sft.path_replay.n=0", "sft.vote_replay.n=0", *overrides])


def context(root: Path, name="sft", tracker=None):
    ctx = StageContext.standalone("sft", root, tracker=tracker or Tracker())
    ctx.progress = False
    if name != "sft":  # a separate work/out dir for a second run on the same inputs
        ctx.out_dir, ctx.work_dir = root / name, root / f".work/{name}"
        ctx.out_dir.mkdir(parents=True, exist_ok=True)
        ctx.work_dir.mkdir(parents=True, exist_ok=True)
    return ctx


def _weights(path: Path) -> dict[str, torch.Tensor]:
    model, _ = load_model(path, add_tags=False)
    return {k: v.clone() for k, v in model.state_dict().items()}


@pytest.mark.parametrize("collator", ["structured", "causal"])
def test_sft_trains_and_logs_every_step(run_root, collator):
    tracker = Tracker()
    ctx = context(run_root, f"sft_{collator}", tracker)
    metrics = sft_stage.run(config(f"sft.collator={collator}"), ctx)
    assert metrics["steps"] == 4 and metrics["kept"] == 48 and metrics["dropped"] == 0
    steps = {s for s, m in tracker.metrics if {"loss", "lr", "grad_norm", "tokens_per_s"} <= set(m)}
    assert steps == {1, 2, 3, 4}
    assert all(m["tokens_per_s"] > 0 and m["loss"] > 0 for _, m in tracker.metrics)
    model, tok = load_model(ctx.out_dir / "model")
    assert tok.convert_tokens_to_ids("<Parallel>") != tok.unk_token_id
    before = _weights(run_root / "base" / "model")
    after = model.state_dict()
    assert any(not torch.equal(before[k], after[k]) for k in before)


def test_replay_adds_synthetic_traces_to_the_filters(run_root):
    ctx = context(run_root, "sft_replay")
    metrics = sft_stage.run(config("sft.path_replay.n=16", "sft.vote_replay.n=8", "sft.max_steps=1"), ctx)
    assert metrics["traces"] == 48 and metrics["path_replay"] == 16 and metrics["vote_replay"] == 8
    assert metrics["kept"] == 72
    for key in ("path_replay", "vote_replay"):
        with pytest.raises(ConfigError, match=f"{key}.n"):
            sft_stage.validate(config(f"sft.{key}.n=-1"))
        with pytest.raises(ConfigError, match=f"{key}.level"):
            sft_stage.validate(config(f"sft.{key}.n=4", f"sft.{key}.level=medium"))
        with pytest.raises(ConfigError, match=f"{key}.fork"):
            sft_stage.validate(config(f"sft.{key}.n=4", f"sft.{key}.fork=late"))


def test_replay_kinds_draw_distinct_problems_none_of_the_traces():
    from parathink.config.sft import Replay, SFTConfig
    from parathink.data.synthetic import generate

    replay = Replay(n=30, level="hard", seed=7)
    settings = SFTConfig(path_replay=replay, vote_replay=replay)
    traces = generate("hard", "train", 10, seed=7)  # the very problems a same-seed draw would start with
    out = sft_stage._replay(settings, "parallel_r1", traces)
    problems = [[t["problem"] for t, _ in out[key]] for key in sft_stage.REPLAYS]
    assert [len(p) for p in problems] == [30, 30]
    assert not set(problems[0]) & set(problems[1]) and not set(problems[0] + problems[1]) & {t["problem"] for t in traces}
    for trace, spans in out["vote_replay"]:  # two right paths of three: the vote is the answer
        assert trace["response"].endswith(f"\\boxed{{{trace['answer']}}}") and spans[0][0] == 0


def test_overlong_traces_are_counted(run_root):
    ctx = context(run_root, "sft_overlong")
    metrics = sft_stage.run(config("sft.max_length=80", "sft.overlong=truncate", "sft.max_steps=1"), ctx)
    assert metrics["truncated"] > 0 and metrics["truncated"] + metrics["kept"] - metrics["truncated"] == 48


def test_resume_after_kill_matches_uninterrupted(run_root, monkeypatch):
    """Kill after step 3 (checkpoint at 2); the rerun resumes at 2 and ends with the uninterrupted weights."""
    full = sft_stage.run(config(), context(run_root, "sft_full"))
    assert full["resumed_from_step"] == 0

    from parathink.training import sft as sft_mod

    original = sft_mod.TrackerCallback.on_log

    def crash(self, args, state, control, logs=None, **kw):
        original(self, args, state, control, logs=logs, **kw)
        if state.global_step == 3 and logs and "loss" in logs:
            raise KeyboardInterrupt("killed")

    monkeypatch.setattr(sft_mod.TrackerCallback, "on_log", crash)
    with pytest.raises(KeyboardInterrupt):
        sft_stage.run(config(), context(run_root, "sft_killed"))
    monkeypatch.setattr(sft_mod.TrackerCallback, "on_log", original)
    resumed = sft_stage.run(config(), context(run_root, "sft_killed"))
    assert resumed["resumed_from_step"] == 2 and resumed["steps"] == 4
    a, b = _weights(run_root / "sft_full" / "model"), _weights(run_root / "sft_killed" / "model")
    assert max((a[k] - b[k]).abs().max().item() for k in a) < 1e-6


def test_bad_input_fails_before_training(run_root, tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        sft_stage.run(config(f"sft.init={tmp_path}/no_such_model"), context(run_root, "sft_bad1"))
    broken = tmp_path / "broken"
    import shutil

    shutil.copytree(run_root / "base" / "model", broken)
    (broken / "tokenizer.json").write_text("{not json")
    with pytest.raises(ValueError, match="cannot load a tokenizer"):
        sft_stage.run(config(f"sft.init={broken}"), context(run_root, "sft_bad2"))
    with pytest.raises(ConfigError, match="attn_implementation"):
        sft_stage.validate(config("model.attn_implementation=flash_attention_2"))
    with pytest.raises(ConfigError, match="global_batch"):
        sft_stage.validate(config("sft.global_batch=6"))
    assert not (run_root / ".work/sft_bad1/trainer").exists() or not any((run_root / ".work/sft_bad1/trainer").iterdir())


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_deepspeed_zero2_on_cpu(run_root, tmp_path):
    """ZeRO-2 from configuration only, on the CPU accelerator (first run JIT-builds a small op)."""
    env = dict(os.environ, DS_ACCELERATOR="cpu", RANK="0", LOCAL_RANK="0", WORLD_SIZE="1",
               MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()), CI="true", OMP_NUM_THREADS="1")
    script = f"""
import json, sys
sys.path.insert(0, {str(Path(__file__).parent)!r})
from test_sft import config, context
from pathlib import Path
from parathink.stages import sft
m = sft.run(config("sft.deepspeed={ROOT}/hydra_conf/deepspeed/zero2.json", "sft.max_steps=2"),
            context(Path({str(run_root)!r}), "sft_ds"))
print("METRICS", json.dumps(m))
"""
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    metrics = json.loads(proc.stdout.split("METRICS", 1)[1])
    assert metrics["steps"] == 2
    assert (run_root / "sft_ds" / "model" / "config.json").exists()


@pytest.mark.slow
def test_sft_under_torchrun_trains_on_two_processes_and_publishes_once(run_root, tmp_path):
    """`parathink stage sft` on two processes (the Trainer's DDP, gloo on CPU): the global batch of 8 is 4 per
    process with no accumulation, the time budget stops both processes at the same step, one manifest."""
    import shutil

    run = tmp_path / "run"
    for stage in ("base", "filter"):
        shutil.copytree(run_root / stage, run / stage)
    env = dict(os.environ, CI="true", OMP_NUM_THREADS="1")
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", str(_free_port()),
         "-m", "parathink.cli", "stage", "sft", f"run_dir={run}", "tracking=none", "sft.global_batch=8",
         "sft.micro_batch=4", "sft.max_steps=4", "sft.save_steps=2", "sft.max_minutes=0.0001",
         "sft.gate.enabled=false"],  # one step learns no format; the gate is tests/stages/test_stage_gates.py's
        env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "sft: running on 2 processes" in proc.stderr
    manifest = json.loads((run / "sft" / "_manifest.json").read_text())
    assert manifest["metrics"]["steps"] == 1  # the budget ran out after the first step, on both processes
    assert manifest["metrics"]["planned_steps"] == 4
    assert "sft: WARNING: sft.max_minutes=0.0001 stopped training at step 1 of 4" in proc.stderr
    assert (run / "sft" / "model" / "model.safetensors").exists()
    assert not (run / ".work" / "sft").exists() and not list((run / ".tmp").glob("sft*"))
