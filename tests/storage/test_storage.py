"""Storage on local paths and on a real S3 endpoint (moto's server on 127.0.0.1)."""

from pathlib import Path

import pytest
from servers import moto_s3

from parathink import storage


@pytest.fixture(scope="module")
def s3():
    with moto_s3("bucket") as endpoint:
        yield endpoint


def _roots(tmp_path):
    return [str(tmp_path / "local"), "s3://bucket/" + tmp_path.name]


@pytest.mark.parametrize("kind", [0, 1], ids=["local", "s3"])
def test_write_read_list_remove(s3, tmp_path, kind):
    root = _roots(tmp_path)[kind]
    storage.write_text(storage.join(root, "a.txt"), "hello")
    storage.write_bytes(storage.join(root, "sub", "b.bin"), b"\x00\x01")
    assert storage.read_text(storage.join(root, "a.txt")) == "hello"
    assert storage.read_bytes(storage.join(root, "sub/b.bin")) == b"\x00\x01"
    assert storage.list_files(root) == ["a.txt", "sub/b.bin"]
    assert storage.exists(storage.join(root, "sub"))  # a prefix counts as existing
    assert not storage.exists(storage.join(root, "nope.txt"))
    storage.write_text(storage.join(root, "a.txt"), "again")  # overwrite
    assert storage.read_text(storage.join(root, "a.txt")) == "again"
    storage.remove_tree(root)
    assert storage.list_files(root) == []


@pytest.mark.parametrize("kind", [0, 1], ids=["local", "s3"])
def test_missing_file_error_names_uri(s3, tmp_path, kind):
    uri = storage.join(_roots(tmp_path)[kind], "missing.json")
    with pytest.raises(storage.StorageError, match="missing.json"):
        storage.read_text(uri)


def test_sync_up_and_down_with_manifest_last(s3, tmp_path):
    src = tmp_path / "src"
    (src / "model").mkdir(parents=True)
    (src / "model" / "w.bin").write_bytes(b"w" * 1000)
    (src / "_manifest.json").write_text("{}")
    (src / "z.txt").write_text("z")
    order = storage.upload_dir(src, "s3://bucket/run/stage", last=("_manifest.json",))
    assert order[-1] == "_manifest.json"
    dest = tmp_path / "dest"
    got = storage.download_dir("s3://bucket/run/stage", dest)
    assert sorted(got) == ["_manifest.json", "model/w.bin", "z.txt"]
    assert (dest / "model" / "w.bin").read_bytes() == b"w" * 1000
    assert not list(dest.rglob("*.part"))


def test_local_write_is_atomic_on_failure(tmp_path, monkeypatch):
    target = tmp_path / "f.txt"
    storage.write_text(target, "old")

    def boom(*a, **k):
        raise OSError("disk full")

    monkeypatch.setattr("os.replace", boom)
    with pytest.raises(OSError):
        storage.write_text(target, "new")
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["f.txt"]  # no temp file left behind


def test_bad_s3_uri():
    with pytest.raises(storage.StorageError, match="no bucket"):
        storage.read_bytes("s3:///key")


@pytest.mark.parametrize("key", ["climb/stage/../../../escape.txt", "climb/stage//abs/escape.txt"])
def test_a_key_that_climbs_out_of_its_folder_is_refused(s3, tmp_path, key):
    import boto3

    boto3.client("s3").put_object(Bucket="bucket", Key=key, Body=b"x")
    dest = tmp_path / "a" / "b" / "dest"
    try:
        with pytest.raises(storage.StorageError, match="escape.txt"):
            storage.download_dir("s3://bucket/climb/stage", dest)
    finally:
        boto3.client("s3").delete_object(Bucket="bucket", Key=key)
    assert not list(tmp_path.rglob("escape.txt")) and not Path("/abs/escape.txt").exists()


def test_local_writes_get_the_umask_s_permissions(tmp_path):
    import os

    mask = os.umask(0o022)
    try:
        storage.write_text(tmp_path / "run.json", "{}")
        (tmp_path / "plain.txt").write_text("x")
    finally:
        os.umask(mask)
    assert (tmp_path / "run.json").stat().st_mode & 0o777 == (tmp_path / "plain.txt").stat().st_mode & 0o777 == 0o644
