"""The self teacher (NPR's self-distillation): samples become paths, the summary votes."""

import pytest
import torch

from parathink.data import synthetic
from parathink.engine import SamplingConfig
from parathink.formats import parse
from parathink.grading import grade
from parathink.quality.traces import FilterConfig, judge
from parathink.teacher.generators import HFGenerator, ban
from parathink.teacher.selfdistill import SelfTeacher, self_trace
from parathink.teacher.traces import cut_after_boxed, majority


def test_vote_and_trace_shape():
    samples = ["3 + 4 = 7\n\\boxed{7}\nnoise after the answer", "3 + 4 = 8\n\\boxed{8}", "3 + 4 = 7\n\\boxed{7}"]
    response, answers, vote = self_trace(samples)
    assert answers == ["7", "8", "7"] and vote == "7"
    trace = parse(response)
    assert trace.parallel and [p.text.strip() for p in trace.blocks[0].paths] == [
        "3 + 4 = 7\n\\boxed{7}", "3 + 4 = 8\n\\boxed{8}", "3 + 4 = 7\n\\boxed{7}"]
    # The default summary is order-free: the same multiset of answers gives the same summary in any path order.
    assert trace.blocks[0].summary.text.strip() == "Most give 7."
    assert parse(self_trace(samples[::-1])[0]).blocks[0].summary.text == trace.blocks[0].summary.text
    listed = parse(self_trace(samples, summary="listed")[0]).blocks[0].summary.text.strip()
    assert listed == "Paths give 7, 8, 7.\nMost give 7."
    assert grade(response, "7") == ("7", True) and grade(response, "8")[1] is False
    assert majority(["5", None, "6"]) == "5" and majority([None, None]) is None
    assert cut_after_boxed("a \\boxed{\\frac{1}{2}} b") == "a \\boxed{\\frac{1}{2}}"


def test_no_answer_anywhere_gives_a_trace_without_final_answer():
    response, answers, vote = self_trace(["garbage", "more garbage"])
    assert vote is None and answers == [None, None]
    assert parse(response).parallel and grade(response, "3")[0] is None
    assert parse(response).blocks[0].summary.text.strip() == "No answer."


def test_a_tie_has_no_vote_unless_the_summary_lists_the_paths_in_order():
    # Under the structured layout the summary cannot see which path came first, so "first seen wins" is a
    # target it cannot learn: the order-free summary leaves a tie without a vote, and the filter rejects it.
    tied = ["1 + 1 = 2\n\\boxed{2}", "1 + 1 = 3\n\\boxed{3}", "no answer"]
    response, answers, vote = self_trace(tied)
    assert answers == ["2", "3", None] and vote is None
    assert parse(response).blocks[0].summary.text.strip() == "No majority." and not response.endswith("}")
    rejected = judge({"problem": "1 + 1", "answer": "3", "response": response, "vote": vote}, FilterConfig())
    assert rejected.correct and rejected.reasons == ["no_vote"]  # graded on path 2's \\boxed{3}, still rejected
    assert self_trace(tied, summary="listed")[2] == "2"
    assert majority(["5", "6", "6"], ties="none") == "6" and majority(["5", "6"], ties="none") is None


def test_unknown_summary_style_is_refused():
    with pytest.raises(ValueError, match="summary style must be one of vote, listed, got 'prose'"):
        self_trace(["\\boxed{1}", "\\boxed{1}"], summary="prose")
    with pytest.raises(ValueError, match="teacher.self.summary must be one of vote, listed"):
        SelfTeacher(_Echo({}), None, SamplingConfig(seed=0), num_paths=2, summary="prose")


class _Echo:
    """A generator that answers each prompt's problem with its true result, once wrong: mechanics only."""

    def __init__(self, by_prompt):
        self.by_prompt, self.calls = by_prompt, []

    def generate_texts(self, prompts, sampling, num_samples=1):
        self.calls.append((len(prompts), num_samples, sampling.seed))
        return [[self.by_prompt[p] + ("" if k else "\n\\boxed{0}") for k in range(num_samples)] for p in prompts]


def test_self_teacher_streams_records_per_chunk():
    from parathink.data.prompts import build_prompt

    problems = synthetic.generate("easy", "train", 5)
    gen = _Echo({build_prompt(p["problem"]): synthetic.worked_solution(p) for p in problems})
    out = list(SelfTeacher(gen, None, SamplingConfig(seed=3), num_paths=3, chunk=2).generate(problems))
    assert [r["id"] for r in out] == [p["id"] for p in problems]
    assert gen.calls == [(2, 3, 3), (2, 3, 5), (1, 3, 7)]  # chunked, distinct reproducible seeds
    for p, r in zip(problems, out):
        assert r["vote"] == p["answer"] and grade(r["response"], p["answer"])[1]
        assert len(parse(r["response"]).blocks[0].paths) == 3


@pytest.fixture(scope="module")
def untrained_tiny():
    """An untrained tiny Qwen3 with a tokenizer trained here: real generate, meaningless text."""
    from omegaconf import OmegaConf

    from parathink.modeling import build_tiny_model
    from parathink.modeling.tokenizer import train_tokenizer

    torch.manual_seed(0)
    tok = train_tokenizer(synthetic.corpus(300), vocab_size=300)
    cfg = OmegaConf.create({"config": {"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2,
                                       "num_key_value_heads": 1, "head_dim": 16, "intermediate_size": 64,
                                       "max_position_embeddings": 256, "tie_word_embeddings": True}})
    return build_tiny_model(cfg, tok).eval(), tok


def test_hf_generator_on_a_real_model_is_reproducible_and_prompt_major(untrained_tiny):
    torch.set_num_threads(1)
    model, tok = untrained_tiny
    gen = HFGenerator(model, tok)
    prompts = ["Problem: a\nSolution:\n", "Problem: a much longer problem text\nSolution:\n"]
    s = SamplingConfig(temperature=1.0, max_new_tokens=8, seed=0, batch_size=4)
    a = gen.generate_texts(prompts, s, num_samples=3)
    assert len(a) == 2 and all(len(x) == 3 for x in a)
    assert a == gen.generate_texts(prompts, s, num_samples=3)
    teacher = SelfTeacher(gen, tok, s, num_paths=2)
    recs = list(teacher.generate(synthetic.generate("easy", "train", 3)))
    # Mechanics only (the samples are noise): one block of two paths per problem, built by code.
    assert len(recs) == 3 and all(r["response"].startswith("<Parallel>\n<Path>\n") for r in recs)
    assert all(len(r["path_answers"]) == 2 for r in recs)


def test_engine_generator_plugs_in_the_same_way(untrained_tiny):
    from parathink.teacher.generators import make_generator

    torch.set_num_threads(1)
    model, tok = untrained_tiny
    gen = make_generator("engine", model, tok)
    s = SamplingConfig(temperature=1.0, max_new_tokens=8, seed=0, batch_size=8)
    out = gen.generate_texts(["Problem: a\nSolution:\n", "Problem: b\nSolution:\n"], s, num_samples=2)
    assert len(out) == 2 and all(len(x) == 2 and all(isinstance(t, str) for t in x) for x in out)
    assert out == gen.generate_texts(["Problem: a\nSolution:\n", "Problem: b\nSolution:\n"], s, num_samples=2)


@pytest.mark.parametrize("kind", ["hf", "engine"])
def test_banned_tokens_are_never_sampled(untrained_tiny, kind):
    from parathink.teacher.generators import make_generator, tag_token_ids

    torch.set_num_threads(1)
    model, tok = untrained_tiny
    seven = tok.convert_tokens_to_ids("7")
    banned = tuple(i for i in range(len(tok)) if i not in (seven, tok.eos_token_id))
    s = SamplingConfig(temperature=1.0, max_new_tokens=6, seed=0, batch_size=8, logit_bias=ban(banned))
    out = make_generator(kind, model, tok).generate_texts(["Problem: a\nSolution:\n"], s, num_samples=4)
    assert all(set(t) <= {"7"} for t in out[0])  # only the one allowed token (or an early EOS)

    class _Tok:
        def get_vocab(self):
            return {"<Path>": 5, "</Path>": 6, "<think1>": 9, "hello": 3}

    assert tag_token_ids(_Tok()) == (5, 6, 9)
