"""The metrics and tables of the NPR and ParaThinker rows: the same summary code with the grammar switched, the plans
per block, the time per sample, the path-count table beside ParaThinker-1.5B, and several runs stacked."""

import pytest

from parathink.evaluation.evaluate import evaluate_set
from parathink.evaluation.table import format_path_counts, format_runs, format_table, format_vs_start, path_rows

NPR_2 = ("12 + 5 = 17\n<guideline><plan>1: solve</plan><plan>2: solve</plan></guideline>"
         "<step>1: 17 - 3 = 14 \\boxed{14}</step><step>2: 17 - 3 = 15 \\boxed{15}</step>"
         "<takeaway>Most give 14.</takeaway>\\boxed{14}")
NPR_3 = ("<guideline><plan>1: solve</plan><plan>2: solve</plan><plan>3: solve</plan></guideline>"
         "<step>1: \\boxed{14}</step><step>2: \\boxed{14}</step><step>3: \\boxed{13}</step>"
         "<takeaway>Most give 14.</takeaway>\\boxed{14}")
MISMATCH = "<guideline><plan>1: a</plan></guideline><step>1: x</step><step>2: y</step><takeaway>z</takeaway>\\boxed{14}"
THINK = "<think1>\\boxed{14}</think1><think2>\\boxed{15}</think2><summary>14</summary>\\boxed{14}"
RECORD = [{"id": "p", "problem": "Tom has 12 cards. How many now?", "answer": "14"}]


def test_npr_rows_use_the_same_metrics_with_the_grammar_switched():
    _, row = evaluate_set(RECORD, lambda prompts, k: [[NPR_2, NPR_3, MISMATCH, "\\boxed{14}"]], 4, grammar="npr")
    assert row["accuracy"] == 1.0 and row["parallel_rate"] == 0.5 and row["valid_rate"] == 0.75
    assert row["paths_hist"] == {"2": 0.5, "3": 0.5}  # plans per block: the model's choice
    assert row["paths_per_block"] == 2.5 and row["blocks_per_trace"] == 1.0
    assert row["relative_position"] == pytest.approx((len("12 + 5 = 17\n") / len(NPR_2) + 0) / 2)
    assert row["path_accuracy"] == pytest.approx(3 / 5) and row["any_path_accuracy"] == 1.0
    assert row["seconds_per_sample"] >= 0
    _, row = evaluate_set(RECORD, lambda prompts, k: [[THINK] * k], 2, grammar="parathinker")
    assert row["parallel_rate"] == 1.0 and row["paths_hist"] == {"2": 1.0} and row["path_vote_accuracy"] == 1.0


def _row(acc, seconds=0.01):
    return {"accuracy": acc, "pass_at_k": acc, "parallel_rate": 1.0, "relative_position": 0.0, "n": 1600, "k": 8,
            "seconds_per_sample": seconds}


PARATHINKER = {
    "settings": {"format": "parathinker"},
    "stages": {"base": {"easy": {**_row(0.6), "parallel_rate": 0.0, "relative_position": None}},
               "sft": {"easy": _row(0.7), **{f"easy@{n}": _row(0.6 + n / 100, n / 100) for n in (1, 2, 4, 8)}}},
    "vs_start": {"sft": {"easy": {"start": "base", "delta": 0.1, "se": 0.02},
                         "easy@8": {"start": "base", "start_set": "easy", "delta": 0.08, "se": 0.02}}},
}


def test_path_count_table_beside_the_paper():
    assert path_rows(PARATHINKER) == {"sft": {"easy": {n: PARATHINKER["stages"]["sft"][f"easy@{n}"]
                                                       for n in (1, 2, 4, 8)}}}
    lines = format_path_counts(PARATHINKER).splitlines()
    assert lines[3].split() == ["base", "(sequential)", "60.0", "10.0", "50.9"]
    assert [line.split() for line in lines[4:]] == [["sft", "@1", "61.0", "10.0", "-"], ["sft", "@2", "62.0", "20.0", "54.9"],
                                                    ["sft", "@4", "64.0", "40.0", "59.9"],
                                                    ["sft", "@8", "68.0", "80.0", "63.2"]]
    table = format_table(PARATHINKER)
    assert "easy@" not in table.split("\n\n")[0]  # the main table keeps one column group per set
    assert "paper 1.5B avg" in table
    assert "easy@8 (vs easy) +8.0 ± 2.0" in format_vs_start(PARATHINKER)


def test_npr_table_shows_plans_per_block():
    results = {"settings": {"format": "npr"},
               "stages": {"sft": {"hard": {**_row(0.2), "paths_hist": {"2": 0.25, "3": 0.75}}}}}
    assert "sft            hard   2: 25.0%  3: 75.0%" in format_table(results)
    assert "plans per block" not in format_table({**results, "settings": {"format": "parallel_r1"}})


def test_runs_stacked_row_by_row():
    tiny = {"settings": {"format": "parallel_r1"}, "stages": {"base": {"easy": _row(0.6)}, "sft": {"easy": _row(0.77)}}}
    lines = format_runs([("tiny", tiny), ("parathinker_tiny", PARATHINKER)]).splitlines()
    assert [line.split()[:4] for line in lines[2:]] == [
        ["tiny", "(parallel_r1)", "base", "60.0"], ["tiny", "(parallel_r1)", "sft", "77.0"],
        ["parathinker_tiny", "(parathinker)", "base", "60.0"], ["parathinker_tiny", "(parathinker)", "sft", "70.0"]]
    assert "easy@" not in lines[0]
