"""parathink.placement.memory_model: the parts are the tensors they name, `plan` prints them and refuses what does not fit."""

from __future__ import annotations

import json
import re

import pytest

from parathink import cli
from parathink.errors import ConfigError
from parathink.pipeline.compose import compose
from parathink.pipeline.runner import stage_roles
from parathink.placement import cluster
from parathink.placement.memory_model import (
    GIB,
    PARTS,
    Arch,
    Update,
    layer_activation_bytes,
    logits_bytes,
    mask_bytes,
    states,
    step_transient,
    total,
    training_activations,
)


def plan_of(cfg, names):
    """``cluster.plan`` as the pipeline calls it: each stage with the role its ``StageSpec`` declares."""
    return cluster.plan(cfg, stage_roles(cfg, names))

QWEN3_4B = Arch(layers=36, hidden=2560, heads=32, kv_heads=8, head_dim=128, intermediate=9728, vocab=151936)


def test_qwen3_4b_shape_gives_its_parameter_count_and_kv_bytes():
    from parathink.engine.kv_budget import kv_bytes_per_token

    assert abs(QWEN3_4B.params - 4.022e9) < 1e6  # Qwen3-4B-Base: 4,022,468,096
    assert kv_bytes_per_token(36, 8, 128, "bfloat16") == 147_456


def test_states_follow_dtype_and_zero_sharding():
    p = 1_000_000
    plain = states(p, 2, 8, 0, trains=True)
    assert plain == {"weights": 2 * p, "grads": 2 * p, "optimizer": (8 + 4 + 4 + 4) * p}  # moments, masters, step
    zero2 = states(p, 2, 8, 2, trains=True)
    assert zero2 == {"weights": 2 * p, "grads": 4 * p // 8, "optimizer": (8 + 4 + 4) * p // 8}
    assert states(p, 2, 8, 3, trains=True, whole_copy=True)["weights"] == 2 * p // 8 + 2 * p
    assert states(p, 4, 1, 0, trains=True)["optimizer"] == 12 * p  # fp32 parameters are their own masters
    assert states(p, 2, 1, 0, trains=False) == {"weights": 2 * p, "grads": 0, "optimizer": 0}


def test_checkpointing_keeps_layer_inputs_and_one_layer():
    a, rows, length = QWEN3_4B, 8, 5000
    full = training_activations(a, 2, rows, length, checkpointing=False)
    ckpt = training_activations(a, 2, rows, length, checkpointing=True)
    per_layer = layer_activation_bytes(a, 2)
    tail = 2 * a.hidden * 2 + a.hidden * 4
    assert full == rows * length * (a.layers * per_layer + tail)
    assert ckpt == rows * length * (a.layers * a.hidden * 2 + per_layer + tail)
    assert full / ckpt > 15
    structured = training_activations(a, 2, rows, length, checkpointing=True, mask="additive")
    assert structured - ckpt == rows * length * length * 2  # the 4-D additive mask, once


def test_logits_are_one_chunk_and_the_phases_do_not_add():
    assert logits_bytes(QWEN3_4B, 2, 1024) == 1024 * 151936 * 12  # three fp32 [chunk, V] at the chunk's backward
    assert logits_bytes(QWEN3_4B, 4, 1024) == logits_bytes(QWEN3_4B, 2, 1024)
    parts = dict.fromkeys(PARTS, 0) | {"weights": 5, "kv_cache": 10, "activations": 3, "logits": 4}
    assert total(parts) == 5 + 10
    assert total(parts | {"kv_cache": 2}) == 5 + 3 + 4


def test_a_training_step_is_its_largest_phase():
    parts = dict.fromkeys(PARTS, 0) | {"weights": 10, "grads": 10, "optimizer": 30, "activations": 50, "logits": 6}
    resident = 10 + 30 - 10  # weights, optimizer less its transient
    plain = Update(transient=10, head_grad=2)
    assert total(parts, plain) == resident + 50 + 6 + 2  # the first log-prob chunk's backward
    assert total(parts | {"activations": 1, "logits": 1}, plain) == resident + 10 + 10  # the optimiser step
    assert total(parts | {"activations": 1, "logits": 1}, Update(head_grad=8, tied=True)) == 40 + 10 + 16  # the end
    ckpt = Update(transient=10, recomputed=45, head_grad=2)  # the layer inputs alone are 5
    assert total(parts, ckpt) == resident + 50 + 10  # a recomputed layer with every gradient
    assert total(parts | {"kv_cache": 70}, ckpt) == resident + 10 + 70  # the rollout


def test_masks_count_what_attention_keeps():
    a, rows, length = QWEN3_4B, 2, 1000
    square = rows * length * length
    assert mask_bytes(a, 2, rows, length, False, "additive") == square * 2  # one tensor, every layer's
    assert mask_bytes(a, 2, rows, length, False, "padding") == square + a.layers * square * 2  # converted per layer
    assert mask_bytes(a, 2, rows, length, True, "padding") == square + square * 2
    assert mask_bytes(a, 2, rows, length, True, "none") == 0
    assert step_transient(10**6, 4, 1, 0, fused=True) == 0 and step_transient(10**6, 2, 1, 0) == 8 * 10**6


def _plan(capsys, *overrides):
    code = cli.main(["plan", *overrides])
    out = capsys.readouterr()
    return code, out.out, out.err.strip().splitlines()


def test_plan_prints_device_memory_for_every_gpu_stage_within_80_gib(capsys):
    code, out, _ = _plan(capsys, "experiment=parallel_r1_seen")
    assert code == 0
    placement = json.loads(out)["placement"]
    for stage in ("sft", "rl_easy", "rl_hard", "eval"):
        memory = placement[stage]["device_memory"]
        assert set(memory["parts"]) == set(PARTS)
        assert memory["capacity_gib"] == 80.0 and 0 < memory["estimate_gib"] <= 80.0, stage
    rl = placement["rl_easy"]["device_memory"]["parts"]
    assert rl["kv_cache"] > 7 * 5000 * 147_456 / GIB  # more than seven whole 5,000-token rollouts in flight
    assert placement["filter"]["device_memory"] is None  # a CPU stage


def test_plan_on_24_gib_gpus_is_refused_naming_a_stage_and_its_largest_part(capsys):
    code, out, err = _plan(capsys, "experiment=parallel_r1_seen", "cluster.gpu_memory=24Gi")
    assert code == 2 and out == ""
    (line,) = err
    assert re.search(r"cluster: (sft|rl_easy|rl_hard|eval) needs about [\d.]+ GiB per GPU, more than "
                     r"cluster.gpu_memory \(24.0 GiB\); the largest part is \w+", line), line


@pytest.mark.parametrize("override, stage, part", [
    ("rl_easy.gradient_checkpointing=false", "rl_easy", "activations"),
    ("rl_easy.kv_cache_gib=100", "rl_easy", "kv_cache"),
])
def test_plan_names_the_part_that_does_not_fit(capsys, override, stage, part):
    code, _, (line,) = _plan(capsys, "experiment=parallel_r1_seen", override)
    assert code == 2 and f"cluster: {stage} needs about" in line and f"the largest part is {part}" in line, line


def test_a_cache_that_cannot_hold_one_rollout_is_refused():
    cfg = compose(["experiment=parallel_r1_seen", "rl_easy.deepspeed=null"])  # 75 GiB of unsharded states
    with pytest.raises(ConfigError, match=r"rl_easy: the KV cache gets 0.00 GiB per GPU, less than one rollout"):
        plan_of(cfg, ["rl_easy"])


# ------------------------------------------------------------------ issue 47: every allocation inside the plan

def test_plan_gives_the_teacher_and_the_gated_probes_their_device_memory(capsys):
    """The vLLM teacher: its engine's gpu_memory_utilization of the GPU (vLLM's 0.9) beside the parent's context;
    base and sft: their gate's probe (256 rows of up to 5,000 tokens of Qwen3-4B), whose KV cache is the
    remainder, far below the ~117 GB an unbudgeted probe allocated."""
    code, out, _ = _plan(capsys, "experiment=parallel_r1_seen")
    placement = json.loads(out)["placement"]
    teacher = placement["teacher"]["device_memory"]
    assert teacher["parts"]["kv_cache"] == 72.0 and teacher["estimate_gib"] == 73.5
    for stage in ("base", "sft"):
        memory = placement[stage]["device_memory"]
        assert "probe" in memory["note"] and memory["estimate_gib"] <= 0.9 * 80 + 1e-6
        assert 40 < memory["parts"]["kv_cache"] < 256 * 5049 * 147_456 / GIB / 1.5


def test_the_rl_pool_is_the_remainder_after_every_counted_workspace():
    """RL's KV pool: 0.9 of the GPU less the states and the workspaces it used to leave to luck: the paged
    gather (512 rows x 5,000 x 4 KiB), float64 sampling, ZeRO-2's buckets, the CUDA context."""
    from parathink.placement.memory_model import gather_workspace, sampling_workspace, stage_budget, zero_buckets

    # ~10 GB, the figure: whole 16-token blocks, 5,000 tokens -> 313 blocks = 5,008 slots a row
    assert gather_workspace(QWEN3_4B, 2, 512, 5000) == 512 * 5008 * 4096
    assert sampling_workspace(QWEN3_4B, 512) == 512 * 151936 * 16
    buckets = zero_buckets(QWEN3_4B, "hydra_conf/deepspeed/zero2.json", 2, 8, 500_000_000)
    part, big = -(-QWEN3_4B.params // 8), 151936 * 2560
    assert buckets == 2 * 500_000_000 * 2 + 500_000_000 * 2 + (part + 2 * big) * 2 + big * 4  # see the test below
    cfg = compose(["experiment=parallel_r1_seen"])
    budget = stage_budget(cfg, "rl_easy", stage_roles(cfg, ["rl_easy"])["rl_easy"], 8, 80 * GIB)
    p = budget.parts
    assert p["workspace"] > gather_workspace(QWEN3_4B, 2, 512, 5000) + sampling_workspace(QWEN3_4B, 512)
    assert p["kv_cache"] == int(0.9 * 80 * GIB) - (p["weights"] + p["grads"] + p["optimizer"] + p["workspace"])


def _ds_json(tmp_path, **zero) -> str:
    path = tmp_path / "ds.json"
    path.write_text(json.dumps({"zero_optimization": zero}))
    return str(path)


def test_zero_buckets_are_what_deepspeed_allocates_to_reduce_the_gradients(tmp_path):
    """stage_1_and_2.py: two whole reduce buckets with overlap_comm (setup_buckets: torch.empty(reduce_bucket_size)
    whatever the model's size: 2 x 5e8 x 2 B for a 1M-parameter bf16 model, as the rehearsal measured), in the
    parameters' dtype; with reduce_scatter every rank's slices of a bucket flattened for one all-reduce (the whole
    bucket: at most the model); ZeRO-2's grads_in_partition (the parameters that touch this rank's partition, whole:
    at most the partition and two parameters crossing its ends); the fp32 cast of a reduced slice (at most the
    largest parameter or a partition); the all-gather allocates nothing, whatever its size."""
    from parathink.placement.memory_model import RL_AUTO_BUCKET, largest_param, model_arch, zero_buckets

    tiny = model_arch({"source": "builtin:tiny_base", "config": json.loads(
        open("src/parathink/assets/tiny_base/config.json").read())})
    part, big = -(-tiny.params // 2), largest_param(tiny)
    in_partition = min(tiny.params, part + 2 * big) * 2
    rl = zero_buckets(tiny, "hydra_conf/deepspeed/zero2.json", 2, 2, RL_AUTO_BUCKET)
    assert rl == 2 * 500_000_000 * 2 + tiny.params * 2 + in_partition + min(big, part) * 4
    # the rehearsal's profile of unseen_s2's rl_hard (rank 0, at the backward's end): the flattened bucket
    # 2,104,832 B (P x 2) and grads_in_partition 1,119,744 B, within what is counted for each
    assert tiny.params * 2 == 2_104_832 and 1_119_744 <= in_partition
    sft = zero_buckets(tiny, "hydra_conf/deepspeed/zero2.json", 2, 2)  # "auto": the Trainer's hidden x hidden
    assert sft == 2 * 128**2 * 2 + 128**2 * 2 + in_partition + min(big, part) * 4
    one = _ds_json(tmp_path, stage=2, reduce_bucket_size=1000, allgather_bucket_size=10**12)
    # one buffer, no fp32 cast of fp32 gradients
    assert zero_buckets(tiny, one, 4, 2) == 1000 * 4 + 1000 * 4 + min(tiny.params, part + 2 * big) * 4
    with_flat = zero_buckets(tiny, one, 4, 2)  # (_ds_json rewrites one file)
    flat_free = _ds_json(tmp_path, stage=2, reduce_bucket_size=1000, reduce_scatter=False)
    assert with_flat - zero_buckets(tiny, flat_free, 4, 2) == 1000 * 4  # without reduce_scatter: reduced in place
    assert zero_buckets(tiny, _ds_json(tmp_path, stage=1, overlap_comm=True, reduce_bucket_size=1000), 2, 2) == (
        2 * 1000 * 4 + 1000 * 2 + min(big, part) * 4)  # ZeRO-1 stages its fp32 accumulator, copies no partition
    assert zero_buckets(tiny, _ds_json(tmp_path, stage=0), 2, 2) == 0 and zero_buckets(tiny, None, 2, 2) == 0


def test_the_engines_folded_copy_of_a_small_model_is_counted_and_none_of_qwen3_4b():
    """engine.runner.FastRunner keeps fused, pre-transposed weights (and lm_head as [h, V]) for a model of at most
    FOLD_MAX_PARAMS parameters, for the engine's life (an RL stage's update included: the rehearsal's residual)."""
    from parathink.engine.runner import FOLD_MAX_PARAMS
    from parathink.placement.memory_model import ENGINE_FOLD_MAX_PARAMS, folded_weights, model_arch

    assert ENGINE_FOLD_MAX_PARAMS == FOLD_MAX_PARAMS and folded_weights(QWEN3_4B, 2) == 0
    tiny = model_arch({"source": "builtin:tiny_base", "config": json.loads(
        open("src/parathink/assets/tiny_base/config.json").read())})
    layer = 128 * 128 + 2 * 128 * 64 + 128 * 128 + 3 * 128 * 512  # qkv, o, gate_up, down
    assert folded_weights(tiny, 2) == (4 * layer + 531 * 128) * 2 == 2_102_016  # the 4 x 491,520 B + 135,936 B measured


def test_the_rl_update_counts_no_mask_for_the_causal_grammar_and_the_device_mask_for_a_structured_one():
    """recompute_logprobs: SDPA's is_causal path (no L x L tensor) for causal rows; the additive [B, 1, L, L]
    mask built on the device for structured ones (modeling.attention)."""
    from parathink.placement.memory_model import recomputed_layer, rl_budget

    section = {"deepspeed": None, "token_budget": 5000, "micro_batch_size": 8, "gradient_checkpointing": True,
               "logprob_chunk_tokens": 1024, "rollout_batch_size": 64, "kv_cache_gib": 10.0}
    for mode, mask in (("causal", "none"), ("structured", "additive")):
        budget = rl_budget(QWEN3_4B, 2, {**section, "mode": mode}, "rl_easy", 8, 80 * GIB)
        assert budget.parts["activations"] == training_activations(QWEN3_4B, 2, 8, 5000, True, mask=mask), mode
        assert budget.update.recomputed == recomputed_layer(QWEN3_4B, 2, 8, 5000, True, mask)
    causal = rl_budget(QWEN3_4B, 2, {**section, "mode": "causal"}, "rl_easy", 8, 80 * GIB).parts["activations"]
    structured = rl_budget(QWEN3_4B, 2, {**section, "mode": "structured"}, "rl_easy", 8, 80 * GIB)
    assert structured.parts["activations"] - causal == 8 * 5000**2 * 2  # the mask, 0.37 GiB


def test_vllm_rollouts_count_vllms_copy_of_the_weights_and_leave_the_kv_cache_the_rest():
    """rollout.backend=vllm: the colocated engine holds its own weights on the GPU (bf16 Qwen3-4B: 7.5 GiB); with
    the same capacity the KV cache it gets is that much smaller, and the estimate still fits."""
    from parathink.pipeline.compose import resolve_config_path
    from parathink.placement.memory_model import rl_budget

    section = {"deepspeed": resolve_config_path("hydra_conf/deepspeed/zero2.json"), "token_budget": 5000,
               "micro_batch_size": 8, "gradient_checkpointing": True, "logprob_chunk_tokens": 1024,
               "rollout_batch_size": 64, "kv_cache_gib": 0.0, "mode": "causal"}
    native = rl_budget(QWEN3_4B, 2, section, "rl_easy", 8, 80 * GIB)
    vllm = rl_budget(QWEN3_4B, 2, {**section, "rollout": {"backend": "vllm"}}, "rl_easy", 8, 80 * GIB)
    assert vllm.parts["weights"] - native.parts["weights"] == QWEN3_4B.params * 2
    assert native.parts["kv_cache"] - vllm.parts["kv_cache"] == QWEN3_4B.params * 2
    assert vllm.estimate <= 80 * GIB


def test_scale_cpu_gives_every_stage_that_holds_a_model_an_estimate_from_the_tiny_shape(capsys):
    """Under scale=cpu (CPU placements, the tiny model whose vocabulary only its config.json names) every stage
    that holds a model has an estimate for the rehearsal's peak to meet: no CUDA workspace, no capacity."""
    import torch

    code, out, err = _plan(capsys, "experiment=parallel_r1_seen", "scale=cpu")
    assert code == 0, err
    placement = json.loads(out)["placement"]
    vocab = json.loads(open("src/parathink/assets/tiny_base/config.json").read())["vocab_size"]
    assert torch.tensor(vocab) > 0
    for stage in ("base", "teacher", "sft", "rl_easy", "rl_hard", "eval"):
        memory = placement[stage]["device_memory"]
        assert not placement[stage]["gpu"] and memory["capacity_gib"] is None, stage
        assert 0 < memory["estimate_bytes"] < 2 * GIB, stage
    assert placement["filter"]["device_memory"] is None


def test_probe_kv_bytes_is_the_plans_kv_part_on_a_gpu_and_none_on_a_cpu():
    from parathink.placement.memory_model import probe_budget, probe_kv_bytes
    from parathink.quality.probe import ProbeSpec

    spec = ProbeSpec(problems={"source": "synthetic"}, k=4, mode="causal", num_paths=2, temperature=1.0, top_p=1.0,
                     max_new_tokens=3000, batch_size=256)
    shape = {"num_hidden_layers": 36, "hidden_size": 2560, "num_attention_heads": 32, "num_key_value_heads": 8,
             "head_dim": 128, "intermediate_size": 9728, "vocab_size": 151936}
    assert probe_kv_bytes(spec, shape, "torch.bfloat16", None) is None
    kv = probe_kv_bytes(spec, shape, "torch.bfloat16", 80 * GIB)
    assert kv == probe_budget(QWEN3_4B, 2, spec, 80 * GIB).parts["kv_cache"] < 256 * 5049 * 147_456


def test_device_peak_counts_a_stages_live_tensors_and_over_estimate_compares(tmp_path):
    """On a CPU: the live-tensor peak of what ran inside (a tensor from before is not counted); the record goes
    to _timings.json and over_estimate names a stage whose peak exceeds its estimate."""
    import torch

    from parathink.placement.peak import DevicePeak, check_run, over_estimate
    from parathink.rundir import timings

    before = torch.ones(2**20)  # noqa: F841 - alive throughout, allocated before: not the stage's
    with DevicePeak(True) as peak:  # measure_device_memory=true (scale=cpu)
        a = torch.ones(2**20)  # 4 MiB
        b = torch.ones(2**19)  # 2 MiB, both alive
        del a, b
        c = torch.ones(2**18)  # noqa: F841 - 1 MiB after they were freed
    assert peak.measured_by == "cpu.live_tensors"
    assert 6 * 2**20 <= peak.peak < 6.5 * 2**20
    for name, estimate in (("fits", 7 * 2**20), ("over", 5 * 2**20), ("nomodel", None)):
        (tmp_path / name).mkdir()
        timings.write(tmp_path / name, device_memory=peak.record(estimate))
    assert over_estimate(tmp_path / "fits") is None and over_estimate(tmp_path / "nomodel") is None
    assert re.match(r"stage over: peak 0.0059 GiB .* exceeds its estimate 0.0049 GiB", over_estimate(tmp_path / "over"))
    (tmp_path / "silent").mkdir()
    assert check_run(tmp_path, ["fits", "over", "silent"]) == [
        over_estimate(tmp_path / "over"), "stage silent: no device_memory in its _timings.json"]


def test_the_cpu_peak_is_measured_only_where_asked_for(tmp_path, monkeypatch):
    """The profiler's ~7 us an allocation is paid only under measure_device_memory=true (scale=cpu) or
    PARATHINK_CPU_PEAK=1; otherwise nothing is measured (peak null), and check_run fails such a stage when it
    expects a figure: an unmeasured rehearsal cannot pass."""
    import torch

    from parathink.placement.peak import DevicePeak, check_run, measures_cpu
    from parathink.rundir import timings

    monkeypatch.delenv("PARATHINK_CPU_PEAK", raising=False)
    assert (measures_cpu(None), measures_cpu(False), measures_cpu(True)) == (False, False, True)
    for setting in (None, False):
        with DevicePeak(setting) as peak:
            torch.ones(2**20)
        assert (peak.measured_by, peak.peak) == ("none", None)
    (tmp_path / "rl_hard").mkdir()
    timings.write(tmp_path / "rl_hard", device_memory=peak.record(5 * 2**20))
    assert json.loads((tmp_path / "rl_hard" / "_timings.json").read_text())["device_memory"]["peak_bytes"] is None
    assert check_run(tmp_path, ["rl_hard"]) == ["stage rl_hard: device_memory has no measured peak (none)"]
    monkeypatch.setenv("PARATHINK_CPU_PEAK", "1")
    with DevicePeak() as peak:
        torch.ones(2**20)
    assert peak.measured_by == "cpu.live_tensors" and peak.peak >= 4 * 2**20
    monkeypatch.setenv("PARATHINK_CPU_PEAK", "0")
    assert not measures_cpu(True)


@pytest.mark.parametrize("setting, measured_by", [(None, "none"), ("true", "cpu.live_tensors")])
def test_a_run_records_its_stages_device_memory_as_its_setting_asks(curriculum, setting, measured_by, monkeypatch):
    """parathink run: every stage's _timings.json has device_memory; on a CPU measured only when
    measure_device_memory=true (what scale=cpu sets)."""
    from parathink.pipeline import runner

    monkeypatch.delenv("PARATHINK_CPU_PEAK", raising=False)
    extra = [f"measure_device_memory={setting}"] if setting else []
    assert runner.main_run(curriculum.overrides(*extra, stages=("prep",))) == 0
    record = json.loads((curriculum.tmp / "run" / "prep" / "_timings.json").read_text())["device_memory"]
    assert record["measured_by"] == measured_by and (record["peak_bytes"] is None) == (setting is None)


def test_rl_update_terms_bound_every_micro_batch_a_run_can_form():
    """A micro-batch is at most micro_batch_size rows of at most token_budget tokens and, with micro_batch_tokens,
    at most that many padded tokens: 7 rows of 140 tokens fit micro_batch_tokens=1,000 beside token_budget=256,
    980 padded tokens that tokens // token_budget rows (3 x 256 = 768) would under-count."""
    from parathink.placement.memory_model import recomputed_layer, rl_budget, training_activations
    from parathink.training.rl import micro_batches

    arch = QWEN3_4B
    section = {"deepspeed": None, "token_budget": 256, "micro_batch_size": 8, "micro_batch_tokens": 1000,
               "gradient_checkpointing": True, "mode": "structured", "num_paths": 2, "logprob_chunk_tokens": 4096,
               "rollout_batch_size": 8, "group_size": 4, "max_prompt_tokens": 64, "kv_cache_gib": 1.0}
    lengths = [140] * 8
    formed = micro_batches(list(range(8)), lengths, 8, 1000)
    assert max(len(b) for b in formed) == 7  # what training.rl forms
    budget = rl_budget(arch, 2, section, "rl_hard", 1, None)
    for rows, length in ((7, 140), (3, 256), (1, 256)):
        assert budget.parts["activations"] >= training_activations(arch, 2, rows, length, True, mask="additive")
        assert budget.update.recomputed >= recomputed_layer(arch, 2, rows, length, True, mask="additive")
    assert budget.parts["logits"] == 1000 * arch.vocab * 12  # one chunk: the padded tokens, fewer than 4,096
    unbounded = rl_budget(arch, 2, {**section, "micro_batch_tokens": 0}, "rl_hard", 1, None)
    assert unbounded.parts["activations"] == training_activations(arch, 2, 8, 256, True, mask="additive")


def test_the_cpu_peak_counts_a_tensor_freed_off_the_profiled_thread_once_its_address_is_reused():
    """memory.live_peak: the profiler records no free made on a thread it does not follow (gloo's worker dropping
    DeepSpeed's flattened bucket); an allocation at an address still live means the earlier tensor was freed.
    A free of a tensor made before the stage lowers the total; a free and an allocation at one instant: free first."""
    from parathink.placement.peak import live_peak

    unrecorded_free = [(1, 100, 0xA), (2, 100, 0xA), (3, 100, 0xA)]  # one tensor live at a time
    assert live_peak(unrecorded_free) == 100
    assert live_peak([(1, 100, 0xA), (2, 50, 0xB), (3, -100, 0xA), (4, 70, 0xC)]) == 150
    assert live_peak([(1, -40, 0xF), (2, 100, 0xA)]) == 60  # 0xF was made before the stage
    assert live_peak([(1, 100, 0xA), (2, 100, 0xB), (2, -100, 0xA)]) == 100
