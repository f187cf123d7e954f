"""NPR and ParaThinker under the engine at 2, 4 and 8 paths: the engine forks one branch per NPR plan, gives
ParaThinker N thoughts at N paths, and the log-probs it reports are the training forward's (structured layout, fp32,
<= 1e-4), ParaThinker's per-path key/value vectors included.

The NPR guideline is scripted (``scripted_planner``): the plan count is the test's, not something the toy had to
learn, which it learns on one CPU family and not on another (torch runs other kernels on AVX2 and AVX-512)."""

from __future__ import annotations

import copy

import pytest
import torch
from plan_model import plan_model, scripted_planner

from parathink.engine import Engine, SamplingConfig, recompute_logprobs
from parathink.modeling import install_path_vectors

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


def _branches(engine, sample) -> int:
    """Paths in the layout training builds from the sample's tokens (path ids 1..k)."""
    return int(engine.layout(sample).path_ids.max())


@pytest.mark.parametrize("k", [2, 4, 8])
def test_npr_forks_one_branch_per_plan(planner, k):
    model, tok = planner
    scripted, prompt = scripted_planner(model, tok, k)
    engine = Engine(scripted, tok, "npr", "structured", num_paths=8, backend="hf")
    step = tok.convert_tokens_to_ids("<step>")
    greedy = engine.generate([prompt], SamplingConfig(max_new_tokens=320, temperature=0.0, batch_size=16))[0]
    sampled = engine.generate([prompt], SamplingConfig(max_new_tokens=320, seed=k, batch_size=16), num_samples=4)
    for s in [greedy, *sampled]:  # whatever the steps then say: one block, one forced step and one path per plan
        assert s.num_blocks == 1 and _forced(s, step) == _branches(engine, s) == k, s.text
    assert _max_diff(scripted, engine, [greedy, *sampled]) <= TOL


def test_npr_forks_at_most_num_paths(planner):
    """A block with more plans than ``num_paths`` forks ``num_paths`` steps (the parser's ``plan_step_mismatch``
    for such a trace is tested in tests/formats)."""
    model, tok = planner
    scripted, prompt = scripted_planner(model, tok, 4)
    engine = Engine(scripted, tok, "npr", "structured", num_paths=2, backend="hf")
    s = engine.generate([prompt], SamplingConfig(max_new_tokens=320, temperature=0.0, batch_size=8))[0]
    assert s.text.count("<plan>") == 4 and s.num_blocks == 1
    assert _forced(s, tok.convert_tokens_to_ids("<step>")) == _branches(engine, s) == 2, s.text
    assert _max_diff(scripted, engine, [s]) <= TOL


def test_the_script_is_the_models_own_sampling(planner):
    """The scripted plans are sampled, not forced by the engine: they carry loss mask 1 and log-prob ~0, so the
    fork counts above come from the engine reading the model's plans, not from tokens it wrote itself."""
    model, tok = planner
    scripted, prompt = scripted_planner(model, tok, 2)
    engine = Engine(scripted, tok, "npr", "structured", num_paths=8, backend="hf")
    s = engine.generate([prompt], SamplingConfig(max_new_tokens=320, seed=0, batch_size=8))[0]
    n = len(scripted.script)
    assert s.response_ids[:n] == scripted.script.tolist()
    assert s.loss_mask[:n] == [1] * n and max(abs(lp) for lp in s.logprobs[:n]) < 1e-6


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
    sampled = engine.generate([prompt], SamplingConfig(max_new_tokens=64 * n, seed=n, batch_size=32), num_samples=4)
    # Whatever the thoughts say (the toy's text differs between CPU families), the engine opens exactly n of them,
    # each with its own tag, and the layout training builds has n paths.
    for s in [greedy, *sampled]:
        opened = [t for t, m in zip(s.response_ids, s.loss_mask) if m == 0 and t in engine.tags.path_open]
        assert s.num_blocks == 1 and opened == [tok.convert_tokens_to_ids(f"<think{i}>") for i in range(1, n + 1)]
        assert _branches(engine, s) == n, s.text
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
