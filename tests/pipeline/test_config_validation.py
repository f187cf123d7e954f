"""One rule for every key of the composed config (parathink.pipeline.schema, issue 43 item 1): an unknown key, a wrong
type or a value out of bounds, in any stage section or config group, is one line naming the full key, exit 2, before
anything runs.

The walks below go over RootConfig's fields, and every top-level key of every composition is one of them (a key that
is not is itself refused), so a new group or stage section is walked as soon as it exists.
"""

import copy
import dataclasses
import subprocess
import sys
import typing

import pytest
from omegaconf import OmegaConf

from parathink import cli
from parathink.config.fields import optional_of, requirement
from parathink.errors import BadInput, ConfigError
from parathink.pipeline import runner, schema
from parathink.pipeline.compose import compose, config_dir
from parathink.pipeline.schema import GROUPS, RootConfig
from parathink.placement import cluster

BASE = compose([])
VALUES = OmegaConf.to_container(BASE)
# Numbers any value of which is meaningful (a seed, an "off" below zero, a floor on a reward that can be negative).
UNBOUNDED = {"base.tokenizer_corpus_seed", "sft.path_replay.seed", "sft.vote_replay.seed",
             "sft.grad_clip", "sft.max_steps",  # <= 0: no clipping; -1: the epochs decide
             "tracking.promote.margin"} | {f"{rl}.{key}" for rl in ("rl_easy", "rl_hard", "rl_scaffold", "grpo_baseline")
                                           for key in ("grad_clip", "gate.min_probe_reward")}


def walk(schema: type = RootConfig, prefix: str = ""):
    """(key, type, field, the class that declares it) of every field of the schema, nested sections included."""
    hints = typing.get_type_hints(schema)
    for f in dataclasses.fields(schema):
        key, base = f"{prefix}{f.name}", optional_of(hints[f.name])[0]
        yield key, hints[f.name], f, schema
        if dataclasses.is_dataclass(base):
            yield from walk(base, f"{key}.")


def present(key: str) -> bool:
    return OmegaConf.select(BASE, key, default=None) is not None


def once_per_declaration(rows):
    """A field declared once and used by several sections (RLConfig's, by the four RL stages) is walked at the
    first of them: the rule is the declaration's."""
    seen = set()
    for key, hint, f, owner in rows:
        if (owner, f.name) not in seen:
            seen.add((owner, f.name))
            yield key, hint, f


SECTIONS = [""] + [k for k, hint, _, _ in walk() if dataclasses.is_dataclass(optional_of(hint)[0]) and present(k)]
WRONG = {bool: "maybe", int: "many", float: "lots", str: {"not": "a string"}, list: "not-a-list",
         tuple: "not-a-list", dict: "not-a-mapping"}  # a value of another type, by the field's type


def _wrong(hint):
    base = optional_of(hint)[0]
    return WRONG.get(typing.get_origin(base) or base)  # None: the field takes any value


LEAVES = list(once_per_declaration(row for row in walk() if not dataclasses.is_dataclass(optional_of(row[1])[0])))
TYPED = [(k, hint, f) for k, hint, f in LEAVES if _wrong(hint) is not None]
BOUNDED = [(k, hint, f) for k, hint, f in LEAVES if set(f.metadata) & {"bounds", "above", "choices"}]
NUMBERS = [k for k, hint, _ in LEAVES if optional_of(hint)[0] in (int, float) and present(k)]


def with_value(key: str, value) -> OmegaConf:
    """The default composition with ``key`` set to ``value`` as a '+' override would add it: untyped."""
    values = copy.deepcopy(VALUES)
    *parents, last = key.split(".")
    node = values
    for name in parents:
        node = node[name]
    node[last] = value
    return OmegaConf.create(values)


def refusal(cfg) -> str:
    with pytest.raises(ConfigError) as e:
        schema.check(cfg)
    line = str(e.value)
    assert "\n" not in line and line.startswith("config: "), line
    return line


def test_every_top_level_key_of_every_group_option_and_experiment_is_in_the_schema():
    fields = {f.name for f in dataclasses.fields(RootConfig)}
    assert set(BASE) == fields
    for group in (*GROUPS, "experiment"):
        for option in sorted(p.stem for p in (config_dir() / group).glob("*.yaml")):
            assert set(compose([f"{group}={option}"])) == fields, (group, option)  # compose checks the schema


@pytest.mark.parametrize("section", SECTIONS)
def test_an_unknown_key_in_any_section_names_its_full_key(section):
    key = f"{section}.bogus_key" if section else "bogus_key"
    assert refusal(with_value(key, 1)).startswith(f"config: unknown config key '{key}' (")


@pytest.mark.parametrize("key, hint, f", TYPED, ids=[k for k, _, _ in TYPED])
def test_a_wrong_type_anywhere_names_the_key_and_what_it_must_be(key, hint, f):
    wrong = _wrong(hint)
    assert refusal(with_value(key, wrong)) == f"config: {key}: must be {requirement(hint, f)}, got {wrong!r}"


def _outside(f: dataclasses.Field, base: type):
    meta = f.metadata
    if "choices" in meta:
        return "not-a-choice"
    low, high = meta.get("bounds", (None, None))
    if high is not None:
        return high + 1
    step = 1 if base is int else 0.5
    return low - step if low is not None else meta["above"]


@pytest.mark.parametrize("key, hint, f", BOUNDED, ids=[k for k, _, _ in BOUNDED])
def test_a_value_outside_a_field_s_bounds_names_the_key_and_the_bounds(key, hint, f):
    value = _outside(f, optional_of(hint)[0])
    line = refusal(with_value(key, value))
    assert line.startswith(f"config: {key}: must be {requirement(hint, f)}, got "), line


def test_the_walks_reach_every_group_and_stage():
    tops = {k.split(".")[0] for k in SECTIONS[1:]}
    assert {k.split(".")[0] for k, _, _ in LEAVES} == {f.name for f in dataclasses.fields(RootConfig)} - {
        "rl_hard", "rl_scaffold", "grpo_baseline"}  # rl_easy's walk is theirs (RLConfig)
    assert tops == {f.name for f in dataclasses.fields(RootConfig)
                    if dataclasses.is_dataclass(typing.get_type_hints(RootConfig)[f.name])}
    assert {k.split(".")[0] for k, _, _ in BOUNDED} >= {"model", "cluster", "tracking", "seed", "format", "sft",
                                                         "base", "teacher", "filter", "eval", "rl_easy"}


@pytest.mark.parametrize("key", [k for k in NUMBERS if k not in UNBOUNDED])
def test_a_large_negative_number_is_refused_before_any_stage_runs(key):
    """Where the schema declares no bound the stage's own check does (``validate``, before the first stage):
    a number field with neither is an oversight unless UNBOUNDED lists it."""
    cfg = with_value(key, -10**6 if isinstance(OmegaConf.select(BASE, key), int) else -1e6)
    top = key.split(".")[0]
    with pytest.raises((ConfigError, BadInput)) as e:
        schema.check(cfg)
        runner.validate(cfg, [top] if top not in GROUPS and "." in key else [str(s) for s in cfg.stages])
    assert key in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("key, value", [("sft.lrr", 1), ("sft.lr", "abc"), ("rl_hard.gate.windw", 3)])
def test_hydra_s_refusal_and_the_schema_s_are_the_same_line(key, value):
    """A key Hydra refuses itself (a section with a schema, no '+') and the same key as '+' or untyped adds it."""
    with pytest.raises(ConfigError) as e:
        compose([f"{key}={value}"])
    assert str(e.value) == refusal(with_value(key, value))


def test_a_plug_in_stage_s_section_is_its_module_s_to_check():
    compose(["+stage_modules.mine=tests/stages/resume_stage.py", "+mine.anything=1"])
    compose(["+stage_modules.base=tests/stages/resume_stage.py", "+base.steps=2"])  # a replaced stage's too
    with pytest.raises(ConfigError, match=r"^config: unknown config key 'mine' \(not a stage"):
        compose(["+mine.anything=1"])


def test_a_stage_override_for_a_stage_that_does_not_exist_is_refused():
    with pytest.raises(ConfigError, match=r"^config: unknown config key 'cluster\.stage_overrides\.sfft' "):
        compose(["cluster=gpu", "+cluster.stage_overrides.sfft.nodes=2"])


def test_the_schema_s_lists_are_the_code_s():
    from parathink.modeling.factory import _DTYPES

    assert set(schema.DTYPES) == set(_DTYPES)
    assert {f.name for f in dataclasses.fields(schema.ClusterProfile)} == cluster.PROFILE_KEYS
    assert schema.TRACKING_BACKENDS == runner.TRACKING_BACKENDS


ISSUE_KEYS = ["sft", "eval", "filter", "teacher", "gates", "rl_hard"]  # issue 43's bar


@pytest.mark.parametrize("command", [["run"], ["stage", "sft"], ["plan"]])
@pytest.mark.parametrize("section", ISSUE_KEYS)
def test_the_cli_refuses_a_bogus_key_in_one_line_with_exit_2(tmp_path, monkeypatch, capsys, command, section):
    monkeypatch.chdir(tmp_path)
    assert cli.main([*command, f"run_dir={tmp_path / 'run'}", f"+{section}.bogus=1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    key = "gates" if section == "gates" else f"{section}.bogus"
    assert len(err) == 1 and err[0].startswith(f"parathink: error: config: unknown config key '{key}' ("), err
    assert list(tmp_path.iterdir()) == []  # nothing ran: no run directory, no MLflow store


@pytest.mark.parametrize("args, line", [
    (["run", "+sft.bogus=1"], "parathink: error: config: unknown config key 'sft.bogus' (sft takes: "),
    (["stage", "rl_hard", "rl_hard.lr=-1"], "parathink: error: rl_hard.lr=-1.0: must be > 0"),
    (["plan", "+gates.bogus=1"], "parathink: error: config: unknown config key 'gates' (not a stage"),
    (["plan", "sft.warmup_ratio=1.5"], "parathink: error: config: sft.warmup_ratio: must be a number in [0, 1], "
                                       "got 1.5"),
])
def test_the_installed_command_in_a_subprocess(tmp_path, args, line):
    proc = subprocess.run([sys.executable, "-m", "parathink.cli", *args, f"run_dir={tmp_path / 'run'}"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().startswith(line) and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert proc.stdout == "" and not (tmp_path / "run").exists()


# ---------------------------------------------------------------- the rules every field keeps (issue 48 item 5)

FLOATS = [(k, hint, f) for k, hint, f in LEAVES if optional_of(hint)[0] is float]
INTS = [(k, hint, f) for k, hint, f in LEAVES if optional_of(hint)[0] is int]


def test_no_float_field_takes_nan_or_infinity_and_no_int_field_a_number_past_the_ceiling():
    """The rule is ``config.fields.violation``'s, so it holds for a field whatever bounds it declares (or none)."""
    from parathink.config.fields import INT_CEILING, violation

    assert len(FLOATS) > 20 and len(INTS) > 50
    for key, _, f in FLOATS:
        for bad in (float("nan"), float("inf"), float("-inf")):
            assert violation(f, bad), (key, bad)
    for key, _, f in INTS:
        assert violation(f, INT_CEILING + 1) and violation(f, 10**20), key


@pytest.mark.parametrize("key, value, line", [
    ("sft.lr", float("nan"), "config: sft.lr: must be a finite number, got nan"),
    ("sft.epochs", float("inf"), "config: sft.epochs: must be a finite number > 0, got inf"),
    ("seed", 10**20, "config: seed: must be an integer in [0, 4294967295], got 100000000000000000000"),
    ("seed", 2**32, "config: seed: must be an integer in [0, 4294967295], got 4294967296"),
    ("model.init_seed", -1, "config: model.init_seed: must be an integer in [0, 4294967295], got -1"),
    ("sft.max_steps", 10**20, "config: sft.max_steps: must be an integer <= 100000000, got 100000000000000000000"),
    ("teacher.limit", 10**10, "config: teacher.limit: must be an integer in [1, 1000000000] or null, got 10000000000"),
    ("eval.sampling.max_new_tokens", 10**20, "config: eval.sampling.max_new_tokens: must be an integer in "
                                             "[1, 16777216], got 100000000000000000000"),
    ("base.max_steps", 10**13, "config: base.max_steps: must be an integer, within ±10^12 "
                               "(config_fields.INT_CEILING), got 10000000000000"),
])
def test_the_issue_s_values_are_refused_in_one_line(key, value, line):
    assert refusal(with_value(key, value)) == line


def test_the_largest_seed_is_accepted():
    schema.check(with_value("seed", 2**32 - 1))
