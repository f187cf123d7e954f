"""Every input bounded, every failure one line (issue 48 item 5): a corpus of bad command lines, each refused with
exit 2, exactly one line on stderr and nothing written in the working directory; and the README's own commands parse
with their options before or after the overrides.

Each case is cheap: a refusal by the config's one validation rule (``plan``, ``run``: before any stage is imported),
by the command line, or by a reader's first line. One case goes as far as a real run's checks before its first
stage (the SQLite store that cannot be created), to show that no lock is taken and no folder made.
"""

import re
import shlex
from pathlib import Path

import pytest

from parathink import cli

README = Path(__file__).resolve().parents[2] / "README.md"
DEEP = b'{"response": ' + b"[" * 100_000 + b"]" * 100_000 + b"}\n"
BIG_INT = b'{"response": "x", "answer": ' + b"9" * 5000 + b"}\n"

# (argv, what the one line must contain); INPUTS/ stands for a folder of input files outside the working directory.
CASES = [
    # seeds: [0, 2^32)
    (["plan", "seed=99999999999999999999"], "config: seed: must be an integer in [0, 4294967295], got 9999"),
    (["plan", "seed=4294967296"], "config: seed: must be an integer in [0, 4294967295]"),
    (["plan", "seed=-1"], "config: seed: must be an integer in [0, 4294967295], got -1"),
    (["plan", "model.init_seed=5000000000"], "config: model.init_seed: must be an integer in [0, 4294967295]"),
    # finite floats, for every float field (one rule: config_fields.violation)
    (["plan", "sft.lr=nan"], "config: sft.lr: must be a finite number, got nan"),
    (["plan", "sft.lr=inf"], "config: sft.lr: must be a finite number, got inf"),
    (["plan", "rl_hard.lr=-inf"], "config: rl_hard.lr: must be a finite number"),
    (["plan", "sft.warmup_ratio=nan"], "config: sft.warmup_ratio: must be a number in [0, 1], got nan"),
    (["plan", "eval.sampling.top_p=nan"], "config: eval.sampling.top_p: must be a number in (0, 1], got nan"),
    # upper bounds no GPU could meet anyway
    (["plan", "sft.max_steps=100000000000000000000"], "config: sft.max_steps: must be an integer <= 100000000"),
    (["plan", "teacher.limit=10000000000"], "config: teacher.limit: must be an integer in [1, 1000000000] or null"),
    (["plan", "eval.sampling.max_new_tokens=100000000000000000000"],
     "config: eval.sampling.max_new_tokens: must be an integer in [1, 16777216]"),
    (["plan", "eval.sampling.max_new_tokens=1e20"], "config: eval.sampling.max_new_tokens: must be an integer"),
    (["plan", "base.max_steps=10000000000000"], "config: base.max_steps: must be an integer, within ±10^12"),
    # stages
    (["plan", "stages=[]"], "config: stages: must name at least one stage, got []"),
    (["plan", "stages=[base,base]"], "config: stages: names 'base' more than once"),
    (["run", "stages=[base,teacher,base]"], "config: stages: names 'base' more than once"),
    # where the run goes
    (["plan", "run_dir=http://127.0.0.1:9/y"], "config: run_dir: must be a local path or an s3:// URI, got 'http://"),
    (["run", "run_dir=ftp://host/y"], "config: run_dir: must be a local path or an s3:// URI"),
    (["plan", "stage_cache=https://cache/x"], "config: stage_cache: must be a local path or an s3:// URI"),
    (["plan", "cache_dir=s3://bucket/c"], "config: cache_dir: must be a local path"),
    # the tracking store: exit 2 before any lock is taken
    (["plan", "tracking.uri=ftp://x"], "config: tracking.uri: 'ftp://x' is not a store MLflow tracks to"),
    (["run", "tracking.uri=ftp://user:hunter2@x"], "config: tracking.uri: 'ftp://***@x' is not a store"),
    (["run", "stages=[base]", "tracking.uri=sqlite:////proc/parathink-x.db"],
     "tracking.uri sqlite:////proc/parathink-x.db: the SQLite store cannot be created in /proc"),
    # readers: nesting and integer length are rejected records
    (["score", "INPUTS/deep.jsonl"], "deep.jsonl:1: refused: nested deeper than 100 levels"),
    (["score", "INPUTS/big_int.jsonl", "--scheme", "accuracy"], "big_int.jsonl:1: refused: an integer of more than "
                                                                 "4300 digits"),
    (["score", "INPUTS/absent.jsonl"], "absent.jsonl: no such file"),
    (["data", "describe", "{source: [a]}"], "'source' must be a string"),
    (["data", "describe", "{source: " + "[" * 3000 + "]" * 3000 + "}"], "refused, nested deeper than 100 levels"),
    (["data", "describe", "{source: synthetic, n: " + "9" * 5000 + "}"], "refused, it holds a number"),
    (["data", "describe", "{source: verl, uri: INPUTS/deep.jsonl}"], "deep.jsonl:1: refused: nested deeper than"),
    # unlock
    (["unlock", "INPUTS/no-such-run", "base"], "unlock: run directory"),
    (["unlock", "INPUTS/run", "sfft"], "unlock: INPUTS/run has no lock, output or scratch of stage 'sfft'"),
    (["unlock", "INPUTS/run", "../x"], "unlock: stage '../x': not a stage name"),
    (["unlock", "INPUTS/run", "base", ".."], "unlock: stage '..': not a stage name"),
    # the command line itself
    (["score"], "parathink score: error: the following arguments are required: input"),
    (["nosuch"], "parathink: error: argument command: invalid choice: 'nosuch'"),
    (["score", "INPUTS/deep.jsonl", "--step", "two"], "argument --step: invalid int value: 'two'"),
    (["unlock", "INPUTS/run"], "the following arguments are required: STAGE"),
    (["plan", "--form", "--help"], "form override '--help': not a key=value"),  # the form's, never plan's help
]


@pytest.fixture
def inputs(tmp_path) -> Path:
    where = tmp_path / "inputs"
    (where / "run" / ".locks").mkdir(parents=True)
    (where / "run" / ".locks" / "base.lock").write_text("")
    (where / "deep.jsonl").write_bytes(DEEP)
    (where / "big_int.jsonl").write_bytes(BIG_INT)
    return where


def files(where: Path) -> list[str]:
    return sorted(p.relative_to(where).as_posix() for p in where.rglob("*"))


@pytest.mark.parametrize("argv, needle", CASES, ids=[" ".join(a)[:60] for a, _ in CASES])
def test_a_bad_input_is_one_line_exit_2_and_nothing_written(tmp_path, monkeypatch, capsys, inputs, argv, needle):
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    monkeypatch.setenv("CI", "true")
    argv = [a.replace("INPUTS/", f"{inputs}/") for a in argv]
    before = files(inputs)
    code = cli.main(argv)
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert code == 2, err
    assert len(lines) == 1 and "Traceback" not in err, lines
    assert needle.replace("INPUTS/", f"{inputs}/") in lines[0], lines[0]
    assert re.match(r"parathink( \w+)?: (error|quality gate failed): ", lines[0]) or lines[0].startswith(
        "parathink data: error: "), lines[0]
    assert files(cwd) == [] and files(inputs) == before  # no run directory, no lock, no MLflow store, no output


@pytest.fixture(autouse=True)
def _system_exit_is_a_code(monkeypatch):
    """``cli.main`` returning the code argparse exits with, so that the table reads one way."""
    real = cli.main

    def main(argv):
        try:
            return real(argv)
        except SystemExit as e:
            return e.code
    monkeypatch.setattr(cli, "main", main)


# ---------------------------------------------------------------- options before or after the overrides

def readme_commands() -> list[list[str]]:
    """Every ``parathink ...`` command the README shows: the bash block's lines and the inline ones."""
    text = README.read_text()
    found = re.findall(r"^parathink [^#\n]*", text, flags=re.M) + re.findall(r"`(parathink [^`]+)`", text)
    commands = [shlex.split(c)[1:] for c in found]
    return [c for c in commands if c and c[0] != "teaches"]


def test_every_readme_command_parses():
    commands = readme_commands()
    assert ["promote", "--rollback", "NAME", "--why", "..."] in commands and len(commands) >= 12
    for argv in commands:
        args = cli.parse(argv)
        assert args.command == argv[0]
        if argv[0] in cli.OWN_ARGUMENTS:
            assert args.overrides == argv[1:], argv  # every word reaches the subcommand's own parser, in order


@pytest.mark.parametrize("argv, overrides", [
    (["promote", "--rollback", "NAME", "--why", "by hand", "tracking=none"],
     ["--rollback", "NAME", "--why", "by hand", "tracking=none"]),
    (["compare", "--rows", "A", "B"], ["--rows", "A", "B"]),
    (["compare", "A", "B", "--rows"], ["A", "B", "--rows"]),
    (["plan", "--form", "format=npr"], ["--form", "format=npr"]),
    (["plan", "experiment=tiny", "--form", "format=npr"], ["experiment=tiny", "--form", "format=npr"]),
    (["kfp", "compile", "--output", "p.yaml", "experiment=tiny"], ["compile", "--output", "p.yaml", "experiment=tiny"]),
    (["run", "seed=1"], ["seed=1"]),
])
def test_options_go_before_or_after_the_overrides(argv, overrides):
    assert cli.parse(argv).overrides == overrides


def test_compare_with_its_option_first_reaches_its_own_check(tmp_path, monkeypatch, capsys):
    """Was ``unrecognized arguments: --rows``; now compare itself reads the runs."""
    monkeypatch.chdir(tmp_path)
    assert cli.main(["compare", "--rows", str(tmp_path / "A"), str(tmp_path / "B")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no eval/results.json" in err[0] and "unrecognized" not in err[0], err


def test_plan_with_form_first_holds_the_form_to_its_allowlist(tmp_path, monkeypatch, capsys):
    """Was ``unrecognized arguments: --form``; now the form's check answers (seed is not on the allowlist)."""
    monkeypatch.chdir(tmp_path)
    assert cli.main(["plan", "--form", "seed=1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "form override 'seed=1'" in err[0], err


@pytest.mark.parametrize("argv, usage", [
    (["plan", "--help"], "usage: parathink plan"), (["run", "seed=1", "-h"], "usage: parathink run"),
    (["kfp", "--help"], "usage: parathink kfp"), (["kfp", "compile", "--help"], "usage: parathink kfp compile"),
    (["promote", "--help"], "--rollback NAME"), (["compare", "--help"], "--rows"),
])
def test_help_still_answers(capsys, argv, usage):
    assert cli.main(argv) == 0
    assert usage in capsys.readouterr().out
