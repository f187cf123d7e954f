"""parathink.rundir.timings: what a run measured goes beside its output, outside the output hash."""

from parathink.rundir import timings
from parathink.rundir.manifest import tree_hashes


def test_split_keeps_the_content_and_takes_out_the_named_keys():
    content, timed = timings.split({"step": 3, "reward_mean": 0.5, "rollout_s": 1.2, "tokens_per_s": 90.0},
                                   ("rollout_s", "update_s", "tokens_per_s"))
    assert content == {"step": 3, "reward_mean": 0.5}
    assert timed == {"rollout_s": 1.2, "tokens_per_s": 90.0}  # a key the record lacks is not made up


def test_write_keeps_the_sections_of_other_writers(tmp_path):
    timings.write(tmp_path, filter_seconds=0.25)
    timings.write(tmp_path, steps=[{"step": 1, "rollout_s": 2.0}])
    assert timings.read(tmp_path) == {"filter_seconds": 0.25, "steps": [{"step": 1, "rollout_s": 2.0}]}


def test_an_absent_or_damaged_file_reads_as_empty(tmp_path):
    assert timings.read(tmp_path) == {}
    (tmp_path / timings.TIMINGS).write_text("[1, 2")
    assert timings.read(tmp_path) == {}


def test_the_output_hash_leaves_the_timings_out(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    for folder, seconds in ((a, 0.1), (b, 7.5)):
        (folder / "model").mkdir(parents=True)
        (folder / "model" / "weights.bin").write_bytes(b"\x00\x01")
        timings.write(folder, filter_seconds=seconds)
    (ha, files), (hb, _) = tree_hashes(a), tree_hashes(b)
    assert ha == hb and list(files) == ["model/weights.bin"]
    (b / "model" / "weights.bin").write_bytes(b"\x00\x02")
    assert tree_hashes(b)[0] != ha  # the content still counts
