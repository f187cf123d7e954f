"""NPR and ParaThinker under the engine at 2, 4 and 8 paths: the engine forks one branch per NPR plan (at most
``num_paths``), gives ParaThinker N thoughts at N paths, each closed by its own tag, and the log-probs it reports are
the training forward's (structured layout, fp32, <= 1e-4), ParaThinker's per-path key/value vectors included.

The fork tests run a scripted model (tests/scripted_lm.py): what it writes is fixed by construction, so a test sees
the same plans and steps on every CPU, and the sample must be the scripted trace token for token, forced tags and
loss mask included. A toy trained for these tests learned its plan counts on one CPU family and not on another (torch
runs other kernels on AVX-512, AVX2 and its default build). The path-vector test runs a real Qwen3 with random
weights: what it asserts holds for whatever that model writes.
"""

from __future__ import annotations

import pytest
import torch
from scripted_lm import MARGIN, ScriptedLM, Trace

from parathink.engine import Engine, SamplingConfig, recompute_logprobs
from parathink.engine.grammar import fork_grammar
from parathink.formats.layouts import TagIds
from parathink.modeling import install_path_vectors

TOL = 1e-4
BUDGET = 320


def _max_diff(model, engine, samples) -> float:
    with torch.no_grad():
        logp, _ = recompute_logprobs(model, engine, samples)
    return max((logp[i, :len(s.logprobs)] - torch.tensor(s.logprobs)).abs().max().item() for i, s in enumerate(samples))


def _forced(sample, token: int) -> int:
    """How many times the engine (not the model) wrote ``token`` into ``sample``."""
    return sum(1 for t, m in zip(sample.response_ids, sample.loss_mask) if t == token and m == 0)


def _branches(engine, sample) -> int:
    """Paths in the layout training builds from the sample's tokens (path ids 1..k)."""
    return int(engine.layout(sample).path_ids.max())


def _engine(tok, grammar: str, num_paths: int, prompt: list[int], trace: Trace) -> Engine:
    model = ScriptedLM.writing(tok, [(prompt, trace.ids)], TagIds.from_tokenizer(tok, grammar))
    return Engine(model, tok, grammar, "structured", num_paths=num_paths)


def _npr_block(trace: Trace, plans: int, steps: int) -> Trace:
    """Append an NPR block: the model's guideline of ``plans`` plans; ``steps`` steps of unequal lengths (the
    takeaway then sits after the longest), each the engine's ``<step>i:`` and the model's text; the engine's
    ``<takeaway>`` and the model's takeaway."""
    g = fork_grammar(TagIds.from_tokenizer(trace.tokenizer, "npr"), trace.tokenizer, steps)
    trace.model("<guideline>" + "".join(f"<plan>{i}: of {plans}</plan>" for i in range(1, plans + 1)) + "</guideline>")
    for i in range(steps):
        trace.forced(g.path_open[i]).model(" value" * (1 + i % 3) + "</step>")
    return trace.forced(g.block_closers).model(" so 42</takeaway>")


def _npr(tok, plans: int, num_paths: int) -> tuple[Engine, list[int], Trace]:
    """A scripted NPR planner: ``plans`` plans, the steps the engine forks for them, a takeaway, an answer, EOS."""
    prompt = tok.encode(f"plans {plans}:", add_special_tokens=False)
    trace = _npr_block(Trace(tok), plans, min(plans, num_paths)).model(" 42").eos()
    return _engine(tok, "npr", num_paths, prompt, trace), prompt, trace


def _assert_wrote(engine, samples, trace: Trace) -> None:
    for s in samples:
        assert s.response_ids == trace.ids, s.text
        assert s.loss_mask == trace.mask and s.finish_reason == "stop"
    assert _max_diff(engine.model, engine, samples) <= TOL


@pytest.mark.parametrize("k", [2, 4, 8])
def test_npr_forks_one_branch_per_plan(tagged_tokenizer, k):
    tok = tagged_tokenizer
    engine, prompt, trace = _npr(tok, k, num_paths=8)
    greedy = engine.generate([prompt], SamplingConfig(max_new_tokens=BUDGET, temperature=0.0, batch_size=16))
    sampled = engine.generate([prompt], SamplingConfig(max_new_tokens=BUDGET, seed=k, batch_size=16), num_samples=2)
    _assert_wrote(engine, [*greedy, *sampled], trace)
    step = tok.convert_tokens_to_ids("<step>")
    for s in [*greedy, *sampled]:  # one block, one forced step and one path per plan
        assert s.num_blocks == 1 and _forced(s, step) == _branches(engine, s) == k, s.text


def test_npr_forks_at_most_num_paths(tagged_tokenizer):
    """A block with more plans than ``num_paths`` forks ``num_paths`` steps (the parser's ``plan_step_mismatch``
    for such a trace is tested in tests/formats)."""
    tok = tagged_tokenizer
    engine, prompt, trace = _npr(tok, 4, num_paths=2)
    s = engine.generate([prompt], SamplingConfig(max_new_tokens=BUDGET, temperature=0.0, batch_size=8))[0]
    _assert_wrote(engine, [s], trace)
    assert s.response_ids.count(tok.convert_tokens_to_ids("<plan>")) == 4 and s.num_blocks == 1
    assert _forced(s, tok.convert_tokens_to_ids("<step>")) == _branches(engine, s) == 2, s.text


def test_npr_forks_each_guideline_of_a_response(tagged_tokenizer):
    """Two guidelines, of 3 plans then 2: two blocks, 3 then 2 steps; the plan count restarts at a guideline."""
    tok = tagged_tokenizer
    prompt = tok.encode("plans 3:", add_special_tokens=False)
    trace = _npr_block(_npr_block(Trace(tok), 3, 3), 2, 2).model(" 42").eos()
    engine = _engine(tok, "npr", 4, prompt, trace)
    s = engine.generate([prompt], SamplingConfig(max_new_tokens=BUDGET, temperature=0.0))[0]
    _assert_wrote(engine, [s], trace)
    assert s.num_blocks == 2 and _forced(s, tok.convert_tokens_to_ids("<step>")) == 5


def _thoughts(tok, n: int, words=lambda i: " add" * (1 + i % 3)) -> Trace:
    """A ParaThinker response: n thoughts of ``words(i)`` each (the engine's ``<think{i}>``, the model's text and
    ``</think{i}>``), the engine's ``<summary>``, the model's summary, EOS."""
    trace = Trace(tok)
    for i in range(1, n + 1):
        trace.forced([tok.convert_tokens_to_ids(f"<think{i}>")]).model(words(i) + f"</think{i}>")
    return trace.forced([tok.convert_tokens_to_ids("<summary>")]).model(" 5</summary>").eos()


def test_a_thought_closes_with_its_own_tag(tagged_tokenizer):
    """Even a model that would close every thought with ``</think1>`` (a logit bias puts it above the script) gets
    each thought i closed by ``</think{i}>``: the engine does not sample another thought's closer inside a path. Where
    ``</think1>`` is allowed the bias has its way: thought 1 closes at once, and after ``<summary>`` it is text."""
    tok = tagged_tokenizer
    prompt = tok.encode("thoughts:", add_special_tokens=False)
    engine = _engine(tok, "parathinker", 4, prompt, _thoughts(tok, 4))
    close1, summary = tok.convert_tokens_to_ids("</think1>"), tok.convert_tokens_to_ids("<summary>")
    s = engine.generate([prompt], SamplingConfig(max_new_tokens=40, seed=0, logit_bias={close1: 2 * MARGIN}))[0]
    biased = _thoughts(tok, 4, words=lambda i: "" if i == 1 else " add" * (1 + i % 3)).ids
    block = s.response_ids[:s.response_ids.index(summary) + 1]
    assert block == biased[:biased.index(summary) + 1], s.text
    assert [t for t in block if t in engine.tags.path_close] == [tok.convert_tokens_to_ids(f"</think{i}>")
                                                                  for i in range(1, 5)]
    assert set(s.response_ids[len(block):-1]) == {close1} and s.finish_reason == "length"
    assert _max_diff(engine.model, engine, [s]) <= TOL


@pytest.mark.parametrize("n", [2, 4, 8])
def test_parathinker_n_paths_give_n_thoughts(tagged_tokenizer, n):
    tok = tagged_tokenizer
    prompt = tok.encode("thoughts:", add_special_tokens=False)
    trace = _thoughts(tok, n)
    engine = _engine(tok, "parathinker", n, prompt, trace)
    samples = engine.generate([prompt], SamplingConfig(max_new_tokens=64 * n, seed=n, batch_size=32), num_samples=2)
    _assert_wrote(engine, samples, trace)
    assert all(s.num_blocks == 1 and _branches(engine, s) == n for s in samples)


@pytest.mark.parametrize("n", [2, 4, 8])
def test_parathinker_path_vectors_under_n_paths(tagged_tokenizer, make_model, n):
    """A real Qwen3 (random weights, non-zero path vectors) at n paths: whatever its thoughts say, the engine opens
    exactly n of them, each with its own tag, the layout training builds has n paths, and the reported log-probs
    are the training forward's, path vectors included."""
    tok = tagged_tokenizer
    model = make_model(tok, scale=0.2)
    install_path_vectors(model, 8)
    torch.manual_seed(n)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if ".path_vectors." in name:
                p.normal_(0, 0.1)  # non-zero: every thought's keys and values move
    engine = Engine(model, tok, "parathinker", "structured", num_paths=n)
    prompt = tok.encode("thoughts:", add_special_tokens=False)
    greedy = engine.generate([prompt], SamplingConfig(max_new_tokens=64 * n, temperature=0.0, batch_size=32))[0]
    sampled = engine.generate([prompt], SamplingConfig(max_new_tokens=64 * n, seed=n, batch_size=32), num_samples=4)
    for s in [greedy, *sampled]:
        opened = [t for t, m in zip(s.response_ids, s.loss_mask) if m == 0 and t in engine.tags.path_open]
        assert s.num_blocks == 1 and opened == [tok.convert_tokens_to_ids(f"<think{i}>") for i in range(1, n + 1)]
        assert _branches(engine, s) == n, s.text
    assert _max_diff(model, engine, [greedy, *sampled]) <= TOL
