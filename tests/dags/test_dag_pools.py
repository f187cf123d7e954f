"""Issue 28: GPU stage tasks wait in an Airflow pool sized to the GPU node pool (dags/parathink_airflow/pools.py);
CPU stages do not. The DAG folder parsed as the dag-processor parses it, under the deployment's settings; the real
scheduler running stage tasks in that pool is tests/e2e/test_dag_on_cluster.py's."""

import json
from pathlib import Path

import pytest
import yaml
from dag_helpers import ROOT, airflow_env, in_airflow
from parathink_airflow import pools
from parathink_airflow.chain import SLOTS

GPU_STAGES = set(yaml.safe_load((ROOT / "hydra_conf" / "cluster" / "gpu.yaml").read_text())["gpu_stages"])


def parsed_pools(tmp_path: Path, **env: str) -> dict:
    result, _ = in_airflow(airflow_env(tmp_path, tmp_path, **env), "dagbag")
    assert result["import_errors"] == {}, result["import_errors"]
    return {dag_id: dag["pools"] for dag_id, dag in result["dags"].items()}


def test_the_gpu_profiles_gpu_stages_go_to_the_pool_and_cpu_stages_do_not(airflow_python, tmp_path):
    for dag_id, by_task in parsed_pools(tmp_path, PARATHINK_CLUSTER="gpu").items():
        for task_id, stage in SLOTS:
            want = "parathink_gpu" if stage in GPU_STAGES else "default_pool"
            assert by_task[task_id] == [want, 1], (dag_id, task_id)
        assert by_task["filter"][0] == by_task["plan"][0] == by_task["promote"][0] == "default_pool"


def test_the_pool_is_the_deployments_and_no_gpu_profile_uses_none(airflow_python, tmp_path):
    named = parsed_pools(tmp_path, PARATHINK_CLUSTER="gpu", PARATHINK_GPU_POOL="a100_nodes")["parathink_curriculum"]
    assert named["sft"] == ["a100_nodes", 1] and named["filter"] == ["default_pool", 1]
    off = parsed_pools(tmp_path, PARATHINK_CLUSTER="gpu", PARATHINK_GPU_POOL="")["parathink_curriculum"]
    local = parsed_pools(tmp_path)["parathink_curriculum"]  # the default profile (local) has no GPU stages
    assert {p for p, _ in off.values()} == {p for p, _ in local.values()} == {"default_pool"}


def test_a_profile_that_is_not_there_fails_the_parse_with_one_line(airflow_python, tmp_path):
    bad, _ = in_airflow(airflow_env(tmp_path, tmp_path, PARATHINK_CLUSTER="gpux"), "dagbag")
    (error,) = set(bad["import_errors"].values())
    assert "PARATHINK_CLUSTER='gpux': no cluster profile" in error


@pytest.mark.parametrize("raw", ["0", "two", "-1"])
def test_the_pools_size_is_a_node_count(raw):
    with pytest.raises(ValueError, match=f"PARATHINK_GPU_POOL_SLOTS='{raw}': the GPU pool's node count"):
        pools.pool_slots({"PARATHINK_GPU_POOL_SLOTS": raw})
    assert pools.pool_slots({}) == 1 and pools.pool_slots({"PARATHINK_GPU_POOL_SLOTS": "4"}) == 4


def test_the_packaged_gpu_list_is_the_gpu_profiles_and_the_environment_can_name_its_own(tmp_path):
    """A DAG folder deployed alone (no hydra_conf beside it) takes the packaged gpu profile's list, or
    PARATHINK_GPU_STAGES; another profile it cannot read fails with one line that names the variable."""
    assert set(pools.PACKAGED_GPU_STAGES) == GPU_STAGES
    alone = tmp_path / "no-hydra-conf"
    assert pools.gpu_stages(alone, {"PARATHINK_CLUSTER": "gpu"}) == GPU_STAGES
    assert pools.gpu_stages(alone, {"PARATHINK_CLUSTER": "gpu", "PARATHINK_GPU_STAGES": "sft, rl_hard"}) == \
        {"sft", "rl_hard"}
    with pytest.raises(ValueError, match="PARATHINK_CLUSTER='a100': no cluster profile .* set PARATHINK_GPU_STAGES"):
        pools.gpu_stages(alone, {"PARATHINK_CLUSTER": "a100"})


def test_the_dags_parse_in_an_airflow_without_parathink_from_a_folder_of_dags_alone(airflow_python, tmp_path):
    """An existing Airflow given only dags/: its venv has no parathink and no hydra_conf lies beside the DAGs; both
    DAGs parse under the gpu profile, their GPU stages in the pool."""
    import shutil
    import subprocess

    folder = tmp_path / "deployed" / "dags"
    shutil.copytree(ROOT / "dags", folder, ignore=shutil.ignore_patterns("__pycache__"))
    env = {"PATH": "/usr/bin:/bin", "AIRFLOW_HOME": str(tmp_path / "home"), "PARATHINK_CLUSTER": "gpu"}
    assert subprocess.run([str(airflow_python), "-c", "import parathink"], capture_output=True, env=env,
                          cwd=folder.parent).returncode != 0
    script = ("import json, sys; sys.path.insert(0, sys.argv[1])\n"
              "from airflow.models.dagbag import DagBag\n"
              "b = DagBag(dag_folder=sys.argv[1])\n"
              "print(json.dumps({'errors': {k: v.splitlines()[-1] for k, v in b.import_errors.items()},\n"
              "  'pools': {t.task_id: t.pool for t in b.dags['parathink_curriculum'].tasks}}))\n")
    proc = subprocess.run([str(airflow_python), "-c", script, str(folder)], capture_output=True, text=True,
                          env=env, cwd=folder.parent, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["errors"] == {}, result["errors"]
    assert result["pools"]["sft"] == "parathink_gpu" and result["pools"]["filter"] == "default_pool"


@pytest.mark.parametrize("version, ok", [("3.3.2", True), ("3.4.0rc1", True), ("3.2.1", False), ("2.10.5", False)])
def test_the_dags_name_the_oldest_airflow_they_parse_on(version, ok):
    from parathink_airflow.compat import require_airflow

    if ok:
        require_airflow(version)
    else:
        with pytest.raises(ImportError, match=rf"parathink's DAGs need Airflow >= 3.3 .*this is Airflow {version}"):
            require_airflow(version)


def test_the_deployment_names_the_roles_that_may_run_the_dags(airflow_python, tmp_path):
    """PARATHINK_DAG_ROLES becomes both DAGs' access_control (read and trigger); unset, Airflow's defaults."""
    from parathink_airflow.compat import access_control

    assert access_control({}) is None
    assert access_control({"PARATHINK_DAG_ROLES": "ml-research, ml-platform"}) == {
        r: {"DAGs": {"can_read", "can_edit"}, "DAG Runs": {"can_read", "can_create"}}
        for r in ("ml-research", "ml-platform")}
    result, _ = in_airflow(airflow_env(tmp_path, tmp_path, PARATHINK_DAG_ROLES="ml-research"), "dagbag")
    assert result["import_errors"] == {}, result["import_errors"]
    for dag_id, dag in result["dags"].items():
        assert dag["access_control"] == {"ml-research": {"DAG Runs": ["can_create", "can_read"],
                                                         "DAGs": ["can_edit", "can_read"]}}, dag_id
    unset, _ = in_airflow(airflow_env(tmp_path, tmp_path), "dagbag")
    assert all(not dag["access_control"] for dag in unset["dags"].values())
