"""The trace filter: verdicts with every reason, one trace per problem, bad lines listed, Table-1 report."""

import json

from parathink.quality.traces import FilterConfig, build_report, filter_records, judge, read_raw

GOOD = "<Parallel>\n<Path>\n2 + 3 = 5\n\\boxed{5}\n</Path>\n<Path>\n3 + 2 = 5\n\\boxed{5}\n</Path>\n</Parallel>\n" \
       "<Summary>\nPaths give 5, 5.\n</Summary>\n\\boxed{5}"


def rec(response, answer="5", problem="Add 2 and 3.", **kw):
    return {"id": kw.pop("id", "p"), "source": kw.pop("source", "synthetic"), "problem": problem, "answer": answer,
            "response": response, **kw}


def test_reasons_cover_format_answer_and_length():
    cfg = FilterConfig(max_chars=500)
    assert judge(rec(GOOD), cfg).reasons == []
    assert judge(rec(GOOD, answer="6"), cfg).reasons == ["incorrect"]
    assert judge(rec("2 + 3 = 5\n\\boxed{5}"), cfg).reasons == ["no_block"]  # correct but sequential
    bad = judge(rec("<Parallel><Path>x</Path></Parallel><Summary>s</Summary>"), cfg)
    assert bad.reasons == ["format:too_few_paths", "no_answer"] and not bad.valid
    empty = judge(rec("<Parallel><Path> </Path><Path>x</Path></Parallel><Summary>s</Summary>\\boxed{5}"), cfg)
    assert "format:empty_path" in empty.reasons
    assert judge(rec(GOOD + " " * 600), cfg).reasons == ["too_long"]
    assert judge(rec(""), FilterConfig(min_chars=1)).reasons == ["no_block", "too_short"]  # not graded
    # A teacher that reached no vote (a tie): the last \\boxed{} is a path's, so the right answer does not count.
    tie = GOOD.replace("Paths give 5, 5.", "No majority.")[: -len("\n\\boxed{5}")]
    assert judge(rec(tie, vote=None), cfg).reasons == ["no_vote"]
    assert judge(rec(GOOD, vote="5"), cfg).reasons == [] and judge(rec("x", vote=None), cfg).reasons == [
        "no_block", "no_answer"]


def test_one_trace_per_problem_and_the_report(tmp_path):
    raw = tmp_path / "raw.jsonl"
    lines = [json.dumps(rec(GOOD, id="a", source="gsm8k", level=1)),
             json.dumps(rec(GOOD, id="b", source="gsm8k", problem="Add  2 and 3. ")),  # same problem, spaced
             json.dumps(rec(GOOD, id="c", answer="9", source="synthetic", problem="Other")),
             "this is not json",
             json.dumps({"id": "d", "problem": "q", "answer": "1"}),
             json.dumps(["a", "list"])]
    raw.write_bytes(("\n".join(lines) + "\n").encode() + b'{"id": "e", "problem": "\xff"}\n\n')
    result = filter_records(read_raw(raw), FilterConfig())
    assert [j.record["id"] for j in result.accepted] == ["a"]
    assert {j.record["id"]: j.reasons for j in result.rejected} == {"b": ["duplicate_problem"], "c": ["incorrect"]}
    assert [(b.line, b.why.split(" (")[0]) for b in result.bad_lines] == [
        (4, "not JSON"), (5, "missing field(s) response"), (6, "expected a JSON object, got list"), (7, "not UTF-8")]
    report = build_report(result, FilterConfig(), str(raw))
    assert report["lines"] == 7 and report["bad_lines"] == 4
    assert report["overall"]["records"] == 3 and report["overall"]["accepted"] == 1
    assert report["per_source"]["gsm8k"]["valid_rate"] == 1.0 and report["per_source"]["gsm8k"]["accepted_rate"] == 0.5
    assert report["per_source"]["synthetic"]["correct_rate"] == 0.0
    assert report["reasons"] == {"duplicate_problem": 1, "incorrect": 1}
    assert report["bad_line_list"][0] == {"file": str(raw), "line": 4, "why": report["bad_line_list"][0]["why"]}


def test_a_too_long_response_is_rejected_before_it_is_graded(monkeypatch):
    import parathink.scoring as scoring  # the filter grades on the one score path

    def never(*a, **k):
        raise AssertionError("a too-long response was graded")

    monkeypatch.setattr(scoring, "grade", never)
    assert judge(rec("\\boxed{" * 8000), FilterConfig(max_chars=4000)).reasons == ["no_block", "too_long"]


def test_wrong_answer_types_and_lone_surrogates_are_bad_lines_with_a_reason(tmp_path):
    raw = tmp_path / "raw.jsonl"
    lines = [json.dumps(rec(GOOD, answer=["5"])), json.dumps(rec(GOOD, answer=True)),
             json.dumps(rec(GOOD, answer={"v": 5})), json.dumps(rec(GOOD + "\ud800")),
             json.dumps(rec(GOOD, problem="Add \udfff.")), json.dumps(rec(GOOD, answer=5))]
    raw.write_text("\n".join(lines) + "\n")
    result = filter_records(read_raw(raw), FilterConfig())
    whys = [b.why for b in result.bad_lines]
    assert [b.line for b in result.bad_lines] == [1, 2, 3, 4, 5]
    assert "answer must be a string or a number, got list" in whys[0] and "got bool" in whys[1]
    assert "lone surrogate" in whys[3] and "response" in whys[3] and "problem" in whys[4]
    assert [j.accepted for j in result.judged] == [True]  # the integer answer is fine
