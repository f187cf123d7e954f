"""THE engine property: reported log-probs == the training forward's, for the same tokens and layout (fp32, 1e-4).

The toy model writes every grammar, so structured mode really forks (asserted), merges and closes blocks.
"""

from __future__ import annotations

import pytest
import torch
from scripted_lm import ScriptedLM

from parathink.engine import Engine, SamplingConfig, recompute_logprobs
from parathink.formats.layouts import TagIds, build_layout
from parathink.modeling import install_path_vectors
from parathink.testing.toy import prompt_ids

TOL = 1e-4
GRAMMARS = ["parallel_r1", "npr", "parathinker"]
# The fewest forks over the 18 samples that make the check a check of forks. What the toy opens depends on the CPU
# family (torch runs other kernels): npr 6 / 9 / 8 blocks with ATEN_CPU_CAPABILITY default / avx2 / avx512,
# parallel_r1 13-21, parathinker 18. Half the fewest seen, so that no CPU family sits at the edge.
MIN_FORKS = 3


def _max_diff(model, engine, samples) -> float:
    with torch.no_grad():
        logp, _ = recompute_logprobs(model, engine, samples)
    return max((logp[i, :len(s.logprobs)] - torch.tensor(s.logprobs)).abs().max().item() for i, s in enumerate(samples))


def _generate(engine, tok, grammar, n_prompts=6, n=3, budget=90, seed=0, **kw):
    prompts = [prompt_ids(tok, grammar, i) for i in range(n_prompts)]
    return engine.generate(prompts, SamplingConfig(max_new_tokens=budget, seed=seed, batch_size=8, **kw), num_samples=n)


@pytest.mark.parametrize("decode", ["eager", "static"])
@pytest.mark.parametrize("mode", ["causal", "structured"])
@pytest.mark.parametrize("grammar", GRAMMARS)
def test_engine_logprobs_match_training_forward(toy, mode, grammar, decode):
    model, tok = toy
    engine = Engine(model, tok, grammar, mode, num_paths=3 if grammar == "npr" else 2, decode=decode)
    samples = _generate(engine, tok, grammar)
    assert len(samples) == 18 and [s.prompt_index for s in samples] == [i // 3 for i in range(18)]
    if mode == "structured":
        assert sum(s.num_blocks for s in samples) >= MIN_FORKS, "the toy model should open blocks, so forks are tested"
    else:
        assert all(s.num_blocks == 0 for s in samples)
    assert _max_diff(model, engine, samples) <= TOL


@pytest.mark.parametrize("grammar", ["parallel_r1", "parathinker"])
def test_plain_transformers_forward_backend_agrees(toy, grammar):
    """The HF backend (the model's own forward over our cache) meets the same bound."""
    model, tok = toy
    engine = Engine(model, tok, grammar, "structured", backend="hf")
    samples = _generate(engine, tok, grammar, n_prompts=3)
    assert sum(s.num_blocks for s in samples) > 0
    assert _max_diff(model, engine, samples) <= TOL


@pytest.mark.parametrize("backend,decode", [("fast", "eager"), ("fast", "static"), ("hf", "eager")])
def test_parathinker_path_vectors(toy, backend, decode):
    """ParaThinker's per-path key/value vectors (non-zero here) enter sampling exactly as in training."""
    model, tok = toy
    import copy

    model = copy.deepcopy(model)
    install_path_vectors(model, 4)
    torch.manual_seed(1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if ".path_vectors." in name:
                p.normal_(0, 0.5)
    engine = Engine(model, tok, "parathinker", "structured", num_paths=3, backend=backend, decode=decode)
    samples = _generate(engine, tok, "parathinker", n_prompts=3, n=2)
    assert all(s.num_blocks == 1 for s in samples)
    assert _max_diff(model, engine, samples) <= TOL


def test_structured_samples_follow_the_layout(toy, one_block):
    """Forced tags carry loss-mask 0; paths restart at p+1; the closer sits at p + longest + 1 (a scripted model
    whose two paths differ in length, so that every sample forks and "longest" means something)."""
    _, tok = toy
    tags = TagIds.from_tokenizer(tok, "parallel_r1")
    ids, trace = tags.ids, one_block
    prompts = [prompt_ids(tok, "parallel_r1", i) for i in range(3)]
    model = ScriptedLM.writing(tok, [(p, trace.ids) for p in prompts], tags)
    engine = Engine(model, tok, "parallel_r1", "structured")
    samples = engine.generate(prompts, SamplingConfig(max_new_tokens=90, seed=0), num_samples=2)
    assert all(s.response_ids == trace.ids and s.loss_mask == trace.mask and s.num_blocks == 1 for s in samples)
    assert _max_diff(model, engine, samples) <= TOL
    s = samples[0]
    resp = s.response_ids
    lay = engine.layout(s)
    assert torch.equal(lay.attention_mask, build_layout(s.prompt_ids + resp, engine.tags).attention_mask)
    n = len(s.prompt_ids)
    opener = resp.index(ids["<Parallel>"])
    p = int(lay.position_ids[n + opener])
    starts = [i for i, t in enumerate(resp) if t == ids["<Path>"]]
    close = resp.index(ids["</Parallel>"])
    longest = max(starts[1] - starts[0], close - starts[1])
    assert [int(lay.position_ids[n + i]) for i in starts] == [p + 1, p + 1]
    assert int(lay.position_ids[n + close]) == p + longest + 1
    # The second path does not see the first; the token after the block sees both.
    a, b = n + starts[0], n + starts[1]
    assert not lay.attention_mask[b, a] and lay.attention_mask[b, n + opener]
    assert lay.attention_mask[n + close, a] and lay.attention_mask[n + close, b]


def test_causal_layout_is_plain(toy):
    model, tok = toy
    engine = Engine(model, tok, "parallel_r1", "causal")
    s = _generate(engine, tok, "parallel_r1", n_prompts=1, n=1)[0]
    lay = engine.layout(s)
    assert torch.equal(lay.position_ids, torch.arange(len(s.prompt_ids) + len(s.response_ids)))


def test_recompute_keeps_the_graph_and_gives_entropy(toy):
    model, tok = toy
    engine = Engine(model, tok, "parallel_r1", "structured")
    samples = _generate(engine, tok, "parallel_r1", n_prompts=2, n=2, budget=40)
    logp, entropy = recompute_logprobs(model, engine, samples, with_entropy=True)
    width = max(len(s.response_ids) for s in samples)
    assert logp.shape == entropy.shape == (4, width) and logp.requires_grad
    logp.sum().backward()
    assert model.model.embed_tokens.weight.grad is not None
    model.zero_grad(set_to_none=True)
    assert (entropy >= 0).all() and (logp <= 0).all()
