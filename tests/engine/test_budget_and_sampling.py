"""Budget, forced closers, prefix sharing, sampling options and bad input."""

from __future__ import annotations

import pytest
import torch
from scripted_lm import ScriptedLM, Trace

from parathink.engine import Engine, SamplingConfig, recompute_logprobs
from parathink.engine.sampling import UNIFORM_BITS, draw, stream_key, uniform_bits
from parathink.formats import parse
from parathink.formats.layouts import TagIds
from parathink.testing.toy import prompt_ids

NEG = float("-inf")


def _prompts(tok, grammar, n):
    return [prompt_ids(tok, grammar, i) for i in range(n)]


@pytest.mark.parametrize("grammar", ["parallel_r1", "npr", "parathinker"])
@pytest.mark.parametrize("budget", [9, 14, 24])
def test_budget_counts_every_branch_and_closes_open_tags(toy, grammar, budget):
    model, tok = toy
    engine = Engine(model, tok, grammar, "structured", num_paths=3 if grammar == "npr" else 2)
    samples = engine.generate(_prompts(tok, grammar, 6), SamplingConfig(max_new_tokens=budget, seed=3), num_samples=3)
    path_open = engine.tags.path_open
    for s in samples:
        assert len(s.response_ids) == len(s.logprobs) == len(s.loss_mask) <= budget
        if s.loss_mask[-1] == 0 and s.finish_reason == "length":  # cut inside a block or summary
            assert s.response_ids[-1] == engine.g.summary_close
        if grammar == "parallel_r1" and s.num_blocks and s.finish_reason == "length":
            # Every tag the engine opened is closed (stray tags the model wrote inside a path may remain).
            assert "unclosed_tag" not in parse(s.text, grammar=grammar).errors, s.text
        # Each path of each block starts with the engine's opening tag.
        forced_opens = sum(1 for t, m in zip(s.response_ids, s.loss_mask) if t in path_open and m == 0)
        assert forced_opens >= (2 if grammar != "npr" else 1) * s.num_blocks
    with torch.no_grad():
        logp, _ = recompute_logprobs(model, engine, samples)
    assert max((logp[i, :len(s.logprobs)] - torch.tensor(s.logprobs)).abs().max().item()
               for i, s in enumerate(samples)) <= 1e-4


def test_forced_budget_closers_are_masked(toy):
    """A budget that ends inside the paths: the engine writes </Path>, </Parallel>, <Summary>, </Summary>."""
    model, tok = toy
    engine = Engine(model, tok, "parathinker", "structured", num_paths=2)
    closers = [tok.convert_tokens_to_ids(f"</think{i}>") for i in (1, 2)]
    sampling = SamplingConfig(max_new_tokens=20, seed=0, logit_bias={c: float("-inf") for c in closers})
    for s in engine.generate(_prompts(tok, "parathinker", 3), sampling):
        assert s.finish_reason == "length" and len(s.response_ids) == 20 and s.num_blocks == 1
        tail = tok.convert_ids_to_tokens(s.response_ids[-2:])
        assert tail == ["<summary>", "</summary>"] and s.loss_mask[-2:] == [0, 0]
        assert sum(1 - m for m in s.loss_mask) == 6  # 2 openers, 2 closers, <summary>, </summary>


def test_fork_refused_without_budget(toy):
    """No fork when the block could not be closed (or with less than min_fork_budget left)."""
    model, tok = toy
    engine = Engine(model, tok, "parallel_r1", "structured", min_fork_budget=10_000)
    samples = engine.generate(_prompts(tok, "parallel_r1", 4), SamplingConfig(max_new_tokens=60, seed=0), 2)
    opener = engine.tags.ids["<Parallel>"]
    assert all(s.num_blocks == 0 and opener not in s.response_ids for s in samples)


def test_prefix_is_shared_not_recomputed(toy, one_block):
    """Tokens through the model: each distinct prompt once, each response token at most once (a scripted model that
    forks once per sample, so the paths' shared prefix is what is counted)."""
    _, tok = toy
    prompts = _prompts(tok, "parallel_r1", 4)
    trace = one_block
    model = ScriptedLM.writing(tok, [(p, trace.ids) for p in prompts], TagIds.from_tokenizer(tok, "parallel_r1"))
    engine = Engine(model, tok, "parallel_r1", "structured")
    fed = []
    decode, prefill = engine.runner.decode, engine.runner.prefill

    def counting_decode(tokens, *a, **k):
        fed.append(tokens.numel())
        return decode(tokens, *a, **k)

    def counting_prefill(tokens, positions, row0, cache, path_ids, last):
        fed.append(int((positions <= last[:, None]).sum()))  # each prompt's own tokens, not its padding
        return prefill(tokens, positions, row0, cache, path_ids, last)

    engine.runner.decode, engine.runner.prefill = counting_decode, counting_prefill
    samples = engine.generate(prompts, SamplingConfig(max_new_tokens=80, seed=1, batch_size=64), num_samples=4)
    assert all(s.response_ids == trace.ids and s.num_blocks == 1 for s in samples)
    # Every response token but the last (EOS, which nothing reads) is fed once.
    assert sum(fed) == sum(len(p) for p in prompts) + sum(len(s.response_ids) - 1 for s in samples)


def test_seed_reproduces_and_greedy_is_top_p_limit(toy):
    model, tok = toy
    engine = Engine(model, tok, "parallel_r1", "structured")
    prompts = _prompts(tok, "parallel_r1", 3)
    a, b, c = (engine.generate(prompts, SamplingConfig(max_new_tokens=50, seed=seed), 2) for seed in (7, 7, 8))
    assert [s.response_ids for s in a] == [s.response_ids for s in b] != [s.response_ids for s in c]
    g = engine.generate(prompts, SamplingConfig(max_new_tokens=50, temperature=0), 1)
    p = engine.generate(prompts, SamplingConfig(max_new_tokens=50, top_p=1e-6, seed=1), 1)
    assert [s.response_ids for s in g] == [s.response_ids for s in p]


def test_repetition_penalty_inside_paths_keeps_raw_logprobs(toy):
    model, tok = toy
    engine = Engine(model, tok, "npr", "structured", num_paths=3)
    samples = engine.generate(_prompts(tok, "npr", 4),
                              SamplingConfig(max_new_tokens=80, seed=0, repetition_penalty_in_paths=1.02), 2)
    with torch.no_grad():
        logp, _ = recompute_logprobs(model, engine, samples)
    assert max((logp[i, :len(s.logprobs)] - torch.tensor(s.logprobs)).abs().max().item()
               for i, s in enumerate(samples)) <= 1e-4


def test_texts_and_flat_prompt(toy):
    """generate_texts gives num_samples texts per prompt; a flat list of ids is one prompt; a response that stops
    ends with EOS in its ids, not in its text (a scripted model, so that every response stops)."""
    _, tok = toy
    prompts = _prompts(tok, "parallel_r1", 2)
    body = Trace(tok).model(" so 5 answer 5")
    model = ScriptedLM.writing(tok, [(p, body.ids + [tok.eos_token_id]) for p in prompts])
    engine = Engine(model, tok, "parallel_r1", "causal")
    texts = engine.generate_texts(["P question 0:", "P question 1:"], SamplingConfig(max_new_tokens=30, seed=0), 3)
    assert texts == [[tok.decode(body.ids)] * 3] * 2
    one = engine.generate(prompts[1], SamplingConfig(max_new_tokens=10, seed=0), 2)
    assert len(one) == 2 and all(s.prompt_ids == prompts[1] for s in one)
    for s in one:
        assert s.finish_reason == "stop" and s.response_ids == body.ids + [tok.eos_token_id]
        assert tok.eos_token not in s.text


def test_bad_input_is_refused_before_sampling(toy):
    model, tok = toy
    with pytest.raises(ValueError, match="mode"):
        Engine(model, tok, "parallel_r1", "forked")
    with pytest.raises(ValueError, match="num_paths"):
        Engine(model, tok, "parallel_r1", "structured", num_paths=0)
    with pytest.raises(ValueError, match="at most 16"):
        Engine(model, tok, "parathinker", "structured", num_paths=17)
    engine = Engine(model, tok, "parallel_r1", "structured")
    with pytest.raises(ValueError, match="prompt 1 is empty"):
        engine.generate([[5, 6], []], SamplingConfig(max_new_tokens=4))
    with pytest.raises(ValueError, match="max_position_embeddings"):
        engine.generate([[5, 6]], SamplingConfig(max_new_tokens=5000))
    with pytest.raises(ValueError, match="logit_bias"):
        engine.generate([[5, 6]], SamplingConfig(max_new_tokens=4, logit_bias={10**6: -1.0}))
    for bad in (dict(temperature=-1), dict(top_p=0), dict(max_new_tokens=0), dict(batch_size=0),
                dict(repetition_penalty_in_paths=0)):
        with pytest.raises(ValueError, match=next(iter(bad))):
            SamplingConfig(**bad)


def test_draw_never_takes_a_token_of_probability_zero_even_at_the_extreme_uniforms():
    """The smallest and the largest uniform ``bits`` can give land on the first and the last token that has any
    probability, wherever the banned (-inf) tokens sit: at both ends of the vocabulary and between."""
    logits = torch.tensor([[NEG, NEG, 0.3, NEG, 1.2, -0.5, NEG, NEG]] * 2)
    bits = torch.tensor([0, 2**UNIFORM_BITS - 1])
    assert draw(logits, 1.0, 1.0, bits).tolist() == [2, 5]
    assert draw(logits, 0.7, 1.0, bits).tolist() == [2, 5]
    # top-p keeps tokens 4 and 2 (p 0.63 + 0.26 reaches 0.75): the largest uniform takes the last kept one, not 5
    assert draw(logits, 1.0, 0.75, bits).tolist() == [2, 4]


def test_draw_follows_the_distribution():
    """Counter-hash uniforms through the inverse CDF: over 20,000 draws each token's frequency is its probability
    to within 0.015 (a few standard deviations), and a banned token is never drawn."""
    logits = torch.tensor([[2.0, 1.0, NEG, 0.0, -1.0]])
    p = logits.softmax(-1)[0].tolist()
    key = stream_key(7, 0)
    n = 20_000
    bits = torch.tensor([uniform_bits(key, i) for i in range(n)])
    drawn = draw(logits.expand(n, -1), 1.0, 1.0, bits)
    freq = torch.bincount(drawn, minlength=5).double() / n
    assert freq[2] == 0
    assert (freq - torch.tensor(p, dtype=torch.float64)).abs().max() < 0.015, (freq.tolist(), p)


@pytest.mark.parametrize("mode, kv_cache_bytes", [("structured", None), ("causal", 65_536)])
def test_prefill_in_groups_samples_what_one_prefill_does(toy, monkeypatch, mode, kv_cache_bytes):
    """An admission larger than PREFILL_TOKENS is prefilled in groups (memory_model.prefill_workspace counts one):
    the same tokens and log-probs as one prefill of all the prompts, contiguous or paged cache."""
    from parathink.engine import core

    model, tok = toy
    prompts = _prompts(tok, "parallel_r1", 5)
    engine = Engine(model, tok, "parallel_r1", mode, kv_cache_bytes=kv_cache_bytes)
    whole = engine.generate(prompts, SamplingConfig(max_new_tokens=40, seed=3), 2)
    monkeypatch.setattr(core, "PREFILL_TOKENS", 1)  # one prompt per group
    grouped = engine.generate(prompts, SamplingConfig(max_new_tokens=40, seed=3), 2)
    assert [s.response_ids for s in grouped] == [s.response_ids for s in whole]
    assert max(abs(a - b) for x, y in zip(grouped, whole) for a, b in zip(x.logprobs, y.logprobs)) <= 1e-5
