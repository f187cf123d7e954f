"""dag.test() of the curriculum DAG on real stages: a passing teacher -> filter run, and each way a run can fail.

All runs go through one Airflow process (its start-up is the expensive part); each conf is one DAG run.
"""

import re
from pathlib import Path

import pytest
from dag_helpers import CHEAP, dag_test, states
from servers import free_port

KFP_PORT = free_port()
RESUME_STAGE = Path(__file__).parents[1] / "stages" / "resume_stage.py"
# This test deployment widens the form's allowlist (as an operator would, helm/airflow-values.yaml) for the built-in
# tiny model, the plug-in stage of exit_1 and its retries; stage_modules.teacher stays refused.
TEST_DEPLOYMENT_ALLOWS = "teacher.self.model,stage_modules.base,cluster.retries.*"
ATTACK = Path("/tmp/parathink-form-attack.py")
SLOT_TASKS = ["base", "rl_easy_before_teacher", "teacher", "filter", "sft", "rl_easy", "rl_hard", "rl_scaffold",
              "grpo_baseline", "eval"]


@pytest.fixture(scope="module")
def runs(airflow_home, tmp_path_factory):
    work = tmp_path_factory.mktemp("dag-runs")
    cheap = [*CHEAP, "tracking=none"]
    confs = {
        "ok": {"stages": ["teacher", "filter"], "run_dir": str(work / "a"), "overrides": cheap},
        # Same run directory: teacher is up to date (skipped by its manifest), filter's gate cannot pass.
        "gate": {"stages": ["teacher", "filter", "sft"], "run_dir": str(work / "a"),
                 "overrides": [*cheap, "filter.gate.min_accepted=100000"]},
        "not_key_value": {"stages": ["teacher"], "overrides": [*cheap, "sft.lr"]},
        # The trigger form's allowlist (hydra_conf/form_allowlist.yaml): the schema refuses code to import ...
        "stage_module": {"stages": ["teacher"], "overrides": [*cheap, f"+stage_modules.teacher={ATTACK}"]},
        # ... and `parathink plan --form` what a mapping would set below an allowed key.
        "mapping": {"stages": ["teacher"], "overrides": [*cheap, "teacher.vllm={model: evil/weights}"]},
        "form_key": {"stages": ["teacher"], "overrides": [*cheap, "seed=3"]},
        "unknown_key": {"stages": ["teacher"], "overrides": [*cheap, "filter.no_such_key=1"]},
        "exit_1": {"stages": ["base"], "run_dir": str(work / "e"), "overrides": [
            "tracking=none", f"+stage_modules.base={RESUME_STAGE}", "+base.steps=2", "+base.fail_at=1",
            "cluster.retries.max=1", "cluster.retries.backoff_s=0"]},
        "exit_2": {"stages": ["filter"], "run_dir": str(work / "empty"), "overrides": cheap},
        "pods_cannot_see": {"stages": ["teacher"], "executor": "kubernetes", "run_dir": str(work / "k"),
                            "overrides": cheap},
        "kfp": {"stages": ["teacher", "filter"], "executor": "kfp", "run_dir": "s3://parathink/runs/k",
                "overrides": cheap},
        "nightly": ("parathink_nightly", {"stages": ["teacher"], "promote": False,
                                          "overrides": [*cheap, "teacher.limit=4"]}),
    }
    # No Kubeflow Pipelines here: the kfp task's real `parathink kfp submit` finds nothing listening on KFP_PORT.
    ATTACK.write_text(f"open({str(work / 'executed')!r}, 'w').close()\n")
    results, log = dag_test(airflow_home, work, list(confs.values()), PARATHINK_KFP_HOST=f"http://127.0.0.1:{KFP_PORT}",
                            PARATHINK_FORM_ALLOW=TEST_DEPLOYMENT_ALLOWS)
    return dict(zip(confs, results)), log, work


def _not_run(result, tasks):
    return {t: s for t, s in states(result).items() if t in tasks}


@pytest.mark.slow
def test_teacher_then_filter_passes_with_outputs_manifests_and_metrics_lines(runs):
    results, log, work = runs
    ok = results["ok"]
    assert ok["state"] == "success", ok
    got = states(ok)
    assert (got["plan"], got["teacher"], got["filter"]) == ("success",) * 3
    assert {t: got[t] for t in got if t not in ("plan", "teacher", "filter")} == {
        t: "skipped" for t in got if t not in ("plan", "teacher", "filter")}
    for stage, output in [("teacher", "raw.jsonl"), ("filter", "accepted.jsonl")]:
        assert (work / "a" / stage / output).stat().st_size > 0
        assert (work / "a" / stage / "_manifest.json").exists()
    assert ok["plan"]["run_dir"] == str(work / "a") and ok["plan"]["slots"] == {"teacher": "teacher",
                                                                                 "filter": "filter"}
    assert "[parathink] teacher: running" in log  # the stage's own output is the task log
    # Each stage's done line carries its metrics, whatever the executor and wherever the run directory is.
    assert re.search(r"\[parathink\] teacher: done in .*; .*accuracy=", log)
    assert re.search(r"\[parathink\] filter: done in .*; .*accepted=", log)


@pytest.mark.slow
def test_a_failed_gate_fails_its_task_once_with_the_report_and_nothing_after_runs(runs):
    results, log, work = runs
    gate = results["gate"]
    assert gate["state"] == "failed"
    assert states(gate)["teacher"] == "success"
    assert gate["tasks"]["filter"] == {"state": "failed", "try_number": 1}  # exit 3: never retried
    assert states(gate)["sft"] == "upstream_failed"
    assert states(gate)["promote"] == "upstream_failed"  # a run whose gate failed is never promoted
    assert "filter: a data-quality gate failed; nothing after it runs (exit 3)" in log
    assert f"Report: {work / 'a'}" in log and "report.json" in log


@pytest.mark.slow
def test_an_override_that_is_not_key_value_is_refused_at_trigger_time(runs):
    results, _, _ = runs
    # The form's schema refuses it: Airflow creates no run (the UI and the REST API answer with the error).
    assert "Invalid input for param overrides: 'sft.lr' does not match" in results["not_key_value"]["refused"]


@pytest.mark.slow
def test_the_form_cannot_name_code_to_run_nor_set_a_refused_key_through_a_mapping(runs):
    results, log, work = runs
    assert "Invalid input for param overrides: '+stage_modules.teacher=" in results["stage_module"]["refused"]
    assert not (work / "executed").exists()  # the file was never imported
    got = states(results["mapping"])
    assert got["plan"] == "failed" and got["teacher"] == "upstream_failed"
    assert ("form override 'teacher.vllm={model: evil/weights}': it changes teacher.vllm.model, which the trigger "
            "form may not set") in log


@pytest.mark.slow
def test_a_bad_form_fails_the_plan_in_seconds_and_runs_no_stage(runs):
    results, log, _ = runs
    # A form field as an override is outside the allowlist: the schema refuses it before any run exists.
    assert "Invalid input for param overrides: 'seed=3' does not match" in results["form_key"]["refused"]
    for case in ("unknown_key", "pods_cannot_see"):
        got = states(results[case])
        assert got["plan"] == "failed" and results[case]["state"] == "failed", (case, got)
        assert set(_not_run(results[case], SLOT_TASKS + ["promote"]).values()) == {"upstream_failed"}, case
    assert "no_such_key" in log and "parathink: error:" in log  # parathink plan's own one line
    assert "is not visible to pods; use s3:// or a path (no volume is set)" in log


@pytest.mark.slow
def test_exit_1_is_retried_per_the_cluster_profile_exit_2_is_not(runs):
    results, log, _ = runs
    assert results["exit_1"]["state"] == results["exit_2"]["state"] == "failed"
    assert results["exit_1"]["tasks"]["base"] == {"state": "failed", "try_number": 2}  # retries.max=1
    assert "retry 1 of 1 in 0 s" in log and "base: exit code 1" in log
    assert results["exit_2"]["tasks"]["filter"] == {"state": "failed", "try_number": 1}
    assert "filter: bad input, not retried (exit 2)" in log


@pytest.mark.slow
def test_executor_kfp_hands_the_stages_to_one_kubeflow_pipeline(runs):
    results, log, _ = runs
    kfp = results["kfp"]
    assert _not_run(kfp, SLOT_TASKS) == {t: "skipped" for t in SLOT_TASKS}
    assert kfp["tasks"]["kubeflow"] == {"state": "failed", "try_number": 1}
    assert states(kfp)["promote"] == "upstream_failed" and kfp["state"] == "failed"
    host = f"http://127.0.0.1:{KFP_PORT}"
    # A sensor (reschedule mode): each poke asks for the DAG run's KFP run by name; here the endpoint is down.
    name = kfp["plan"]["kfp_run_name"]
    assert name.startswith("parathink_curriculum ")
    assert f"$ parathink kfp status --host {host} --run-name '{name}'" in log
    assert f"parathink: error: KFP endpoint {host}" in log  # parathink's own one line, in the task log



@pytest.mark.slow
def test_nightly_runs_get_a_folder_and_a_seed_of_their_date(runs):
    results, _, work = runs
    night = results["nightly"]
    assert night["state"] == "success", night
    date = night["plan"]["run_dir"].rsplit("/", 1)[-1]
    assert night["plan"]["run_dir"] == str(work / "runs" / "parathink_nightly" / date)  # under the runs_root
    assert f"seed={date.replace('-', '')}" in night["plan"]["args"]  # fresh synthetic problems each night
    assert (work / "runs" / "parathink_nightly" / date / "teacher" / "raw.jsonl").exists()
