"""parathink.jsonl's reader: every JSONL file of the project read the same way, a bad line named as file:line."""

import pytest

from parathink import jsonl
from parathink.errors import BadInput
from parathink.stages.rl.gate import read_steps
from parathink.stages.sft import read_traces

CONTENT = b'{"a": 1}\r\n\n  \n[1]\n{"b": \n\xff\n{"c": "\\ud800"}\n'


def test_scan_a_file_and_the_same_bytes_alike(tmp_path):
    path = tmp_path / "x.jsonl"
    path.write_bytes(CONTENT)
    from_file = [str(i) if isinstance(i, jsonl.BadLine) else i for i in jsonl.scan(path)]
    from_bytes = [str(i) if isinstance(i, jsonl.BadLine) else i for i in jsonl.scan(CONTENT, str(path))]
    assert from_file == from_bytes == [
        (1, {"a": 1}),
        f"{path}:4: expected a JSON object, got list",
        f"{path}:5: not JSON (Expecting value at column 7)",
        f"{path}:6: not UTF-8 (invalid start byte at byte 0)",
        (7, {"c": "\ud800"}),  # valid JSON: whether a lone surrogate is usable is the reader's caller's call
    ]


def test_read_stops_at_the_first_bad_line_with_the_callers_error(tmp_path):
    class Mine(BadInput):
        pass

    path = tmp_path / "x.jsonl"
    path.write_bytes(CONTENT)
    rows = jsonl.read(path, error=Mine)
    assert next(rows) == (1, {"a": 1})
    with pytest.raises(Mine, match=r"x\.jsonl:4: expected a JSON object, got list$"):
        next(rows)


def test_the_stage_readers_name_file_and_line(tmp_path):
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_text('{"step": 1, "loss": 0.5}\n{"step": 2, "lo\n')
    with pytest.raises(BadInput, match=r"metrics\.jsonl:2: not JSON"):
        read_steps(metrics)
    assert read_steps(tmp_path / "absent.jsonl") == []
    accepted = tmp_path / "accepted.jsonl"
    accepted.write_bytes(b'{"id": "a"}\n\xfe\n')
    with pytest.raises(BadInput, match=r"^sft: .*accepted\.jsonl:2: not UTF-8"):
        read_traces(accepted)


@pytest.mark.parametrize("depth, bad", [(100, False), (101, True), (5_000, True), (200_000, True)])
def test_nesting_past_max_depth_is_a_bad_line_and_a_refused_object(depth, bad):
    line = b'{"a": ' + b"[" * (depth - 1) + b"]" * (depth - 1) + b"}"
    (item,) = jsonl.scan(line + b"\n", "x.jsonl")
    assert isinstance(item, jsonl.BadLine) is bad
    if bad:
        assert str(item) == "x.jsonl:1: refused: nested deeper than 100 levels (jsonl.MAX_DEPTH)"
        with pytest.raises(ValueError, match="nested deeper than 100"):
            jsonl.parse_object(line)
    else:
        assert jsonl.parse_object(line)["a"] is not None


def test_an_integer_past_the_digit_limit_is_a_bad_line():
    (item,) = jsonl.scan(b'{"n": ' + b"1" * 4301 + b"}\n", "x.jsonl")
    assert str(item) == "x.jsonl:1: refused: an integer of more than 4300 digits"
    (ok,) = jsonl.scan(b'{"n": ' + b"1" * 4300 + b"}\n", "x.jsonl")
    assert ok[1]["n"] > 10**4299


def test_depth_is_counted_without_recursion_and_brackets_in_strings_do_not_count():
    assert not jsonl.deeper_than({"s": "[" * 500}, 100, '{"s": "' + "[" * 500 + '"}')
    deep: list = []
    for _ in range(10_000):
        deep = [deep]
    assert jsonl.deeper_than(deep, 100)
