"""The DAG folder as Airflow's dag-processor sees it: no import errors, the form, the chain, the schedule."""

from pathlib import Path

import pytest
from dag_helpers import airflow_env, in_airflow
from parathink_airflow.chain import CANONICAL, SLOTS

EXPERIMENTS = sorted(p.stem for p in (Path(__file__).parents[2] / "hydra_conf" / "experiment").glob("*.yaml"))
FIELDS = ["experiment", "stages", "run_dir", "seed", "overrides", "executor", "promote"]


@pytest.fixture(scope="module")
def dagbag(airflow_python, tmp_path_factory):
    home = tmp_path_factory.mktemp("dagbag-home")
    result, _ = in_airflow(airflow_env(home, home), "dagbag")
    print(f"\nDAG folder parsed in {result['parse_s']:.3f} s (both DAG files, after `import airflow`)")
    return result


def test_the_dag_folder_imports_without_errors_or_heavy_modules(dagbag):
    assert dagbag["import_errors"] == {}
    assert set(dagbag["dags"]) == {"parathink_curriculum", "parathink_nightly"}
    # Parse time stays small: no torch, transformers or parathink, and the Kubernetes provider only in a task.
    assert dagbag["heavy_modules"] == []


# The nightly opens with what_changed (it skips the whole night when neither the data nor the code changed) and
# closes with record_inputs (what the night trained on, for the next night's comparison).
AROUND = {"parathink_curriculum": ([], []), "parathink_nightly": (["what_changed"], ["record_inputs"])}


@pytest.mark.parametrize("dag_id", ["parathink_curriculum", "parathink_nightly"])
def test_one_task_per_stage_in_order_between_plan_and_promote(dagbag, dag_id):
    dag = dagbag["dags"][dag_id]
    before, after = AROUND[dag_id]
    assert dag["tasks"] == [*before, "plan", *(task_id for task_id, _ in SLOTS), "kubeflow", "promote", *after]
    # Each stage waits for every earlier one, not only its neighbour: plan skips unused slots up front, and
    # none_failed on a skipped neighbour alone let eval start beside sft under a real scheduler (tests/e2e).
    slots = [task_id for task_id, _ in SLOTS]
    for i, task_id in enumerate(slots):
        assert dag["upstream"][task_id] == sorted(["plan", *slots[:i]]), task_id
    # A skipped stage lets the chain go on; a failed one stops it.
    heads = {"plan", *before}
    assert {t: r for t, r in dag["trigger_rules"].items() if t not in heads} == {
        t: "none_failed" for t in dag["tasks"] if t not in heads}
    assert all(dag["trigger_rules"][t] == "all_success" for t in before)


@pytest.mark.parametrize("dag_id", ["parathink_curriculum", "parathink_nightly"])
def test_every_form_field_has_a_title_and_a_description_and_its_default_validates(dagbag, dag_id):
    dag = dagbag["dags"][dag_id]
    assert list(dag["schema"]) == FIELDS
    for name, schema in dag["schema"].items():
        assert schema.get("title") and len(schema.get("description", "")) > 30, name
    assert dag["schema"]["experiment"]["enum"] == EXPERIMENTS
    assert dag["schema"]["stages"]["items"]["enum"] == list(CANONICAL)
    assert dag["schema"]["executor"]["enum"] == ["local", "kubernetes", "kfp"]
    assert dag["params"]["experiment"] == "tiny" and dag["params"]["stages"] == []


def test_curriculum_is_triggered_by_hand_and_promotes_only_when_asked(dagbag):
    dag = dagbag["dags"]["parathink_curriculum"]
    assert dag["params"]["promote"] is False and dag["params"]["seed"] == 0
    assert dag["timetable"].startswith("NullTimetable")


def test_nightly_runs_at_two_utc_one_at_a_time_without_catch_up_and_promotes(dagbag):
    dag = dagbag["dags"]["parathink_nightly"]
    assert "CronTriggerTimetable(expression='0 2 * * *', timezone='UTC'" in dag["timetable"]
    assert (dag["max_active_runs"], dag["catchup"]) == (1, False)
    assert dag["params"]["promote"] is True and dag["params"]["seed"] is None  # seed: the night's date


def test_every_task_has_an_execution_timeout(dagbag):
    timeouts = dagbag["dags"]["parathink_curriculum"]["execution_timeouts"]
    assert None not in timeouts.values(), timeouts
    assert timeouts["sft"] == 4 * 86400 and timeouts["plan"] == 600  # PARATHINK_MAX_TIMEOUT_S's default


def test_the_deployment_sets_the_forms_defaults_and_a_default_the_form_cannot_offer_fails_the_parse(
        airflow_python, tmp_path):
    env = airflow_env(tmp_path, tmp_path, PARATHINK_DEFAULT_EXPERIMENT="parallel_r1_seen",
                      PARATHINK_DEFAULT_EXECUTOR="kubernetes")
    good, _ = in_airflow(env, "dagbag")
    params = good["dags"]["parathink_curriculum"]["params"]
    assert (params["experiment"], params["executor"]) == ("parallel_r1_seen", "kubernetes")
    bad, _ = in_airflow({**env, "PARATHINK_DEFAULT_EXECUTOR": "locla"}, "dagbag")
    (error,) = set(bad["import_errors"].values())
    assert "PARATHINK_DEFAULT_EXECUTOR='locla': not one of local, kubernetes, kfp" in error


@pytest.mark.parametrize("env, identity", [
    # a deployment pins the trainer by digest: that digest, whichever way it is given
    ({"PARATHINK_IMAGE_DIGEST": "sha256:d1", "PARATHINK_BUILD_INPUTS": "sha256:b1"}, "sha256:d1"),
    ({"PARATHINK_IMAGE": "reg/t@sha256:d2", "PARATHINK_BUILD_INPUTS": "sha256:b1"}, "reg/t@sha256:d2"),
    # by tag: the digest images/build.sh baked into the worker's image (a tag may be pushed again)
    ({"PARATHINK_IMAGE": "reg/t:0.1.0", "PARATHINK_BUILD_INPUTS": "sha256:b1"}, "sha256:b1"),
    # no image identity and no checkout (the DAG file copied alone): the tag, else unknown (every night trains)
    ({"PARATHINK_IMAGE": "reg/t:0.1.0"}, "reg/t:0.1.0"),
    ({}, "unknown"),
])
def test_the_nightly_code_identity_in_a_deployment(airflow_python, tmp_path, env, identity):
    """The nightly skips a night when neither the data nor the code changed: in a shipped image (no checkout) the
    code's identity must come from the image, never be `unknown` when the build or the deployment says what it is."""
    import shutil
    import subprocess

    from dag_helpers import AIRFLOW_PY, DAGS

    shutil.copy(DAGS / "parathink_nightly.py", tmp_path)  # outside any git checkout
    shutil.copytree(DAGS / "parathink_airflow", tmp_path / "parathink_airflow")
    proc = subprocess.run([str(AIRFLOW_PY), "-W", "ignore", "-c", "import parathink_nightly as n; print(n.code_identity())"],
                          cwd=tmp_path, env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "AIRFLOW_HOME": str(tmp_path),
                                             "PYTHONPATH": str(tmp_path), **env}, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-1] == identity
