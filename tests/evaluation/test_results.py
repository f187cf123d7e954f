"""parathink.evaluation.results: one reader and writer for results.json, refusing what is not one."""

import pytest

from parathink.errors import BadInput
from parathink.evaluation import results


def test_write_then_read_round_trips_and_rows_walk_every_row(tmp_path):
    data = {"stages": {"base": {"easy": {"n": 8, "accuracy": 0.5}, "hard@2": {"n": 8, "accuracy": 0.25}},
                       "sft": {"easy": {"n": 8, "accuracy": 0.75}}},
            "missing": ["rl_hard"], "settings": {"format": "parallel_r1"},
            "vs_start": {"sft": {"easy": {"start": "base", "delta": 0.25, "se": 0.1}}}}
    assert results.write(data, tmp_path) == tmp_path / "results.json"
    back = results.read(tmp_path)
    assert back == data
    assert [(s, n, r["accuracy"]) for s, n, r in results.rows(back)] == [
        ("base", "easy", 0.5), ("base", "hard@2", 0.25), ("sft", "easy", 0.75)]


def test_the_rows_times_go_beside_results_json_and_read_puts_them_back(tmp_path):
    written = []
    for run, seconds in (("a", 0.002), ("b", 0.9)):
        data = {"stages": {"sft": {"easy": {"n": 8, "accuracy": 0.5, "seconds_per_sample": seconds},
                                   "easy@2": {"n": 8, "accuracy": 0.25}}}, "missing": [], "settings": {},
                "vs_start": {}}
        (tmp_path / run).mkdir()
        written.append(results.write(data, tmp_path / run).read_bytes())
        assert results.read(tmp_path / run) == data
        assert data["stages"]["sft"]["easy"]["seconds_per_sample"] == seconds  # the caller's rows are left whole
    assert written[0] == written[1] and b"seconds_per_sample" not in written[0]  # the hashed file: no times


def test_an_older_file_gets_the_optional_parts_empty():
    back = results.parse('{"stages": {"base": {"easy": {"n": 1}}}}', "old.json")
    assert back["missing"] == [] and back["settings"] == {} and back["vs_start"] == {}


@pytest.mark.parametrize("text, message", [
    ("not json", "f.json: "),
    ('{"rows": []}', "f.json: not a results.json (no 'stages' object)"),
    ('{"stages": {"sft": [1, 2]}}', "f.json: stages.sft is not an object of result rows"),
    ('{"stages": {"sft": {"easy": 3}}}', "f.json: stages.sft is not an object of result rows"),
])
def test_what_is_not_a_results_file_is_one_line_naming_it(text, message):
    with pytest.raises(BadInput) as err:
        results.parse(text, "f.json")
    assert str(err.value).startswith(message) and "\n" not in str(err.value)
