"""Placement from the cluster profiles, and `parathink plan` (what Airflow and Kubeflow read)."""

import json
import re

import pytest

from parathink import cli
from parathink.errors import ConfigError
from parathink.pipeline.compose import compose
from parathink.pipeline.runner import stage_roles
from parathink.placement import cluster


def plan_of(cfg, names):
    """``cluster.plan`` as the pipeline calls it: each stage with the role its ``StageSpec`` declares."""
    return cluster.plan(cfg, stage_roles(cfg, names))


def test_gpu_profile_places_gpu_stages_on_the_pool_and_the_rest_on_cpu():
    cfg = compose(["experiment=parallel_r1_seen"])
    plan = plan_of(cfg, ["filter", "sft"])
    sft, filt = plan["sft"], plan["filter"]
    assert sft.gpu and sft.gpus_per_node == 8 and sft.procs_per_node == 8 and sft.nodes == 1
    assert sft.node_selector == {"parathink.io/pool": "gpu"}
    assert sft.tolerations == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    assert sft.resources == {"cpu": "32", "memory": "256Gi"} and sft.shm_size == "64Gi"
    assert {s.env for s in sft.secrets} == {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "MLFLOW_TRACKING_USERNAME",
                                            "MLFLOW_TRACKING_PASSWORD"}
    assert not filt.gpu and filt.gpus_per_node == 0 and filt.node_selector == {} and filt.tolerations == []
    assert filt.resources == {"cpu": "2", "memory": "8Gi"}


def test_local_profile_has_no_gpu_stage_and_overrides_apply_per_stage():
    cfg = compose(["cluster=gpu", "+cluster.stage_overrides.sft.nodes=2"])
    assert cluster.placement(cfg, "sft").nodes == 2 and cluster.placement(cfg, "rl_hard").nodes == 1
    local = compose([])
    assert not any(p.gpu for p in plan_of(local, list(local.stages)).values())


@pytest.mark.parametrize("override, message", [
    ("cluster.accelerator=tpu", "cluster.accelerator: must be one of"),
    ("cluster.shm_size=lots", "cluster.shm_size: 'lots' is not a Kubernetes quantity"),
    ("cluster.resources.gpu.memory=8gb", "cluster.resources.gpu.memory: '8gb' is not a Kubernetes quantity"),
    ("cluster.gpus_per_node=-1", "cluster.gpus_per_node: must be an integer >= 0"),
    ("cluster.image_pull_policy=Sometimes", "cluster.image_pull_policy: must be one of"),
    ("+cluster.secrets.bad-name={secret:s,key:k}", "cluster.secrets.bad-name: not a valid environment variable"),
    ("+cluster.secrets.TOKEN={secret:Bad_Name,key:k}", "cluster.secrets.TOKEN.secret: 'Bad_Name' is not a valid"),
    ("cluster.node_pool.tolerations=[{key:a,operator:Maybe}]", "cluster.node_pool.tolerations[0].operator"),
    ("+cluster.stage_overrides.sft.image=x", "cluster.stage_overrides.sft: unknown keys ['image']"),
    ("cluster.volume={claim:runs,mount_path:relative}", "cluster.volume.mount_path: must be an absolute path"),
])
def test_bad_profile_values_name_the_key(override, message):
    """Refused while composing (a choice or a count: parathink.pipeline.schema) or by the plan (the rest)."""
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
        plan_of(compose(["experiment=parallel_r1_seen", override]), ["sft"])


def test_plan_prints_stages_and_placement_as_json(capsys):
    assert cli.main(["plan", "experiment=parallel_r1_seen", "run_dir=s3://parathink-runs/x", "seed=3"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["stages"] == ["base", "teacher", "filter", "sft", "rl_easy", "rl_hard", "eval"]
    assert doc["run_dir"] == "s3://parathink-runs/x" and doc["seed"] == 3 and doc["cluster"]["name"] == "gpu"
    assert doc["placement"]["rl_hard"]["gpus_per_node"] == 8 and not doc["placement"]["filter"]["gpu"]
    assert doc["tracking"]["backend"] == "mlflow"


@pytest.mark.parametrize("args, message", [
    (["seed=abc"], "seed: must be an integer"),
    (["stages=[teacher,nosuch]"], "stages: unknown stage 'nosuch'"),
    (["sft.nosuch=1"], "unknown config key"),
    (["cluster.shm_size=lots"], "cluster.shm_size"),
])
def test_plan_refuses_bad_config_in_one_line(capsys, args, message):
    assert cli.main(["plan", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1


@pytest.mark.parametrize("run_dir, runs_root, volume, expected", [
    ("runs/parallel_r1_seen", "s3://parathink/runs", None, "s3://parathink/runs/parallel_r1_seen"),
    ("exp/a", "s3://b/r/", None, "s3://b/r/exp/a"),
    ("s3://other/x", "s3://b/r", None, "s3://other/x"),
    ("runs/a", "/runs", {"claim": "c", "mount_path": "/runs"}, "/runs/a"),
    ("/runs/a", "runs", {"claim": "c", "mount_path": "/runs"}, "/runs/a"),
    ("runs/tiny", "runs", None, None),  # the local profile: a folder on this machine
    ("/tmp/a", "s3://b/r", None, None),  # absolute, on no volume
    ("/runsx/a", "runs", {"claim": "c", "mount_path": "/runs"}, None),
])
def test_one_rule_for_where_pods_find_the_run_directory(run_dir, runs_root, volume, expected):
    assert cluster.pod_run_dir(run_dir, runs_root, volume) == expected


def test_a_relative_run_dir_that_leaves_runs_root_is_refused():
    with pytest.raises(ConfigError, match=r"run_dir: '../x' does not name a folder under cluster.runs_root"):
        cluster.pod_run_dir("../x", "s3://b/r", None)


def test_every_stage_that_loads_the_model_is_on_the_gpu_pool_with_shm_sized_per_kind():
    cfg = compose(["experiment=parallel_r1_seen"])
    plan = plan_of(cfg, [*cfg.stages, "promote"])
    assert {s for s, p in plan.items() if not p.gpu} == {"filter", "promote"}  # base loads Qwen3-4B and probes
    assert plan["base"].resources == {"cpu": "32", "memory": "256Gi"}
    assert (plan["sft"].shm_size, plan["filter"].shm_size) == ("64Gi", "1Gi")


@pytest.mark.parametrize("override, message", [
    ("cluster.shm_size={gpu: 64Gi, cpu: 8Gi}", r"cluster.shm_size.cpu: 8Gi is not below the cpu pods' memory 8Gi"),
    ("cluster.shm_size=300Gi", r"cluster.shm_size: 300Gi is not below the gpu pods' memory 256Gi"),
])
def test_a_shm_that_the_pods_memory_cannot_hold_is_refused(override, message):
    cfg = compose(["experiment=parallel_r1_seen", override])
    with pytest.raises(ConfigError, match=message):
        plan_of(cfg, ["sft", "filter"])


@pytest.mark.parametrize("overrides, message", [
    # one GPU of 24 GiB: nothing shards the fp32 masters and Adam's moments of 4B parameters (60 GiB)
    (["cluster.gpus_per_node=1", "cluster.gpu_memory=24Gi"],
     r"cluster: sft needs about \d+\.\d GiB per GPU, more than cluster.gpu_memory \(24.0 GiB\); the largest part is "
     r"optimizer \(59.9 GiB\)"),
    # the base stage back on a 2-CPU/8Gi pod (what the GPU profile did before): the weights alone do not fit
    (["cluster.gpu_stages=[teacher,sft]"],
     r"cluster: base cannot hold the model: .* need about 7.5 GiB in a CPU pod \(weights\), its pod's memory 8Gi"),
])
def test_plan_refuses_a_placement_that_cannot_hold_the_model(overrides, message, capsys):
    assert cli.main(["plan", "experiment=parallel_r1_seen", *overrides]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert re.search(message, line), line


def test_every_gpu_experiment_fits_the_gpu_profile_and_eight_gpus_share_the_optimizer():
    """Every GPU stage of every GPU experiment has a device_memory estimate within its 80 GiB GPU (the memory model,
    parathink.placement.memory_model; tests/placement/test_memory_model.py checks its parts)."""
    for experiment in ("parallel_r1_seen", "parallel_r1_unseen_s1", "parallel_r1_unseen_s2", "npr", "parathinker",
                       "scaffold", "grpo_baseline"):
        cfg = compose([f"experiment={experiment}"])
        plan = plan_of(cfg, [*cfg.stages, "promote"])  # raises when a placement cannot hold the model
        for stage, p in plan.items():
            if p.gpu and stage != "teacher":  # the teacher's model is its backend's, not model.*
                memory = p.device_memory
                assert memory is not None and 0 < memory["estimate_gib"] <= memory["capacity_gib"] == 80.0, stage
    cfg = compose(["experiment=parallel_r1_seen", "cluster.gpu_memory=48Gi"])
    plan = plan_of(cfg, ["sft"])  # ZeRO-2 over 8 GPUs: 7.5 GiB of weights + 9.4 of states, checkpointed
    assert plan["sft"].device_memory["estimate_gib"] < 48


def test_a_misspelt_profile_key_is_one_line_naming_it():
    """A key no profile has (here `sratch` for `scratch`) would be ignored and its default used in silence."""
    with pytest.raises(ConfigError, match=r"^config: unknown config key 'cluster\.sratch' \(cluster takes: accelerator, "):
        compose(["experiment=parallel_r1_seen", "+cluster.sratch=null"])
    with pytest.raises(ConfigError, match=r"^cluster\.sratch: not a cluster profile key \(known: accelerator, "):
        cluster.placement({**compose(["experiment=parallel_r1_seen"]).cluster, "sratch": None}, "sft")


# ---------------------------------------------------------------- each stage's launch (parathink.launch runs it)

def test_plan_gives_every_single_node_eight_gpu_stage_a_launch_of_eight_ranks(capsys):
    """`parathink plan experiment=parallel_r1_seen`: torchrun with 8 ranks for each GPU stage but the teacher, whose
    one process runs 8 vLLM engines (data parallel); filter, a CPU stage, is one process."""
    assert cli.main(["plan", "experiment=parallel_r1_seen"]) == 0
    placement = json.loads(capsys.readouterr().out)["placement"]
    for stage in ("base", "sft", "rl_easy", "rl_hard", "eval"):
        assert placement[stage]["launch"] == ["torchrun", "--nproc_per_node", "8", "-m", "parathink.cli", "stage",
                                              stage], stage
        assert placement[stage]["procs_per_node"] == 8 and placement[stage]["engines"] is None
    teacher = placement["teacher"]
    assert teacher["launch"] == ["parathink", "stage", "teacher"] and teacher["procs_per_node"] == 1
    assert teacher["engines"] == {"parallel": "data", "engines": 8, "gpus_per_engine": 1}
    assert placement["filter"]["launch"] == ["parathink", "stage", "filter"]


@pytest.mark.parametrize("overrides, stage, launch", [
    ([], "sft", ["parathink", "stage", "sft"]),  # the local profile: CPU stages, one process
    (["cluster=gpu", "cluster.gpus_per_node=1"], "sft", ["parathink", "stage", "sft"]),
    (["cluster=gpu", "cluster.gpus_per_node=2"], "rl_hard",
     ["torchrun", "--nproc_per_node", "2", "-m", "parathink.cli", "stage", "rl_hard"]),
    (["cluster=gpu", "cluster.accelerator=cpu"], "sft", ["parathink", "stage", "sft"]),
    # A TrainJob's runtime gives torchrun its nodes and processes per node (PET_* variables).
    (["cluster=gpu", "+cluster.stage_overrides.sft.nodes=2"], "sft", ["torchrun", "-m", "parathink.cli", "stage",
                                                                      "sft"]),
])
def test_the_launch_follows_gpus_nodes_and_accelerator(overrides, stage, launch):
    p = cluster.placement(compose(overrides), stage)
    assert p.launch == launch
    assert p.procs_per_node == max(1, p.gpus_per_node)


@pytest.mark.parametrize("overrides, engines", [
    (["teacher.vllm.parallel=tensor"], {"parallel": "tensor", "engines": 1, "gpus_per_engine": 8}),
    (["cluster.gpus_per_node=4"], {"parallel": "data", "engines": 4, "gpus_per_engine": 1}),
    (["cluster.accelerator=cpu"], {"parallel": "data", "engines": 1, "gpus_per_engine": 1}),
    (["teacher.backend=self"], None),
])
def test_the_vllm_teachers_engines_use_every_gpu_of_its_pod(overrides, engines):
    p = cluster.placement(compose(["experiment=parallel_r1_seen", *overrides]), "teacher")
    assert p.engines == engines
    expected = 8 if engines is None and p.gpu else 1  # another backend: the ranks, as any GPU stage
    assert p.procs_per_node == expected and (p.launch[0] == "torchrun") == (expected > 1)


@pytest.mark.parametrize("override, message", [
    ("teacher.vllm.parallel=pipeline", "teacher.vllm.parallel: must be one of"),
    ("+cluster.stage_overrides.teacher.nodes=2", "cluster.stage_overrides.teacher.nodes: the vLLM teacher runs on "
                                                 "one node"),
])
def test_a_teacher_launch_that_cannot_work_is_refused(override, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        cluster.placement(compose(["experiment=parallel_r1_seen", override]), "teacher")


def test_promote_logs_in_as_its_own_mlflow_user_and_keeps_the_other_secrets():
    """Only promote moves the registry's champion alias: its MLflow user replaces the stages' one (by variable), the
    S3 keys stay; a stage's secrets are checked as the profile's are."""
    cfg = compose(["experiment=parallel_r1_seen"])
    plan = plan_of(cfg, ["sft", "promote"])
    by_env = {name: {s.env: s.secret for s in p.secrets} for name, p in plan.items()}
    assert by_env["promote"] == {**by_env["sft"], "MLFLOW_TRACKING_USERNAME": "parathink-mlflow-promote",
                                 "MLFLOW_TRACKING_PASSWORD": "parathink-mlflow-promote"}
    assert by_env["sft"]["MLFLOW_TRACKING_USERNAME"] == "parathink-mlflow"
    bad = compose(["experiment=parallel_r1_seen", "+cluster.stage_overrides.sft.secrets.X={secret: 'A_b', key: k}"])
    with pytest.raises(ConfigError, match=r"^cluster\.stage_overrides\.sft\.secrets\.X\.secret: 'A_b' is not a valid"):
        cluster.placement(bad, "sft")
