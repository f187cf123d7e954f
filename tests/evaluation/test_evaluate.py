"""evaluate_set on hand-written responses: grading, format verdicts and the summary row."""

import pytest

from parathink.evaluation.evaluate import evaluate_set, path_metrics, score_sample
from parathink.evaluation.table import format_compare, format_table

PAR = ("Start.\n<Parallel><Path>3+4=7</Path><Path>4+3=7</Path></Parallel><Summary>both 7</Summary>\n"
       "\\boxed{7}")
SEQ = "3+4=7\n\\boxed{7}"
WRONG = "3+4=8\n\\boxed{8}"
BROKEN = "<Parallel><Path>only one</Path></Parallel><Summary>x</Summary> \\boxed{7}"

RECORDS = [{"id": "p1", "problem": "What is 3+4?", "answer": "7"},
           {"id": "p2", "problem": "What is 3+4 again?", "answer": "7"}]
CANNED = {0: [PAR, SEQ, WRONG, BROKEN], 1: [WRONG, WRONG, WRONG, PAR]}


def canned_generator(prompts, k):
    assert all("3+4" in p for p in prompts)  # prompts come from build_prompt
    return [CANNED[i][:k] for i in range(len(prompts))]


def test_score_sample_fields():
    s = score_sample(PAR, "7", "parallel_r1")
    assert s["correct"] and s["parallel"] and s["valid"] and s["blocks"] == 1
    assert s["relative_position"] == pytest.approx(len("Start.\n") / len(PAR))
    b = score_sample(BROKEN, "7", "parallel_r1")
    assert b["correct"] and not b["valid"] and "too_few_paths" in b["errors"] and b["relative_position"] is None


def test_evaluate_set_summary():
    problems, row = evaluate_set(RECORDS, canned_generator, 4)
    assert [p["correct"] for p in problems] == [3, 1]
    assert row["n"] == 8 and row["n_problems"] == 2 and row["k"] == 4
    assert row["accuracy"] == pytest.approx((3 / 4 + 1 / 4) / 2)
    assert row["pass_at_k"] == 1.0 and row["best_at_k"] == 1.0
    assert row["parallel_rate"] == pytest.approx(2 / 8)
    assert row["valid_rate"] == pytest.approx(7 / 8)
    assert row["relative_position"] == pytest.approx(len("Start.\n") / len(PAR))
    assert row["blocks_per_trace"] == 1.0
    assert row["accuracy_parallel"] == 1.0
    assert row["maj_at_k"] == pytest.approx(1 / 2)  # p1 votes 7, p2 votes 8
    assert row["response_length"] == pytest.approx(sum(len(r) for r in CANNED[0] + CANNED[1]) / 8)


def test_path_metrics_split_the_paths_from_the_summary():
    """One right path out-voted by two wrong ones: the paths hold the answer, the vote loses it."""
    outvoted = ("<Parallel><Path>3+4=7 \\boxed{7}</Path><Path>3+4=8 \\boxed{8}</Path><Path>4+3=8 \\boxed{8}</Path>"
                "</Parallel><Summary>most 8</Summary>\n\\boxed{8}")
    agreed = "<Parallel><Path>\\boxed{7}</Path><Path>\\boxed{7}</Path></Parallel><Summary>7</Summary>\\boxed{7}"
    samples = [score_sample(r, "7", "parallel_r1") for r in (outvoted, agreed, SEQ, BROKEN)]
    assert samples[0]["path_answers"] == ["7", "8", "8"] and samples[0]["path_correct"] == [True, False, False]
    assert samples[2]["path_correct"] == [] and samples[3]["path_correct"] == []  # sequential; not a valid block
    m = path_metrics(samples)
    assert m["path_accuracy"] == pytest.approx(3 / 5)
    assert m["path_vote_accuracy"] == pytest.approx(1 / 2)
    assert m["any_path_accuracy"] == 1.0
    assert path_metrics(samples[2:]) == {"path_accuracy": None, "path_vote_accuracy": None, "any_path_accuracy": None}
    # Paths without an answer of their own (PAR's) count as not right: the summary found 7 without them.
    assert path_metrics([score_sample(PAR, "7", "parallel_r1")])["any_path_accuracy"] == 0.0


def test_generator_that_returns_too_few_samples_is_an_error():
    with pytest.raises(RuntimeError, match="samples"):
        evaluate_set(RECORDS, lambda prompts, k: [["x"]] * len(prompts), 4)


def test_tables():
    row = {"accuracy": 0.5, "pass_at_k": 0.75, "parallel_rate": 0.9, "relative_position": 0.25, "n": 1600, "k": 8}
    results = {"stages": {"sft": {"hard": row}, "base": {"hard": {**row, "parallel_rate": 0.0,
                                                                   "relative_position": None}}}}
    text = format_table(results)
    lines = text.splitlines()
    assert lines[2].startswith("base") and lines[3].startswith("sft")  # curriculum order
    assert "50.0" in lines[3] and "90.0" in lines[3] and "0.250" in lines[3]
    assert "n=1600, k=8" in text
    cmp = format_compare(results, {"stages": {"sft": {"hard": {**row, "accuracy": 0.6}}}})
    assert "50.0 | 60.0" in cmp and "- | -" not in cmp.splitlines()[2].split("base")[0]


def test_vs_start_lines():
    from parathink.evaluation.table import format_vs_start

    results = {"stages": {"base": {}, "sft": {}, "grpo_baseline": {}},
               "vs_start": {"grpo_baseline": {"hard": {"start": "base", "delta": 0.024, "se": 0.012, "n_problems": 200}},
                            "sft": {"easy": {"start": "base", "delta": 0.081, "se": 0.021, "n_problems": 200},
                                    "hard": {"start": "base", "delta": -0.053, "se": 0.012, "n_problems": 200}}}}
    lines = format_vs_start(results).splitlines()
    assert lines[1] == "sft            vs base     easy +8.1 ± 2.1   hard -5.3 ± 1.2"
    assert lines[2] == "grpo_baseline  vs base     hard +2.4 ± 1.2"
    assert format_vs_start({"stages": {"base": {}}}) == ""
