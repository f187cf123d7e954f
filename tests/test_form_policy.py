"""`parathink plan --form ...`: what the DAG's first task runs on the worker, with the trigger form's overrides held to
hydra_conf/form_allowlist.yaml before anything is composed or imported; the command line keeps its full power."""

import json

import pytest

from parathink import cli, form_policy

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
