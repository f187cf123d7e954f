"""A KV budget (``Engine(kv_cache_bytes=...)``, issue 42 item 1): paged blocks, continuous admission, preemption and
recompute change what runs when, never what is sampled. Budgets here sit just above the smallest the engine
takes, so that sequences are preempted (asserted), in the middle of blocks too.

EOS is not banned: where the toy model is sure to stop, a ban leaves the draw to a sliver of probability
renormalised a millionfold, where the ~1e-6 by which a recomputed row's logits differ from its decoded ones
could pick another token (``sampling``)."""

from __future__ import annotations

import pytest
import torch

from parathink.engine import Engine, SamplingConfig, kv_bytes_per_token, min_kv_cache_bytes, recompute_logprobs
from parathink.engine.kv_budget import BLOCK_TOKENS, dtype_bytes, model_kv_bytes_per_token
from parathink.engine.paged import PagedCache
from parathink.errors import ConfigError
from parathink.testing.toy import prompt_ids

NEW = 90
CASES = [("parallel_r1", "causal"), ("parallel_r1", "structured"), ("npr", "structured"),
         ("parathinker", "structured")]


def _paths(grammar: str) -> int:
    return 3 if grammar == "npr" else 2


def _run(toy, grammar, mode, budget=None, seed=0, n_prompts=6, batch_size=8, backend="auto", **kw):
    model, tok = toy
    engine = Engine(model, tok, grammar, mode, num_paths=_paths(grammar), kv_cache_bytes=budget, backend=backend)
    sampling = SamplingConfig(max_new_tokens=NEW, seed=seed, batch_size=batch_size, **kw)
    samples = engine.generate([prompt_ids(tok, grammar, i) for i in range(n_prompts)], sampling, num_samples=3)
    return engine, samples


def _tight(toy, grammar, mode, margin=1.15) -> int:
    """A budget a little above the smallest one the engine takes for these prompts."""
    model, tok = toy
    longest = max(len(prompt_ids(tok, grammar, i)) for i in range(6))
    per_token = model_kv_bytes_per_token(model.config, "float32")
    return int(margin * min_kv_cache_bytes(longest + NEW + 1, per_token, _paths(grammar), mode == "structured"))


def _max_diff(model, engine, samples) -> float:
    with torch.no_grad():
        logp, _ = recompute_logprobs(model, engine, samples)
    return max((logp[i, :len(s.logprobs)] - torch.tensor(s.logprobs)).abs().max().item() for i, s in enumerate(samples))


@pytest.mark.parametrize("grammar,mode", CASES)
def test_tight_budget_preempts_and_samples_the_same_tokens(toy, grammar, mode):
    free, want = _run(toy, grammar, mode)
    budget = _tight(toy, grammar, mode)
    tight, got = _run(toy, grammar, mode, budget)
    stats = tight.stats
    assert stats["paged"] and not free.stats["paged"] and free.stats["preemptions"] == 0
    assert stats["preemptions"] > 0 and stats["recomputed_tokens"] > 0
    assert [s.response_ids for s in got] == [s.response_ids for s in want]
    assert [s.finish_reason for s in got] == [s.finish_reason for s in want]
    assert [s.num_blocks for s in got] == [s.num_blocks for s in want]
    assert stats["peak_kv_bytes"] <= stats["kv_cache_bytes"] <= budget < free.stats["kv_cache_bytes"] / 2
    assert max(abs(a - b) for x, y in zip(got, want) for a, b in zip(x.logprobs, y.logprobs)) <= 1e-4
    assert _max_diff(toy[0], tight, got) <= 1e-4  # what training recomputes, after recomputes
    if mode == "structured":
        assert sum(s.num_blocks for s in want) > 0
    if grammar == "parallel_r1" and mode == "structured":
        assert stats["preempted_in_block"] > 0, "a sequence preempted with its paths open is recomputed"


@pytest.mark.parametrize("backend,penalty", [("hf", 1.0), ("fast", 1.02)])
def test_recompute_with_path_penalty_and_the_hf_backend(toy, backend, penalty):
    """NPR's in-path repetition penalty (its context is rebuilt with the rows) and the transformers forward."""
    grammar = "npr" if penalty != 1.0 else "parallel_r1"
    _, want = _run(toy, grammar, "structured", backend=backend, repetition_penalty_in_paths=penalty)
    tight, got = _run(toy, grammar, "structured", _tight(toy, grammar, "structured"), backend=backend,
                      repetition_penalty_in_paths=penalty)
    assert tight.stats["preemptions"] > 0
    assert [s.response_ids for s in got] == [s.response_ids for s in want]


def test_tokens_do_not_depend_on_what_shares_the_batch(toy):
    """Counter-based sampling: one row at a time draws what rows decoded eight at a time draw."""
    _, batched = _run(toy, "parallel_r1", "structured", n_prompts=4, batch_size=8)
    _, narrow = _run(toy, "parallel_r1", "structured", n_prompts=4, batch_size=1)
    _, other_seed = _run(toy, "parallel_r1", "structured", n_prompts=4, batch_size=8, seed=1)
    assert [s.response_ids for s in narrow] == [s.response_ids for s in batched]
    assert [s.response_ids for s in other_seed] != [s.response_ids for s in batched]


def test_a_budget_for_the_worst_case_keeps_the_contiguous_cache(toy):
    free, want = _run(toy, "parallel_r1", "structured")
    roomy, got = _run(toy, "parallel_r1", "structured", free.stats["kv_cache_bytes"])
    assert not roomy.stats["paged"] and roomy.stats["kv_cache_bytes"] == free.stats["kv_cache_bytes"]
    assert [(s.response_ids, s.logprobs) for s in got] == [(s.response_ids, s.logprobs) for s in want]


@pytest.mark.parametrize("budget", [None, "tight"])
def test_batch_size_caps_the_rows_in_flight(toy, budget):
    budget = _tight(toy, "parallel_r1", "causal", margin=3) if budget else None
    engine, samples = _run(toy, "parallel_r1", "causal", budget, batch_size=3)
    assert len(samples) == 18 and engine.stats["max_rows_in_flight"] == 3


@pytest.mark.parametrize("layout", ["contiguous", "paged"])
def test_batch_size_caps_the_streams_so_forks_fill_the_rows_allocated_for_them(toy, layout):
    # ParaThinker forks every stream at once: batch_size streams of 2 paths are 2 x batch_size rows (what the
    # cache holds), not batch_size rows (a bench at 64 rows of 4 paths once ran 16 at a time, 4x the steps).
    model, tok = toy
    engine = Engine(model, tok, "parathinker", "structured", num_paths=2, kv_layout=layout)
    sampling = SamplingConfig(max_new_tokens=NEW, seed=0, batch_size=3)
    samples = engine.generate([prompt_ids(tok, "parathinker", i) for i in range(6)], sampling, num_samples=3)
    assert len(samples) == 18 and engine.stats["max_rows_in_flight"] == 6


@pytest.mark.parametrize("mode", ["causal", "structured"])
def test_a_budget_too_small_for_one_row_is_one_line(toy, mode):
    smallest = _tight(toy, "parallel_r1", mode, margin=1.0)
    block_bytes = BLOCK_TOKENS * model_kv_bytes_per_token(toy[0].config, "float32")
    with pytest.raises(ConfigError) as err:
        _run(toy, "parallel_r1", mode, smallest - block_bytes)
    message = str(err.value)
    assert "\n" not in message and "kv_cache_bytes=" in message and "a row of" in message
    assert f"{smallest:,}" in message  # the budget that would do
    engine, _ = _run(toy, "parallel_r1", mode, smallest, n_prompts=1)
    assert engine.stats["paged"]
    with pytest.raises(ConfigError, match="kv_cache_bytes must be >= 1"):
        Engine(*toy, kv_cache_bytes=0)


def test_kv_bytes_per_token_from_a_config():
    assert kv_bytes_per_token(36, 8, 128, "bfloat16") == 147_456  # Qwen3-4B
    assert kv_bytes_per_token(36, 8, 128, "torch.float32") == 2 * 147_456 == kv_bytes_per_token(36, 8, 128, 4)
    qwen3_4b = {"num_hidden_layers": 36, "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
                "hidden_size": 2560}
    assert model_kv_bytes_per_token(qwen3_4b, "bf16") == 147_456
    assert model_kv_bytes_per_token({"num_hidden_layers": 2, "num_attention_heads": 4, "hidden_size": 64},
                                    "fp16") == 2 * 4 * 16 * 2 * 2  # no GQA, head_dim from the width
    assert 512 * 5_000 * 147_456 / 2 ** 30 == pytest.approx(351.6, abs=0.1)  # the up-front cache, GiB
    with pytest.raises(ValueError, match="unknown dtype"):
        dtype_bytes("int4")
    with pytest.raises(ValueError, match="kv_heads"):
        kv_bytes_per_token(36, 0, 128, "bf16")


def _paged(blocks=12) -> PagedCache:
    return PagedCache(layers=2, rows=4, kv_heads=1, max_len=80, head_dim=3, dtype=torch.float32,
                      device=torch.device("cpu"), blocks=blocks)


def _fill(cache: PagedCache, row: int, values: list[float]) -> None:
    cache.begin_prefill(row, [len(values)], len(values))
    k = torch.tensor(values)[None, None, :, None].expand(1, 1, len(values), 3)
    for layer in range(2):
        cache.write_prefill(layer, row, k, k)
    cache.prefilled(row, [len(values)], len(values))


def _entries(cache: PagedCache, row: int) -> list[float]:
    """Layer 0's first key component of each of the row's entries, read through its blocks."""
    slots = [b * BLOCK_TOKENS + e % BLOCK_TOKENS for e in range(cache.lens[row])
             for b in [cache.blocks[row][e // BLOCK_TOKENS]]]
    return cache.kv[0, 0, slots, 0].tolist()


def test_paged_cache_forks_parks_and_merges_by_block():
    cache = _paged()
    _fill(cache, 0, [float(i) for i in range(20)])  # 20 entries: 2 blocks
    assert cache.used == 2 and cache.lens[0] == 20
    cache.copy_rows([0], [1])  # a fork shares the full block and copies the partly filled one
    assert cache.used == 3 and cache.references == 4 and _entries(cache, 1) == [float(i) for i in range(20)]
    assert cache.blocks[1][0] == cache.blocks[0][0] and cache.blocks[1][1] != cache.blocks[0][1]
    parked = cache.take(1, 18)  # park past a prefix of 18: the first block (shared) is released, the second stays
    assert (parked.start, parked.n, cache.used) == (2, 2, 3) and cache.references == 3
    cache.append(0, parked)  # merge: row 0 holds its 20 entries, then 18 and 19 again
    assert _entries(cache, 0) == [float(i) for i in range(20)] + [18.0, 19.0] and cache.used == 2
    cache.copy_spans(0, [(0, 3), (20, 22)], 2)
    assert _entries(cache, 2) == [0.0, 1.0, 2.0, 18.0, 19.0]
    extracted = cache.extract(0, 5, 8)
    cache.truncate(0, 4)
    assert cache.lens[0] == 4 and cache.used == 3
    cache.drop(extracted)
    cache.free_rows([0, 2])
    assert cache.used == 0 and len(cache.free) == cache.usable == 11
    with pytest.raises(RuntimeError, match="no free block"):
        _fill(cache, 3, [0.0] * 80)  # 5 blocks of 11 fit, and 5 more, but not 12 in all
        _fill(cache, 0, [0.0] * 80)
        _fill(cache, 1, [0.0] * 20)
