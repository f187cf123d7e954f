"""NPR and ParaThinker under the engine at 2, 4 and 8 paths: the engine forks one branch per NPR plan, gives
ParaThinker N thoughts at N paths, and the log-probs it reports are the training forward's (structured layout, fp32,
<= 1e-4), ParaThinker's per-path key/value vectors included."""

from __future__ import annotations

import copy

import pytest
import torch

from parathink.engine import Engine, SamplingConfig, recompute_logprobs
from parathink.formats import parse
from parathink.modeling import install_path_vectors

from plan_model import npr_prompt, plan_model

TOL = 1e-4


@pytest.fixture(scope="module")
def planner():
    torch.set_num_threads(1)
    return plan_model()


def _max_diff(model, engine, samples) -> float:
    with torch.no_grad():
        logp, _ = recompute_logprobs(model, engine, samples)
    return max((logp[i, :len(s.logprobs)] - torch.tensor(s.logprobs)).abs().max().item() for i, s in enumerate(samples))


def _forced(sample, token: int) -> int:
    """How many times the engine (not the model) wrote ``token`` into ``sample``."""
    return sum(1 for t, m in zip(sample.response_ids, sample.loss_mask) if t == token and m == 0)


@pytest.mark.parametrize("k", [2, 4, 8])
def test_npr_forks_one_branch_per_plan(planner, k):
    model, tok = planner
    engine = Engine(model, tok, "npr", "structured", num_paths=8)
    step = tok.convert_tokens_to_ids("<step>")
    prompt = tok.encode(npr_prompt(k), add_special_tokens=False)
    greedy = engine.generate([prompt], SamplingConfig(max_new_tokens=320, temperature=0.0, batch_size=16))[0]
    blocks = parse(greedy.text, "npr").blocks
    assert len(blocks) == 1 and len(blocks[0].plans) == k, greedy.text  # the model wrote the count it was asked for
    assert greedy.num_blocks == 1 and _forced(greedy, step) == len(blocks[0].paths) == k  # one branch per plan
    sampled = engine.generate([prompt], SamplingConfig(max_new_tokens=320, seed=k, batch_size=16), num_samples=4)
    assert _max_diff(model, engine, [greedy, *sampled]) <= TOL


def test_npr_forks_at_most_num_paths(planner):
    """A block with more plans than ``num_paths`` forks ``num_paths`` steps, and the parser says so."""
    model, tok = planner
    engine = Engine(model, tok, "npr", "structured", num_paths=2)
    s = engine.generate([tok.encode(npr_prompt(4), add_special_tokens=False)],
                        SamplingConfig(max_new_tokens=320, temperature=0.0, batch_size=8))[0]
    trace = parse(s.text, "npr")
    assert [(len(b.plans), len(b.paths)) for b in trace.blocks] == [(4, 2)] and "plan_step_mismatch" in trace.errors
    assert _max_diff(model, engine, [s]) <= TOL


@pytest.mark.parametrize("n", [2, 4, 8])
def test_parathinker_n_paths_give_n_thoughts_with_path_vectors(planner, n):
    model, tok = planner
    model = copy.deepcopy(model)
    install_path_vectors(model, 8)
    torch.manual_seed(n)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if ".path_vectors." in name:
                p.normal_(0, 0.1)  # non-zero: every thought's keys and values move
    engine = Engine(model, tok, "parathinker", "structured", num_paths=n)
    prompt = tok.encode("thoughts:", add_special_tokens=False)
    greedy = engine.generate([prompt], SamplingConfig(max_new_tokens=64 * n, temperature=0.0, batch_size=32))[0]
    trace = parse(greedy.text, "parathinker")
    assert trace.valid and [len(b.paths) for b in trace.blocks] == [n], greedy.text
    sampled = engine.generate([prompt], SamplingConfig(max_new_tokens=64 * n, seed=n, batch_size=32), num_samples=4)
    for s in sampled:  # whatever the thoughts say, the engine opens exactly n of them, each with its own tag
        opened = [t for t, m in zip(s.response_ids, s.loss_mask) if m == 0 and t in engine.tags.path_open]
        assert s.num_blocks == 1 and opened == [tok.convert_tokens_to_ids(f"<think{i}>") for i in range(1, n + 1)]
    assert _max_diff(model, engine, [greedy, *sampled]) <= TOL


def test_a_thought_closes_with_its_own_tag(planner):
    """Even a model that would close every thought with ``</think1>`` (pushed there by a logit bias) gets each
    thought i closed by ``</think{i}>``: the engine does not sample another thought's closer inside a path."""
    model, tok = planner
    engine = Engine(model, tok, "parathinker", "structured", num_paths=4)
    close1 = tok.convert_tokens_to_ids("</think1>")
    samples = engine.generate([tok.encode("thoughts:", add_special_tokens=False)],
                              SamplingConfig(max_new_tokens=256, seed=0, batch_size=16, logit_bias={close1: 8.0}),
                              num_samples=4)
    summary = tok.convert_tokens_to_ids("<summary>")
    for s in samples:
        block = s.response_ids[:s.response_ids.index(summary)]  # after it the bias has its way: that is text
        closers = [t for t in block if t in engine.tags.path_close]
        assert closers == [tok.convert_tokens_to_ids(f"</think{i}>") for i in range(1, 5)], s.text
    assert _max_diff(model, engine, samples) <= TOL
