"""The paged KV cache forced (``Engine(kv_layout="paged")``, issue 49): it decodes what the contiguous cache decodes,
token for token at a seed (fp32), with forks that share their prefix's blocks and under preemption; a shared block
is never written; every block's reference count is back to zero and the pool whole after a call; a 4-path block
holds its prefix once.

What is asserted is arithmetic (both layouts run the same model over the same entries), so it holds for whatever the
models write: a random tiny Qwen3 for causal decoding, the toy (a trained tiny Qwen3 that opens blocks) for forks."""

from __future__ import annotations

import pytest
import torch

from parathink.engine import Engine, SamplingConfig
from parathink.engine.kv_budget import BLOCK_TOKENS, blocks_for, min_kv_cache_bytes, model_kv_bytes_per_token
from parathink.engine.paged import PagedCache
from parathink.errors import ConfigError
from parathink.testing.toy import prompt_ids

NEW = 70


@pytest.fixture(scope="module")
def random_qwen3(toy):
    """A random (untrained) one-layer Qwen3 over the toy's tokenizer."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    tok = toy[1]
    torch.manual_seed(1)
    cfg = Qwen3Config(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                      num_attention_heads=2, num_key_value_heads=1, head_dim=16, tie_word_embeddings=True,
                      max_position_embeddings=512, pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id)
    cfg._attn_implementation = "sdpa"
    return Qwen3ForCausalLM(cfg).eval(), tok


@pytest.fixture
def watched(monkeypatch):
    """Every PagedCache a call makes, each write checked: no decode step, prefill or copy writes a block that more
    than one row (or parked path) references. ``shared``: blocks handed to a second holder."""
    made: list[PagedCache] = []
    shared = [0]
    init, share, write_step, write_prefill, copy = (PagedCache.__init__, PagedCache._share, PagedCache.write_step,
                                                    PagedCache.write_prefill, PagedCache._copy)

    def check(cache, slots):
        blocks = {int(s) // BLOCK_TOKENS for s in torch.as_tensor(slots).flatten().tolist()} - {0}
        written_shared = [b for b in blocks if cache.refs[b] > 1]
        assert not written_shared, f"shared blocks {written_shared} written"

    def _init(self, *a, **kw):
        init(self, *a, **kw)
        made.append(self)

    def _share(self, row, blocks):
        shared[0] += len(blocks)
        share(self, row, blocks)

    def _write_step(self, layer, index, kv):
        check(self, index)
        write_step(self, layer, index, kv)

    def _write_prefill(self, layer, row0, k, v):
        check(self, self.prefill_slots)
        write_prefill(self, layer, row0, k, v)

    def _copy(self, src, dst):
        check(self, dst)
        copy(self, src, dst)

    for name, fn in (("__init__", _init), ("_share", _share), ("write_step", _write_step),
                     ("write_prefill", _write_prefill), ("_copy", _copy)):
        monkeypatch.setattr(PagedCache, name, fn)
    return made, shared


def _generate(model, tok, grammar, mode, layout, budget=None, n_prompts=6, decode="auto"):
    engine = Engine(model, tok, grammar, mode, num_paths=3 if grammar == "npr" else 2, kv_layout=layout,
                    kv_cache_bytes=budget, decode=decode)
    sampling = SamplingConfig(max_new_tokens=NEW, seed=3, batch_size=8)
    return engine, engine.generate([prompt_ids(tok, grammar, i) for i in range(n_prompts)], sampling, num_samples=3)


def _whole(cache: PagedCache) -> None:
    assert all(r == 0 for r in cache.refs), "a block is still referenced after the call"
    assert sorted(cache.free) == list(range(1, cache.usable + 1)) and cache.used == 0


def _same(got, want) -> None:
    assert [s.response_ids for s in got] == [s.response_ids for s in want]
    for g, w in zip(got, want):
        assert torch.allclose(torch.tensor(g.logprobs), torch.tensor(w.logprobs), atol=1e-5)


def test_paged_decode_equals_contiguous_causal(random_qwen3, watched):
    made, _ = watched
    contiguous, want = _generate(*random_qwen3, "parallel_r1", "causal", "contiguous")
    paged, got = _generate(*random_qwen3, "parallel_r1", "causal", "paged")
    assert paged.stats["paged"] and not contiguous.stats["paged"] and paged.stats["preemptions"] == 0
    _same(got, want)
    assert len(made) == 1
    _whole(made[0])


@pytest.mark.parametrize("grammar", ["parallel_r1", "npr"])
def test_paged_forks_share_blocks_and_decode_what_contiguous_does(toy, watched, grammar):
    made, shared = watched
    _, want = _generate(*toy, grammar, "structured", "contiguous")
    paged, got = _generate(*toy, grammar, "structured", "paged")
    assert sum(s.num_blocks for s in got) > 0 and shared[0] > 0  # forks happened, and shared their prefixes
    assert paged.stats["preemptions"] == 0
    _same(got, want)
    _whole(made[0])


def test_paged_under_preemption_with_shared_blocks(toy, watched):
    made, shared = watched
    model, tok = toy
    longest = max(len(prompt_ids(tok, "parallel_r1", i)) for i in range(6))
    budget = int(1.15 * min_kv_cache_bytes(longest + NEW + 1, model_kv_bytes_per_token(model.config, "float32"),
                                           2, True))
    _, want = _generate(*toy, "parallel_r1", "structured", "contiguous")
    tight, got = _generate(*toy, "parallel_r1", "structured", "paged", budget)
    assert tight.stats["preemptions"] > 0 and shared[0] > 0
    _same(got, want)
    _whole(made[0])


@pytest.mark.parametrize("budget", [None, "tight"])
def test_static_paged_decode_equals_contiguous(toy, watched, monkeypatch, budget):
    """The paged step at fixed shapes (what a GPU captures as CUDA graphs: rows and window in buckets, the block
    table in one device buffer, padding rows pointed at the sink): here it runs without capture, and samples what the
    eager contiguous decode samples, forks and preemptions included."""
    from parathink.engine.decode import StaticDecode

    made, shared = watched
    windows = set()
    call = StaticDecode.__call__

    def _call(self, feed, n):
        out = call(self, feed, n)
        windows.add((self.cache.step_blocks, type(self.cache).__name__))
        return out

    monkeypatch.setattr(StaticDecode, "__call__", _call)
    model, tok = toy
    if budget == "tight":
        longest = max(len(prompt_ids(tok, "parallel_r1", i)) for i in range(6))
        budget = int(1.15 * min_kv_cache_bytes(longest + NEW + 1, model_kv_bytes_per_token(model.config, "float32"),
                                               2, True))
    _, want = _generate(*toy, "parallel_r1", "structured", "contiguous")
    static, got = _generate(*toy, "parallel_r1", "structured", "paged", budget, decode="static")
    assert static.stats["paged"] and shared[0] > 0 and windows and all(k == "PagedCache" for _, k in windows)
    assert (static.stats["preemptions"] > 0) == (budget is not None)
    _same(got, want)
    _whole(made[0])


def test_four_paths_hold_their_prefix_once():
    """A prefix of 100 entries forked into 4 paths of 40 each: the blocks held are the prefix's once, the paths',
    and at most one more per path (its copy of the prefix's partly filled block)."""
    cache = PagedCache(layers=1, rows=4, kv_heads=1, max_len=260, head_dim=2, dtype=torch.float32,
                       device=torch.device("cpu"), blocks=40)
    cache.begin_prefill(0, [100], 100)
    cache.write_prefill(0, 0, torch.ones(1, 1, 100, 2), torch.ones(1, 1, 100, 2))
    cache.prefilled(0, [100], 100)
    cache.copy_rows([0, 0, 0], [1, 2, 3])
    for _ in range(40):
        cache.expose(4, max(cache.lens[:4]) + 1)
        cache.advance(4)
    prefix, paths = blocks_for(100), 4 * blocks_for(40)
    assert cache.peak <= prefix + paths + 4
    assert cache.peak < 4 * blocks_for(140)  # what copying the prefix held
    parked = [cache.take(r, 100) for r in (1, 2, 3)]  # three paths close; the merge appends them to row 0
    for p in parked:
        cache.append(0, p)
    assert cache.lens[0] == 100 + 4 * 40 and cache.peak <= prefix + paths + 4
    cache.free_rows([0, 1, 2, 3])
    _whole(cache)


def test_kv_layout_switch():
    with pytest.raises(ConfigError, match="kv_layout must be one of"):
        Engine(None, None, kv_layout="flat")


def test_contiguous_refuses_a_budget_below_the_worst_case(random_qwen3):
    with pytest.raises(ConfigError, match="kv_layout='contiguous'"):
        _generate(*random_qwen3, "parallel_r1", "causal", "contiguous", budget=10_000)
