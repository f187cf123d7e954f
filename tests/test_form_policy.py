"""`parathink plan --form ...`: what the DAG's first task runs on the worker, with the trigger form's overrides held to
hydra_conf/form_allowlist.yaml before anything is composed or imported; the command line keeps its full power."""

import json
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from parathink import cli, form_policy
from parathink.errors import ConfigError

TRUSTED = ["experiment=parallel_r1_seen", "run_dir=s3://parathink/runs/t", "stages=[teacher]"]


@pytest.fixture
def module_file(tmp_path):
    """A stage module that leaves a mark when imported (the issue's `+stage_modules.teacher=/tmp/x.py`)."""
    mark = tmp_path / "executed"
    path = tmp_path / "x.py"
    path.write_text(f"open({str(mark)!r}, 'w').close()\ndef run(ctx):\n    pass\n")
    return path, mark


def _plan(capsys, *args):
    code = cli.main(["plan", *args])
    out, err = capsys.readouterr()
    return code, out, err.strip().splitlines()


def test_a_stage_module_from_the_form_is_refused_and_never_imported(module_file, capsys):
    path, mark = module_file
    code, out, err = _plan(capsys, *TRUSTED, "--form", f"+stage_modules.teacher={path}")
    assert code == 2 and out == "" and not mark.exists()
    assert err == [f"parathink: error: form override '+stage_modules.teacher={path}': it sets stage_modules.teacher, "
                   "which the trigger form may not set (hydra_conf/form_allowlist.yaml, docs/airflow.md; an operator "
                   "widens the list with PARATHINK_FORM_ALLOW)"]


def test_the_command_line_keeps_its_full_power(module_file, capsys):
    path, mark = module_file
    code, out, _ = _plan(capsys, *TRUSTED, f"+stage_modules.teacher={path}")
    assert code == 0 and mark.exists()  # a user at a shell owns the machine


@pytest.mark.parametrize("override, key", [
    ("cluster.image=evil/img:latest", "it sets cluster.image"),
    ("cluster.service_account=cluster-admin", "it sets cluster.service_account"),
    ("+cluster.secrets.X={secret: other, key: token}", "it sets cluster.secrets.X"),
    ("cluster.node_pool.tolerations=[{operator: Exists}]", "it sets cluster.node_pool.tolerations"),
    ("tracking.uri=http://evil:5000", "it sets tracking.uri"),
    ("hydra.job.chdir=true", "it sets hydra.job.chdir"),
    ("teacher.vllm={model: evil/weights}", "it changes teacher.vllm.model"),
    ("teacher.openai={base_url: 'http://evil', api_key_env: AWS_SECRET_ACCESS_KEY}", "it changes teacher.openai."),
    ("sft.lr=${oc.env:AWS_SECRET_ACCESS_KEY}", "interpolations"),
])
def test_placement_secrets_endpoints_and_models_are_refused_naming_the_key(override, key, capsys):
    code, out, err = _plan(capsys, *TRUSTED, "--form", override)
    assert code == 2 and out == "" and len(err) == 1 and key in err[0] and repr(override) in err[0], err


def test_what_a_researcher_tunes_passes_and_reaches_the_plan(capsys):
    code, out, _ = _plan(capsys, *TRUSTED, "--form", "teacher.vllm.temperature=0.6", "tracking=none", "sft.lr=2e-5")
    assert code == 0 and json.loads(out)["tracking"]["backend"] == "none"


def test_an_operator_widens_the_list_through_the_deployment(monkeypatch, capsys):
    monkeypatch.setenv(form_policy.WIDEN_ENV, "cluster.image, teacher.vllm.model")
    code, out, _ = _plan(capsys, *TRUSTED, "--form", "cluster.image=mine/trainer:2", "teacher.vllm.model=org/m")
    assert code == 0 and json.loads(out)["placement"]["teacher"]["image"] == "mine/trainer:2"
    code, _, err = _plan(capsys, *TRUSTED, "--form", "cluster.service_account=other")
    assert code == 2 and "it sets cluster.service_account" in err[0]


# ---------------------------------------------------------------------------------------------- issue 48: the corpus

SECRET = "hunter2-form-secret"
_FUZZ_POLICY = (form_policy.load(), form_policy.config_groups())


@pytest.fixture
def evil_group_file(tmp_path, module_file):
    """The issue's traversal: a YAML file outside hydra_conf/data/ that, chosen as the data group, sets the module
    `plan` imports (module_file leaves a mark when imported)."""
    path, _ = module_file
    evil = tmp_path / "evil.yaml"
    evil.write_text(f"# @package _global_\nstage_modules:\n  base: {path}\n"
                    "data: {name: synthetic, cold_start: [{source: synthetic, level: easy, split: train, n: 4}]}\n")
    return "../" * 12 + str(evil.with_suffix(""))[1:]  # relative to hydra_conf/data/, up to / and down again


# (form overrides, what the one line says). {evil}: the traversal above; {module}: the marking module.
CORPUS = [
    # group choices: a name of the group's own folder, nothing else
    (["data={evil}"], "is not the name of a file of hydra_conf/data/"),
    (["data=/{evil}"], "is not the name of a file of hydra_conf/data/"),
    (["tracking=../data/gsm8k"], "is not the name of a file of hydra_conf/tracking/"),
    (["data=GSM8K"], "is not the name of a file of hydra_conf/data/"),
    (["+data=gsm8k"], "is chosen as data=NAME"),
    (["data@sft=gsm8k"], "not a key=value (or ~key) override whose key is a dotted name"),
    (["stage@sft=rl"], "not a key=value (or ~key) override whose key is a dotted name"),
    (["stage/x=rl"], "not a key=value (or ~key) override whose key is a dotted name"),
    (["experiment=npr"], "chooses a file of the config group experiment"),
    (["model=qwen3_4b_base"], "chooses a file of the config group model"),
    (["cluster=gpu"], "chooses a file of the config group cluster"),
    # code to import, placement, hydra itself
    (["+stage_modules.base={module}"], "it sets stage_modules.base"),
    (["++stage_modules.teacher={module}"], "it sets stage_modules.teacher"),
    (["~stage_modules="], "it sets stage_modules"),
    (["~stage_modules"], "it sets stage_modules"),
    (["~data"], "is chosen as data=NAME"),
    (["~teacher.vllm"], "cannot be removed"),  # the schema refuses it while composing with the form
    (["hydra.searchpath=[file:///tmp]"], "it sets hydra.searchpath"),
    (["hydra.job.chdir=true"], "it sets hydra.job.chdir"),
    (["\uff53tage_modules.base=x"], "not a key=value (or ~key) override whose key is a dotted name"),  # a fullwidth 's'
    (["sft.lr=1e-5\nstage_modules.base=x"], "not a key=value (or ~key) override"),
    (["sft.lr"], "not a key=value (or ~key) override"),
    # the environment, in any spelling
    (["format=$\\{oc.env\\:FAKE_SECRET\\}"], "a value may not hold '$'"),
    (["format=${oc.env:FAKE_SECRET}"], "a value may not hold '$'"),
    (["format='${oc.env:FAKE_SECRET}'"], "a value may not hold '$'"),
    (["eval.models=[base,'${oc.env:FAKE_SECRET}']"], "a value may not hold '$'"),
    (["sft.lr=${oc.decode:'1e-5'}"], "a value may not hold '$'"),
    (["eval.sets=${oc.create:'{x: 1}'}"], "a value may not hold '$'"),
    (["sft.lr=${sft.warmup_ratio}"], "a value may not hold '$'"),
    (["sft.lr=\\${oc.env:FAKE_SECRET}"], "a value may not hold '$'"),
    (["sft.lr=str($\\{oc.env\\:FAKE_SECRET\\})"], "a value may not hold '$'"),
    # by effect: what a mapping, a list or a deletion changes below an allowed key
    (["teacher.vllm={model: evil/weights}"], "it changes teacher.vllm.model"),
    (["++teacher.hf={model: evil/weights}"], "it changes teacher.hf.model"),
    # data and eval: under the deployment's data roots; eval.models: stage names
    (["data.cold_start=[{source: gsm8k, uri: /etc/passwd}]"], "it points data.cold_start.0.uri outside"),
    (["rl_easy.problems={source: native, uri: /etc/passwd}"], "it points rl_easy.problems.uri outside"),
    (["eval.benchmarks=s3://other-bucket/test.parquet"], "it points eval.benchmarks outside"),
    (["data.cold_start.0.uri=s3://parathink/data/../secrets/x"], "it points data.cold_start.0.uri outside"),
    (["eval.models=[base,../../other_run/base]"], "eval.models.1 must name a stage"),
    (["eval.models=[" + "[" * 400 + "]" * 400 + "]"], "nested too deeply"),
    (["eval.models=[" + ",".join(["base"] * 500) + "]"], "longer than 2048 characters"),
    (["sft.lr=1"] * 101, "101 of them, more than the 100 a form may give"),
]


def _form(override, evil, module):
    return override.replace("{evil}", evil).replace("{module}", str(module))


@pytest.mark.parametrize("form, says", CORPUS, ids=[f"{i}" for i in range(len(CORPUS))])
def test_a_bad_form_is_refused_in_one_line_exit_2_nothing_imported_written_or_echoed(
        form, says, evil_group_file, module_file, tmp_path, monkeypatch, capsys):
    path, mark = module_file
    monkeypatch.setenv("FAKE_SECRET", SECRET)
    run_dir = tmp_path / "run"
    overrides = [_form(o, evil_group_file, path) for o in form]
    code = cli.main(["plan", "experiment=parallel_r1_seen", f"run_dir={run_dir}", "seed=1", "--form", *overrides])
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert code == 2 and out == "" and len(lines) == 1 and says in lines[0], (code, out, lines)
    assert lines[0].startswith("parathink: error: form override") and SECRET not in err and len(lines[0]) < 3000
    assert not mark.exists() and not run_dir.exists()


def test_the_issues_reproductions_are_refused(evil_group_file, module_file, tmp_path, monkeypatch, capsys):
    """`--form data=../../../tmp/x/evil` and `--form 'format=$\\{oc.env\\:FAKE_SECRET\\}'`, as the issue ran them."""
    _, mark = module_file
    monkeypatch.setenv("FAKE_SECRET", "hunter2")
    for form in [f"data={evil_group_file}", "format=$\\{oc.env\\:FAKE_SECRET\\}"]:
        code, out, err = _plan(capsys, "experiment=tiny", f"run_dir={tmp_path / 'f'}", "seed=1", "--form", form)
        assert code == 2 and out == "" and len(err) == 1 and "hunter2" not in err[0], err
    assert not mark.exists()


def test_the_same_traversal_on_the_command_line_is_the_users_own(evil_group_file, module_file, capsys):
    """Not a form: a user at a shell may compose any file (so the refusal above is the form's, not Hydra's)."""
    _, mark = module_file
    code, _, _ = _plan(capsys, "experiment=tiny", "seed=1", f"data={evil_group_file}")
    assert code == 0 and mark.exists()


def test_a_form_override_that_fails_the_config_never_echoes_the_environment(monkeypatch, capsys):
    """tracking=server reads MLFLOW_TRACKING_URI through its own file; the form only chose it by name, and what the
    deployment's environment holds stays out of the line the user reads."""
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"ftp://{SECRET}@host/x")
    code, out, err = _plan(capsys, *TRUSTED, "--form", "tracking=server")
    assert SECRET not in "".join(err) + out
    assert code in (0, 2) and len(err) <= 1  # refused where the config schema refuses the store's scheme


@pytest.mark.parametrize("form", [
    ["data=gsm8k", "tracking=server", "format=npr"],
    ["data.cold_start=[{source: gsm8k, uri: s3://parathink/data/gsm8k.parquet, split: train, limit: 40}]"],
    ["eval.benchmarks=s3://parathink/data/parallel_r1/test.parquet", "eval.models=[sft,rl_hard]"],
    ["+eval.sets.gsm={source: gsm8k, uri: null, split: test, limit: 50, k: 1}", "~eval.sets.math"],
    ["rl_easy.problems={source: native, uri: s3://parathink/data/easy.jsonl}", "force=[eval]"],
])
def test_what_a_researcher_sets_passes_by_effect(form):
    """The gpu profile's data root is s3://parathink/data (hydra_conf/cluster/gpu.yaml)."""
    form_policy.check(TRUSTED, form, form_policy.load())  # no plan: test_what_a_researcher_tunes_... runs one


def test_the_data_roots_come_from_the_deployments_environment_first(monkeypatch):
    from parathink.errors import ConfigError

    monkeypatch.setenv(form_policy.DATA_ROOTS_ENV, "/srv/data, hub:openai")
    ok = ["data.cold_start=[{source: gsm8k, uri: /srv/data/gsm8k.jsonl}]", "eval.benchmarks=hub:openai/test"]
    form_policy.check(TRUSTED, ok, form_policy.load())
    with pytest.raises(ConfigError, match="it points eval.benchmarks outside the deployment's data roots"):
        form_policy.check(TRUSTED, ["eval.benchmarks=s3://parathink/data/test.parquet"], form_policy.load())


@pytest.mark.parametrize("uri, roots, inside", [
    (None, (), True),
    ("/srv/data/x.jsonl", ("/srv/data",), True),
    ("/srv/data", ("/srv/data/",), True),
    ("/srv/data2/x.jsonl", ("/srv/data",), False),
    ("/srv/data/../etc/passwd", ("/srv/data",), False),
    ("/srv/data/./x/../../y", ("/srv/data",), False),
    ("srv/data/x", ("/srv/data",), False),
    ("s3://parathink/data/x.parquet", ("s3://parathink/data",), True),
    ("s3://parathink/database/x", ("s3://parathink/data",), False),
    ("s3://parathink//data/x", ("s3://parathink/data",), False),  # the key '/data/x', not under 'data/'
    ("s3://parathink/data/x", ("s3://parathink/data/",), True),
    ("s3://parathink/data/x", ("/parathink/data",), False),
    ("file:///srv/data/x", ("/srv/data",), False),
    ("hub:openai/gsm8k", ("hub:openai",), True),
    ("hub:openai-evil/gsm8k", ("hub:openai",), False),
    ("/srv/data/x", (), False),
    ("", ("/srv/data",), False),
    (3, ("/srv/data",), False),
])
def test_a_uri_is_under_a_root_segment_by_segment(uri, roots, inside):
    assert form_policy.under_roots(uri, roots) is inside


def test_the_scrub_keeps_what_the_user_typed_and_drops_the_rest_of_the_environment():
    env = {"A": "hunter2", "B": "typed-by-user", "C": "xy"}
    assert form_policy._scrub("got 'hunter2' and typed-by-user, xy", "x=typed-by-user", env) == \
        "got '<from the environment>' and typed-by-user, xy"


def _strings_in(value):
    if isinstance(value, dict):
        for k, v in value.items():
            yield str(k)
            yield from _strings_in(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings_in(v)
    elif isinstance(value, str):
        yield value


KEYS = ["sft.lr", "data.cold_start.0.uri", "eval.models", "format", "stage_modules.base", "hydra.run.dir", "data",
        "tracking", "teacher.vllm", "cluster.image", "eval.benchmarks", "model", "teacher.openai.api_key_env"]


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(prefix=st.sampled_from(["", "+", "++", "~"]), key=st.one_of(st.sampled_from(KEYS), st.text(max_size=12)),
       value=st.one_of(st.text(alphabet="$\\{}:'\"[],=./ ab01\uff04\u2028\x00\n", max_size=24),
                       st.text(max_size=12)))
def test_fuzz_the_form_syntax_check(prefix, key, value):
    """Generated overrides: the check refuses with one ConfigError line or accepts; what it accepts Hydra parses to a
    value holding no interpolation (however Hydra unescapes it), under a key the allowlist permits or as a group's
    own file by name."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    from parathink.errors import ConfigError

    override = f"{prefix}{key}={value}"
    allowlist, groups = _FUZZ_POLICY
    try:
        form_policy.check_syntax([override], allowlist, groups)
    except ConfigError as err:
        assert "\n" not in str(err)
        return
    assert "$" not in value and key.isascii()
    if key in allowlist.groups:
        assert prefix == "" and value in groups[key]
        return
    assert allowlist.permits(key) and key not in groups
    try:
        parsed = OverridesParser.create().parse_override(override)
    except HydraException:  # Hydra refuses it itself when composing (one line, exit 2)
        return
    assert not any("${" in s for s in _strings_in(parsed.value()))


ATOMS = ["1", "0.5", "-3", "null", "true", "a", "base", "sft", "../x", "/etc/passwd", "s3://parathink/data/x",
         "s3://other/x", "hub:evil/x", "'q uoted'", "\\{", "\\:", "oc.env", "FAKE_SECRET", "str(1)", "[]", "{}",
         "\u00e9", "\u2028"]
VALUES = st.recursive(st.sampled_from(ATOMS),
                      lambda inner: st.one_of(st.lists(inner, max_size=3).map(lambda xs: f"[{','.join(xs)}]"),
                                              st.dictionaries(st.sampled_from(["uri", "source", "model", "k", "x"]),
                                                              inner, max_size=3).map(
                                                  lambda d: "{" + ", ".join(f"{k}: {v}" for k, v in d.items())
                                                  + "}")),
                      max_leaves=6)


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(prefix=st.sampled_from(["", "+", "++", "~"]),
       key=st.sampled_from(["teacher.vllm", "eval.models", "eval.sets.easy", "data.cold_start", "rl_easy.problems",
                            "sft.gate", "eval.benchmarks", "teacher.self.model", "format"]),
       value=VALUES)
def test_fuzz_the_whole_form_check(prefix, key, value):
    """Generated overrides that the pattern lets through, composed: the check answers with one ConfigError line
    holding no environment value, or passes; never a traceback."""
    from unittest import mock

    from parathink.errors import ConfigError

    with mock.patch.dict(os.environ, {"FAKE_SECRET": SECRET}):
        try:
            form_policy.check(TRUSTED, [f"{prefix}{key}={value}"], _FUZZ_POLICY[0])
        except ConfigError as err:
            assert "\n" not in str(err) and SECRET not in str(err)


def test_a_plug_in_stage_s_new_section_is_judged_by_its_keys(monkeypatch):
    """``+prep.steps=2`` adds the mapping ``prep`` as well as its key: with ``prep.*`` on a widened list the form may
    add it (the DAG tests' plug-in curricula), an empty ``+prep={}`` is judged by its own path, and a key outside
    the list is refused whatever mapping it arrives in."""
    stage = Path(__file__).parent / "stages" / "resume_stage.py"
    trusted = [*TRUSTED, f"+stage_modules.prep={stage}"]
    monkeypatch.setenv(form_policy.WIDEN_ENV, "prep.*")
    form_policy.check(trusted, ["+prep.steps=2", "+prep.calls=/tmp/calls.jsonl"], form_policy.load())
    with pytest.raises(ConfigError, match=r"it (sets|changes) prep, which the trigger form may not set"):
        form_policy.check(trusted, ["+prep={}"], form_policy.load())
    monkeypatch.setenv(form_policy.WIDEN_ENV, "prep.steps")
    with pytest.raises(ConfigError, match="prep.calls"):
        form_policy.check(trusted, ["+prep.steps=2", "+prep.calls=/tmp/calls.jsonl"], form_policy.load())
