"""The append-only store that makes every teacher backend resumable."""

import json

from parathink.teacher.store import RawStore


def test_resume_drops_a_torn_line_and_never_duplicates(tmp_path):
    path = tmp_path / "raw.jsonl"
    with RawStore(path) as store:
        for i in range(3):
            store.append({"id": f"p{i}", "response": f"r{i}"})
        store.append({"id": "p1", "response": "again"})  # a backend repeating an id
    # A kill in the middle of a write leaves half a line behind.
    with path.open("a", encoding="utf-8") as f:
        f.write('{"id": "p3", "resp')
    store = RawStore(path)
    assert store.torn_lines == 1 and len(store) == 3 and "p3" not in store
    store.append({"id": "p3", "response": "r3"})
    store.close()
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [r["id"] for r in lines] == ["p0", "p1", "p2", "p3"]
    assert lines[1]["response"] == "r1"
    problems = [{"id": "p3"}, {"id": "p0"}, {"id": "missing"}]
    assert [r["id"] for r in RawStore(path).ordered(problems)] == ["p3", "p0"]
