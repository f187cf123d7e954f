"""The static-shape decode path (what a GPU captures as CUDA graphs), checked on the CPU.

Everything but the capture itself runs here: the same tokens and log-probs as the eager path for the same seed
(both modes, every grammar); a NaN-poisoned cache proves that no slot is read before it is written or zeroed;
the decode step runs on the meta device, where any read back to the host fails; and the graphs' bookkeeping
(one capture per bucket, replays that see in-place weight updates, graphs dropped when an address changes) runs
with the capture stood in for by an eager replay.
"""

from __future__ import annotations

import copy
import math
from types import SimpleNamespace

import pytest
import torch

from parathink.engine import Engine, SamplingConfig, recompute_logprobs
from parathink.engine import decode as decode_module
from parathink.engine.cache import RowCache
from parathink.engine.decode import EagerDecode, StaticDecode
from parathink.engine.runner import FastRunner, cache_shape
from parathink.testing.toy import prompt_ids

GRAMMARS = ["parallel_r1", "npr", "parathinker"]
# The fewest forks over the 18 samples that make the check a check of forks. What the toy opens depends on the CPU
# family (torch runs other kernels): npr 6 / 9 / 8 blocks with ATEN_CPU_CAPABILITY default / avx2 / avx512,
# parallel_r1 13-21, parathinker 18. Half the fewest seen, so that no CPU family sits at the edge.
MIN_FORKS = 3
MODES = ["causal", "structured"]


def _engine(model, tok, grammar, mode, **kw) -> Engine:
    return Engine(model, tok, grammar, mode, num_paths=3 if grammar == "npr" else 2, **kw)


def _generate(engine, tok, grammar, n_prompts=6, n=3, budget=90, seed=0):
    prompts = [prompt_ids(tok, grammar, i) for i in range(n_prompts)]
    return engine.generate(prompts, SamplingConfig(max_new_tokens=budget, seed=seed, batch_size=8), num_samples=n)


def _logprob_gap(a, b) -> float:
    return max(abs(x - y) for s, t in zip(a, b) for x, y in zip(s.logprobs, t.logprobs))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("grammar", GRAMMARS)
def test_static_decode_samples_what_eager_does(toy, mode, grammar):
    model, tok = toy
    eager = _generate(_engine(model, tok, grammar, mode, decode="eager"), tok, grammar)
    static = _generate(_engine(model, tok, grammar, mode, decode="static"), tok, grammar)
    if mode == "structured":
        assert sum(s.num_blocks for s in eager) >= MIN_FORKS, "the toy model should open blocks, so forks are compared"
    assert [s.response_ids for s in static] == [s.response_ids for s in eager]
    assert [(s.loss_mask, s.finish_reason) for s in static] == [(s.loss_mask, s.finish_reason) for s in eager]
    # Padded rows and windows change the summation order only.
    assert _logprob_gap(static, eager) <= 1e-5


@pytest.mark.parametrize("decode", ["eager", "static"])
@pytest.mark.parametrize("mode", MODES)
def test_no_slot_is_read_before_it_is_written_or_zeroed(toy, monkeypatch, decode, mode):
    """The cache is left uninitialised. Filled with NaN, it must give exactly the clean run's samples; the
    control shows the poison does reach masked reads when ``expose`` does not zero them."""
    model, tok = toy
    engine = _engine(model, tok, "parallel_r1", mode, decode=decode)
    clean = _generate(engine, tok, "parallel_r1")
    monkeypatch.setattr(RowCache, "fill", float("nan"))
    poisoned = _generate(engine, tok, "parallel_r1")
    assert [(s.response_ids, s.logprobs) for s in poisoned] == [(s.response_ids, s.logprobs) for s in clean]
    monkeypatch.setattr(RowCache, "expose", lambda self, n, s, b=None: None)
    broken = _generate(engine, tok, "parallel_r1")
    assert any(math.isnan(x) for s in broken for x in s.logprobs)


@pytest.mark.parametrize("fold", [True, False])
def test_decode_step_reads_nothing_back_from_the_device(toy, fold):
    """On the meta device a tensor has shapes but no values, so any read back to the host (``.item()``,
    ``int()``, ``.tolist()``) raises: a static step that runs there has no host sync (what lets CUDA capture it)."""
    model, _ = toy
    with pytest.raises(RuntimeError):
        int(torch.zeros((), dtype=torch.long, device="meta"))  # the control: a read back fails on meta
    runner = FastRunner(copy.deepcopy(model).to("meta"), fold=fold)
    layers, kv_heads, head_dim = cache_shape(model)
    cache = RowCache(layers, 8, kv_heads, 96, head_dim, torch.float32, torch.device("meta"))
    cache.prefilled(0, [5, 9, 7], 9)
    runner.prepare(96)
    step = StaticDecode(runner, graphs=False)
    step.bind(cache)
    logits = step(([3, 4, 5], [5, 9, 7], [0, 1, 2]), 3)
    assert logits.shape == (3, model.config.vocab_size) and logits.device.type == "meta"


@pytest.mark.parametrize("mode", MODES)
def test_unfolded_weights_match_training_forward(toy, mode):
    """Above FOLD_MAX_PARAMS (Qwen3-4B) the fast runner reads the model's own weights, norms applied as they
    are: the same 1e-4 bound, on the static path too."""
    model, tok = toy
    engine = _engine(model, tok, "parallel_r1", mode, decode="static")
    engine.runner = FastRunner(model, fold=False)
    samples = _generate(engine, tok, "parallel_r1")
    with torch.no_grad():
        logp, _ = recompute_logprobs(model, engine, samples)
    assert max((logp[i, :len(s.logprobs)] - torch.tensor(s.logprobs)).abs().max().item()
               for i, s in enumerate(samples)) <= 1e-4


def _fake_capture(keys: list):
    """``decode.capture`` without CUDA: the 'graph' replays the step eagerly into the buffer it returned."""

    def capture(step, pool):
        out = step()
        keys.append(out.shape)
        return SimpleNamespace(replay=lambda: out.copy_(step()), pool=lambda: "pool"), out

    return capture


def test_one_capture_per_bucket_and_the_same_samples(toy, monkeypatch):
    model, tok = toy
    captured: list = []
    monkeypatch.setattr(decode_module, "capture", _fake_capture(captured))
    engine = _engine(model, tok, "parallel_r1", "structured", decode="static")
    plain = _generate(engine, tok, "parallel_r1")
    graphs = StaticDecode(engine.runner, graphs=True)
    monkeypatch.setattr(engine, "decoder", lambda device: graphs)
    replayed = _generate(engine, tok, "parallel_r1")
    assert [(s.response_ids, s.logprobs) for s in replayed] == [(s.response_ids, s.logprobs) for s in plain]
    assert len(captured) == len(graphs.captured) > 1  # several buckets, each captured once


@pytest.mark.parametrize("fold", [True, False])
def test_graphs_replay_updated_weights_or_are_dropped(toy, monkeypatch, fold):
    """RL updates the weights in place between calls, and the graphs stay and replay the new weights (folded
    copies are refreshed in place). A weight whose storage was replaced changes an address the graphs read when
    the runner reads weights in place: then they are dropped."""
    model, tok = toy
    model = copy.deepcopy(model)
    monkeypatch.setattr(decode_module, "capture", _fake_capture([]))
    runner = FastRunner(model, fold=fold)
    layers, kv_heads, head_dim = cache_shape(model)
    cache = RowCache(layers, 4, kv_heads, 96, head_dim, torch.float32, torch.device("cpu"))
    runner.prepare(96)
    prompt = torch.tensor([prompt_ids(tok, "parallel_r1", 1)] * 2)
    positions = torch.arange(prompt.shape[1]).expand_as(prompt)
    runner.prefill(prompt, positions, 0, cache, torch.zeros_like(prompt), torch.full((2,), prompt.shape[1] - 1))
    cache.prefilled(0, [prompt.shape[1]] * 2, prompt.shape[1])
    feed = ([5, 6], [prompt.shape[1]] * 2, [0, 0])
    graphs = StaticDecode(runner, graphs=True)
    graphs.bind(cache)
    before = graphs(feed, 2)
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(1.05)  # an optimiser step: in place
    runner.sync()
    graphs.bind(cache)
    assert graphs.captured, "nothing moved: the graphs are kept"
    after = graphs(feed, 2)
    eager = EagerDecode(runner)
    eager.bind(cache)
    assert (after - eager(feed, 2)).abs().max() <= 1e-5 < (after - before).abs().max()
    mlp = model.model.layers[0].mlp
    mlp.down_proj.weight = torch.nn.Parameter(mlp.down_proj.weight.detach().clone())  # a new storage
    runner.sync()
    graphs.bind(cache)
    assert bool(graphs.captured) == fold  # folded: the copy's address is unchanged


def test_decode_choice_and_bad_input(toy):
    model, tok = toy
    assert isinstance(Engine(model, tok).decoder(torch.device("cpu")), EagerDecode)  # auto: eager on a CPU
    static = Engine(model, tok, decode="static")
    decoder = static.decoder(torch.device("cpu"))
    assert isinstance(decoder, StaticDecode) and not decoder.graphs  # graphs are CUDA only
    assert static.decoder(torch.device("cpu")) is decoder
    static.release()
    assert static.decoder(torch.device("cpu")) is not decoder
    with pytest.raises(ValueError, match="decode must be one of"):
        Engine(model, tok, decode="graphs")
    with pytest.raises(ValueError, match="needs the fast runner"):
        Engine(model, tok, decode="static", backend="hf")
