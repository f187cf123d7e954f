"""The stage cache shared across run directories (issue 43 item 3, docs/reliability.md "What is hashed and why").

The curriculum's plug-in stages (prep -> train -> tune, ``resume_stage.py``) append a line to ``calls`` each time
their code runs, which is how these tests see that a hit ran nothing. ``train`` and ``tune`` write random weights, so
an output hash that matches across two run directories can only be the cached output's.
"""

import json
import re
from pathlib import Path

import pytest

from parathink import storage
from parathink.pipeline import runner
from parathink.rundir.manifest import MANIFEST

STAGES = ["prep", "train", "tune"]


def hashes(run_dir) -> dict[str, str]:
    return {s: json.loads((Path(run_dir) / s / MANIFEST).read_text())["output_hash"] for s in STAGES}


def run_into(curriculum, run_dir, *extra) -> int:
    curriculum.run_dir = str(run_dir)
    return runner.main_run(curriculum.overrides(*extra))


def hits(err: str) -> dict[str, tuple[str, str]]:
    """{stage: (key, producing run directory)} from the log's cache-hit lines."""
    return {s: (k, d) for s, k, d in re.findall(r"\[parathink\] stage (\w+): cache hit from (\w+) \(produced by run "
                                                 r"([^)]+)\)", err)}


@pytest.fixture
def cache(tmp_path) -> str:
    return f"stage_cache={tmp_path / 'cache'}"


def test_a_second_run_directory_is_all_cache_hits(curriculum, tmp_path, cache, capsys):
    a, b = tmp_path / "a", tmp_path / "b"
    assert run_into(curriculum, a, cache) == 0
    assert curriculum.ran() == STAGES
    capsys.readouterr()

    assert run_into(curriculum, b, cache) == 0
    err = capsys.readouterr().err
    assert curriculum.ran() == STAGES  # no stage code ran for b
    assert hashes(b) == hashes(a)
    assert {s: d for s, (_, d) in hits(err).items()} == {s: str(a) for s in STAGES}, err
    assert (b / "tune" / "value.txt").read_text() == "19"
    m = json.loads((b / "train" / MANIFEST).read_text())
    assert m["origin"] == {"run_dir": str(a), "key": hits(err)["train"][0]}
    assert json.loads((a / "train" / MANIFEST).read_text())["origin"] is None  # made there
    assert {s: e["status"] for s, e in json.loads((b / "run.json").read_text())["stages"].items()} == \
           {s: "cached" for s in STAGES}

    # Published as if it had run: b's own up-to-date check skips them next time, and b's files are checked as b's.
    assert run_into(curriculum, b, cache) == 0
    assert "skipped (up to date)" in capsys.readouterr().err and curriculum.ran() == STAGES
    (b / "train" / "model" / "weights.bin").write_bytes(b"altered")
    assert run_into(curriculum, b, cache) == 0
    assert "stage train: cache hit" in capsys.readouterr().err and curriculum.ran() == STAGES
    assert hashes(b) == hashes(a)


def test_a_changed_config_key_or_seed_misses(curriculum, tmp_path, cache, capsys):
    assert run_into(curriculum, tmp_path / "a", cache) == 0
    capsys.readouterr()

    assert run_into(curriculum, tmp_path / "b", cache, "tune.steps=2") == 0
    err = capsys.readouterr().err
    assert set(hits(err)) == {"prep", "train"} and curriculum.ran() == [*STAGES, "tune"]
    assert "tune: running (no published output; not in the stage cache)" in err

    assert run_into(curriculum, tmp_path / "c", cache, "seed=5") == 0
    assert not hits(capsys.readouterr().err) and curriculum.ran() == [*STAGES, "tune", *STAGES]

    # What b and c stored is found by the next run directory with their settings.
    assert run_into(curriculum, tmp_path / "d", cache, "seed=5") == 0
    assert set(hits(capsys.readouterr().err)) == set(STAGES) and len(curriculum.ran()) == 7


def _entry(tmp_path, stage: str) -> Path:
    (entry,) = [p.parent for p in (tmp_path / "cache" / stage).glob(f"*/*/{MANIFEST}")]
    return entry


def test_a_damaged_entry_is_not_used_and_says_so(curriculum, tmp_path, cache, capsys):
    a, b = tmp_path / "a", tmp_path / "b"
    assert run_into(curriculum, a, cache) == 0
    (_entry(tmp_path, "prep") / "value.txt").write_text("4")  # same size, other bytes
    capsys.readouterr()

    assert run_into(curriculum, b, cache) == 0
    err = capsys.readouterr().err
    assert re.search(r"warning: stage cache entry \w+ of prep is not used \(value.txt not what its manifest says\); "
                     r"the stage runs", err), err
    assert curriculum.ran() == [*STAGES, "prep"] and (b / "prep" / "value.txt").read_text() == "3"
    # prep is deterministic: it ran again into the same hash, so train and tune, made from it, still hit.
    assert set(hits(err)) == {"train", "tune"} and hashes(b) == hashes(a)
    assert (_entry(tmp_path, "prep") / "value.txt").read_text() == "3"  # b's run replaced the damaged entry

    (_entry(tmp_path, "train") / MANIFEST).write_text("{not json")
    assert run_into(curriculum, tmp_path / "c", cache) == 0
    err = capsys.readouterr().err
    assert re.search(r"warning: stage cache entry \S+ is not used \(its manifest is damaged", err), err
    assert set(hits(err)) == {"prep"}  # train ran (random weights: a new hash), so tune's inputs are new too
    assert curriculum.ran()[4:] == ["train", "tune"]


def test_an_output_that_failed_its_gate_is_not_stored_and_a_hit_meets_this_run_s_gate(curriculum, tmp_path, cache,
                                                                                       capsys):
    gated = Path(__file__).with_name("gated_stage.py")

    def gate(min_value: int) -> tuple[str, ...]:  # train's value is 13
        return (cache, f"stage_modules.train={gated}", "+train.gate.enabled=true", f"+train.gate.min_value={min_value}",
                "+train.gate.crash=false")

    assert run_into(curriculum, tmp_path / "a", *gate(100)) == 3
    assert not (tmp_path / "cache" / "train").exists() and curriculum.ran() == ["prep", "train"]
    assert run_into(curriculum, tmp_path / "b", *gate(10)) == 0
    assert curriculum.ran() == ["prep", "train", "train", "tune"]  # prep: a hit
    capsys.readouterr()
    assert run_into(curriculum, tmp_path / "c", *gate(100)) == 3  # thresholds are not in the key: judged again
    err = capsys.readouterr().err
    assert set(hits(err)) == {"prep", "train"} and "value 13 < 100" in err and len(curriculum.ran()) == 4


def test_an_output_made_before_the_cache_was_set_is_stored_when_skipped(curriculum, tmp_path, cache, capsys):
    assert run_into(curriculum, tmp_path / "a") == 0
    assert run_into(curriculum, tmp_path / "a", cache) == 0
    assert curriculum.ran() == STAGES
    assert run_into(curriculum, tmp_path / "b", cache) == 0
    assert set(hits(capsys.readouterr().err)) == set(STAGES) and curriculum.ran() == STAGES


def test_an_s3_stage_cache(curriculum, tmp_path, capsys):
    from servers import moto_s3

    with moto_s3("cache"):
        store = "stage_cache=s3://cache/stages"
        assert run_into(curriculum, tmp_path / "a", store) == 0
        assert "prep/" in "".join(storage.list_files("s3://cache/stages"))
        capsys.readouterr()
        assert run_into(curriculum, tmp_path / "b", store) == 0
        assert set(hits(capsys.readouterr().err)) == set(STAGES) and curriculum.ran() == STAGES
        assert hashes(tmp_path / "b") == hashes(tmp_path / "a")


@pytest.mark.parametrize("where", ["s3://", "{tmp}/a-file/cache"])
def test_a_bad_stage_cache_is_one_line_before_any_stage(curriculum, tmp_path, capsys, where):
    (tmp_path / "a-file").write_text("")
    assert run_into(curriculum, tmp_path / "a", f"stage_cache={where.format(tmp=tmp_path)}") == 2
    err = capsys.readouterr().err.strip()
    assert "stage_cache" in err and len(err.splitlines()) == 1, err
    assert curriculum.ran() == [] and not (tmp_path / "a").exists()
