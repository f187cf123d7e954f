"""The self teacher in every grammar: where the block opens (fork: agreed), how many samples become paths
(path_count), and traces that parse in their grammar, before and after the engine's form."""

import random

import pytest

from parathink.engine import SamplingConfig
from parathink.formats import parse
from parathink.formats.canonical import engine_form
from parathink.formats.metrics import relative_position
from parathink.grading import grade
from parathink.teacher.selfdistill import SelfTeacher, choose_paths, decided_count, self_trace
from parathink.teacher.traces import fork_at_agreement, shared_lines

RIGHT = "12 + 5 = 17\n17 - 3 = 14\n14 * 2 = 28\n\\boxed{28}"
SLIP = "12 + 5 = 17\n17 - 3 = 15\n15 * 2 = 30\n\\boxed{30}"
EARLY = "12 + 5 = 18\n18 - 3 = 15\n15 * 2 = 30\n\\boxed{30}"
OTHER = "12 + 5 = 17\n17 - 3 = 14\n14 * 2 = 31\n\\boxed{31}"
FOURTH = "12 + 5 = 17\n17 - 3 = 14\n14 * 2 = 29\n\\boxed{29}"


def test_the_block_opens_where_the_samples_differ():
    assert shared_lines([RIGHT, SLIP, RIGHT]) == 1
    prefix, tails = fork_at_agreement([RIGHT, SLIP, RIGHT])
    assert prefix == "12 + 5 = 17" and tails[1] == "17 - 3 = 15\n15 * 2 = 30\n\\boxed{30}"
    assert shared_lines([RIGHT, EARLY]) == 0  # they differ on the first line: the block opens the response
    # Samples that agree throughout keep their last operation and answer as paths: a late verification block.
    prefix, tails = fork_at_agreement([RIGHT, RIGHT])
    assert prefix == "12 + 5 = 17\n17 - 3 = 14" and tails == ["14 * 2 = 28\n\\boxed{28}"] * 2
    assert shared_lines(["\\boxed{3}", "\\boxed{3}"]) == 0  # nothing to share without leaving a path empty


@pytest.mark.parametrize("grammar,fork", [("parallel_r1", "start"), ("parallel_r1", "agreed"), ("npr", "start"),
                                          ("npr", "agreed"), ("parathinker", "start")])
def test_voted_traces_parse_in_their_grammar(grammar, fork):
    response, answers, vote = self_trace([RIGHT, SLIP, RIGHT, RIGHT], grammar=grammar, fork=fork)
    assert answers == ["28", "30", "28", "28"] and vote == "28" and grade(response, "28")[1]
    for text in (response, engine_form(response, grammar)):
        trace = parse(text, grammar)
        assert trace.parallel, trace.errors
        block = trace.blocks[0]
        assert len(block.paths) == 4 and block.summary.text.strip() == "Most give 28."
        assert [grade(p.text, "28")[1] for p in block.paths] == [True, False, True, True]
        if grammar == "npr":
            assert [p.text.split(":")[0] for p in block.plans] == ["1", "2", "3", "4"]
        opens_late = relative_position(trace) > 0
        assert opens_late == (fork == "agreed")
        assert text.startswith("12 + 5 = 17\n") == (fork == "agreed")


def test_path_count_rules():
    rng = random.Random(0)
    assert decided_count(["7", "7", "8"], 2) == 2  # two agree: two plans
    assert decided_count(["7", "8", "7"], 2) == 3
    assert decided_count(["7", "8", "9", "7", "7"], 2) == 4  # two of four, none tied with them
    assert decided_count(["7", "8", "9", "6", "7"], 2) == 5
    assert decided_count(["7", "8", "9", "6"], 2) == 4  # never decided: every sample (the summary has no vote)
    assert decided_count([None, None, "7", "7"], 2) == 4
    samples = [RIGHT, SLIP, RIGHT, EARLY, RIGHT]
    assert choose_paths(samples, "all", 2, rng) == samples
    assert choose_paths(samples, "decided", 2, rng) == samples[:3]
    drawn = {len(choose_paths(samples[:4], "random", 2, rng)) for _ in range(200)}
    assert drawn == {2, 3, 4}  # ParaThinker's 2 to 4 thoughts


class _Samples:
    """A generator that answers every prompt with the same list of samples."""

    def __init__(self, samples):
        self.samples = samples

    def generate_texts(self, prompts, sampling, num_samples=1):
        assert num_samples == len(self.samples)
        return [list(self.samples) for _ in prompts]


def test_npr_teacher_writes_as_many_plans_as_a_decided_vote_needs():
    problems = [{"id": f"p{i}", "problem": f"Tom has {i} cards. How many cards does Tom have now?", "answer": "28"}
                for i in range(3)]
    for samples, plans in (([RIGHT, RIGHT, SLIP, EARLY, SLIP], 2), ([RIGHT, SLIP, RIGHT, EARLY, SLIP], 3),
                           ([SLIP, RIGHT, OTHER, RIGHT, SLIP], 4), ([SLIP, RIGHT, OTHER, FOURTH, RIGHT], 5)):
        teacher = SelfTeacher(_Samples(samples), None, SamplingConfig(seed=1), num_paths=5, grammar="npr", fork="agreed",
                              path_count="decided")
        for rec in teacher.generate(problems):
            trace = parse(rec["response"], "npr")
            assert trace.parallel and [len(b.plans) for b in trace.blocks] == [plans]
            assert len(rec["path_answers"]) == plans


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match="fork must be one of"):
        SelfTeacher(_Samples([RIGHT, RIGHT]), None, SamplingConfig(seed=0), num_paths=2, fork="late")
    with pytest.raises(ValueError, match="min_paths must be in 1..num_paths=2"):
        SelfTeacher(_Samples([RIGHT, RIGHT]), None, SamplingConfig(seed=0), num_paths=2, min_paths=3)
