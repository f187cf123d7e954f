"""Input at fault gets one line on stderr and exit 2, before anything is created (issue 21)."""

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from servers import moto_s3

from parathink.pipeline import runner

PROBLEMS = "teacher.problems=[{source:synthetic,level:easy,split:train,n:%s%s}]"


def teacher(tmp_path, *extra) -> list[str]:
    return [f"run_dir={tmp_path / 'run'}", "tracking=none", "teacher.backend=scripted", PROBLEMS % (4, ""), *extra]


def one_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("parathink: error: "), err
    return err[0]


@pytest.mark.parametrize("override, needle", [
    ("teacher.limit=abc", "teacher.limit"),
    ("teacher.limit=-4", "teacher.limit"),
    ("teacher.limit=0", "teacher.limit"),
    ("seed=notanint", "seed"),
    (PROBLEMS % (-3, ""), "n"),
    (PROBLEMS % (0, ""), "n"),
    (PROBLEMS % ("1e9", ""), "n"),
    (PROBLEMS % (4, ",seed:abc"), "seed"),
    (PROBLEMS.replace("easy", "medium") % (4, ""), "medium"),
    ("tracking.backend=nope", "tracking.backend"),
    ("run_dir=s3://", "run_dir"),
    ("run_dir=s3:///prefix", "run_dir"),
])
def test_bad_values_are_one_line_and_exit_2(tmp_path, capsys, monkeypatch, override, needle):
    monkeypatch.chdir(tmp_path)
    assert runner.main_stage("teacher", teacher(tmp_path, override)) == 2
    assert needle in one_line(capsys)
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # nothing created: no run dir, no `s3:` folder


def test_a_run_dir_that_is_a_file_is_one_line(tmp_path, capsys):
    (tmp_path / "run").write_text("x")
    assert runner.main_stage("teacher", teacher(tmp_path)) == 2
    assert str(tmp_path / "run") in one_line(capsys)


def test_a_read_only_run_dir_is_one_line(tmp_path):
    """Run as an unprivileged user where this runs as root (root writes anywhere)."""
    base = Path(tempfile.mkdtemp(prefix="parathink-ro-"))
    try:
        base.chmod(0o755)
        run = base / "run"
        run.mkdir(mode=0o555)
        run.chmod(0o555)
        drop = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"] if os.geteuid() == 0 else []
        proc = subprocess.run([*drop, sys.executable, "-m", "parathink.cli", "stage", "teacher",
                               f"run_dir={run}", "tracking=none", "teacher.backend=scripted", PROBLEMS % (4, "")],
                              capture_output=True, text=True, cwd=base, timeout=300,
                              env=dict(os.environ, CI="true", HOME=str(base)))
        err = proc.stderr.strip().splitlines()
        assert proc.returncode == 2 and len(err) == 1 and str(run) in err[0], proc.stderr[-2000:]
    finally:
        subprocess.run(["rm", "-rf", str(base)], check=False)


def test_a_missing_bucket_is_one_line(tmp_path, capsys):
    with moto_s3("runs"):
        over = teacher(tmp_path, "run_dir=s3://no-such-bucket/x", f"cache_dir={tmp_path / 'cache'}")
        assert runner.main_stage("teacher", over) == 2
        assert "no-such-bucket" in one_line(capsys)


def test_a_config_that_fails_validation_leaves_no_mlflow_run(tmp_path, capsys, monkeypatch):
    from mlflow.tracking import MlflowClient
    from servers import sqlite_store

    monkeypatch.chdir(tmp_path)
    uri = sqlite_store(tmp_path / "mlflow.db")
    capsys.readouterr()  # the store's creation logs
    over = [f"run_dir={tmp_path / 'run'}", "tracking=sqlite", f"tracking.uri={uri}", "teacher.backend=scripted",
            PROBLEMS % (4, "")]
    for bad in ("seed=notanint", "run_dir=s3://"):
        assert runner.main_stage("teacher", [*over, bad]) == 2
        one_line(capsys)
    client = MlflowClient(tracking_uri=uri)
    runs = [r for e in client.search_experiments() for r in client.search_runs([e.experiment_id])]
    assert runs == [] and not (tmp_path / "run").exists() and not (tmp_path / "s3:").exists()


def test_promote_with_a_non_numeric_margin_is_one_line(tmp_path, capsys, monkeypatch):
    from parathink.pipeline.commands import main_promote

    monkeypatch.chdir(tmp_path)
    assert main_promote(["tracking.promote.margin=abc"]) == 2
    assert "tracking.promote.margin" in one_line(capsys)


@pytest.mark.parametrize("content", ["{not json", "[1, 2]", '{"stages": {"sft": []}}'])
def test_compare_on_a_malformed_results_json_prints_nothing_but_one_line(tmp_path, capsys, content):
    from parathink.pipeline.commands import main_compare

    good = {"stages": {"sft": {"hard": {"accuracy": 0.2, "pass_at_k": 0.4, "parallel_rate": 0.5,
                                        "relative_position": 0.3, "n": 10, "k": 1}}}}
    for name, text in (("a", json.dumps(good)), ("b", content)):
        (tmp_path / name / "eval").mkdir(parents=True)
        (tmp_path / name / "eval" / "results.json").write_text(text)
    assert main_compare([str(tmp_path / "a"), str(tmp_path / "b"), "--tracking-uri", "sqlite:///x.db"]) == 2
    captured = capsys.readouterr()
    err = captured.err.strip().splitlines()
    assert captured.out == "" and len(err) == 1 and str(tmp_path / "b") in err[0], captured


def _cli(*args, timeout=120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "parathink.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env=dict(os.environ, CI="true"))


def test_an_unreachable_mlflow_server_fails_fast_naming_the_uri(tmp_path):
    from servers import free_port

    uri = f"http://127.0.0.1:{free_port()}"
    for args in (["stage", "teacher", f"run_dir={tmp_path / 'run'}", "tracking=server", f"tracking.uri={uri}",
                  "teacher.backend=scripted", PROBLEMS % (4, "")],
                 ["promote", f"tracking.uri={uri}"]):
        proc = _cli(*args)
        err = proc.stderr.strip().splitlines()
        assert proc.returncode != 0 and len(err) == 1 and uri in err[0], proc.stderr[-2000:]
        assert "no version or alias" not in proc.stderr
    assert not (tmp_path / "run").exists()
