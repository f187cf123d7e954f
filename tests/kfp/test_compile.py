"""`parathink kfp compile`: one task per stage in the experiment's order, placed from the cluster profile."""

from __future__ import annotations

import difflib

import pytest
from kfp_helpers import CHEAP, SEEN, SFT_2_NODES, Compiled, plan_json, task_name
from kfp_snapshots import SNAPSHOT_DIR, SNAPSHOTS, compile_snapshot


def _assert_chained(compiled: Compiled, stages: list[str]) -> None:
    assert compiled.order() == [task_name(s) for s in stages]
    for before, after in zip(stages, stages[1:]):
        run_dir = compiled.tasks[task_name(after)]["inputs"]["parameters"]["run_dir"]
        # the run directory is handed over as the previous task's output: KFP orders the tasks by it
        assert run_dir == {"taskOutputParameter": {"outputParameterKey": "Output", "producerTask": task_name(before)}}
    for stage in stages:
        assert compiled.param(task_name(stage), "stage") == stage


def _assert_no_kfp_cache_and_lost_pods_retried(compiled: Compiled, plan: dict) -> None:
    for name, task in compiled.tasks.items():
        # `cachingOptions: {}` is enableCache false: the run directory's manifests decide what is up to date
        assert not task.get("cachingOptions", {}).get("enableCache", False), name
        # KFP retries a lost pod as the profile says, at a steady backoff; the component's verdict keeps a retry
        # from running exit 1 (retries spent), 2 or 3 again (parathink.kfp.verdict)
        p = plan["placement"][compiled.param(name, "stage")]
        assert task["retryPolicy"] == {"maxRetryCount": p["retries"], "backoffDuration": f"{p['retry_backoff_s']}s",
                                       "backoffFactor": 1.0, "backoffMaxDuration": "3600s"}, name
        # the verdict's key: KFP's run uuid, the same in every retry of a task and new in every submission
        assert compiled.param(name, "run_id") == "{{$.pipeline_job_uuid}}", name


def test_tiny_local_profile(compile_pipeline):
    plan = plan_json("experiment=tiny")
    compiled = compile_pipeline("experiment=tiny")
    _assert_chained(compiled, plan["stages"])
    _assert_no_kfp_cache_and_lost_pods_retried(compiled, plan)
    assert compiled.spec["root"]["inputDefinitions"]["parameters"]["run_dir"]["defaultValue"] == "runs/tiny"
    for stage in plan["stages"]:
        p, task = plan["placement"][stage], task_name(stage)
        container, k8s = compiled.container(task), compiled.kubernetes(task)
        assert container["image"] == p["image"]
        assert "accelerator" not in container["resources"]
        assert container["resources"]["resourceCpuLimit"] == p["resources"]["cpu"]
        assert "nodeSelector" not in k8s and "tolerations" not in k8s and "secretAsEnv" not in k8s
        assert k8s["emptyDirMounts"] == [{"medium": "Memory", "mountPath": "/dev/shm", "sizeLimit": p["shm_size"],
                                          "volumeName": "dshm"}]
        assert compiled.param(task, "retries") == p["retries"]


def test_gpu_profile_places_gpu_stages_on_the_pool(compile_pipeline):
    plan = plan_json(*SEEN)
    compiled = compile_pipeline(*SEEN)
    _assert_chained(compiled, plan["stages"])
    _assert_no_kfp_cache_and_lost_pods_retried(compiled, plan)
    gpu_stages = [s for s in plan["stages"] if plan["placement"][s]["gpu"]]
    assert "sft" in gpu_stages and "filter" not in gpu_stages
    for stage in plan["stages"]:
        p, task = plan["placement"][stage], task_name(stage)
        container, k8s = compiled.container(task), compiled.kubernetes(task)
        resources = container["resources"]
        assert (resources["resourceCpuRequest"], resources["resourceCpuLimit"]) == (p["resources"]["cpu"],) * 2
        assert (resources["resourceMemoryRequest"], resources["resourceMemoryLimit"]) == (p["resources"]["memory"],) * 2
        # the chart's Service by its short name, qualified: KFP may run the pod in another namespace (test_namespaces)
        mlflow = {"MLFLOW_TRACKING_URI": "http://parathink-mlflow.parathink.svc:5000"}
        assert {e["name"]: e["value"] for e in container["env"]} == {**p["env"], **mlflow}
        secrets = [(s["secretName"], k["secretKey"], k["envVar"]) for s in k8s["secretAsEnv"] for k in s["keyToEnv"]]
        assert secrets == [(s["secret"], s["key"], s["env"]) for s in p["secrets"]]
        assert k8s["emptyDirMounts"][0]["sizeLimit"] == p["shm_size"]
        assert k8s["imagePullPolicy"] == p["image_pull_policy"]
        if p["gpu"]:
            assert resources["accelerator"]["resourceType"] == p["gpu_resource"] == "nvidia.com/gpu"
            assert resources["accelerator"]["resourceCount"] == str(p["gpus_per_node"])
            assert k8s["nodeSelector"] == {"labels": p["node_selector"]}
            assert k8s["tolerations"] == p["tolerations"]
        else:
            assert "accelerator" not in resources and "nodeSelector" not in k8s and "tolerations" not in k8s


def test_multi_node_stage_becomes_a_trainjob_launcher(compile_pipeline):
    plan = plan_json(*SFT_2_NODES)
    compiled = compile_pipeline(*SFT_2_NODES)
    assert plan["placement"]["sft"]["nodes"] == 2
    assert compiled.param("sft", "trainjob") is True
    # the launcher is a CPU pod on the default pool; the GPUs and the pool go to the TrainJob's pods
    assert "accelerator" not in compiled.container("sft")["resources"]
    assert "nodeSelector" not in compiled.kubernetes("sft")
    assert compiled.param("rl-easy", "trainjob") is False
    assert compiled.container("rl-easy")["resources"]["accelerator"]["resourceCount"] == "8"


def test_all_ten_components_chain_when_the_stages_ask_for_them(compile_pipeline):
    from parathink.kfp.components import STAGES

    compiled = compile_pipeline("experiment=tiny", f"stages=[{','.join(STAGES)}]")
    _assert_chained(compiled, list(STAGES))


def test_overrides_reach_every_task_but_run_dir_is_the_pipeline_parameter(compile_pipeline):
    compiled = compile_pipeline(*CHEAP, "run_dir=s3://bucket/runs/a", "seed=3")
    assert compiled.spec["root"]["inputDefinitions"]["parameters"]["run_dir"]["defaultValue"] == "s3://bucket/runs/a"
    for task in ("teacher", "filter"):
        assert compiled.param(task, "overrides") == [*CHEAP, "seed=3"]


def test_gpu_profile_puts_a_relative_run_dir_under_runs_root(compile_pipeline):
    compiled = compile_pipeline(*SEEN)
    default = compiled.spec["root"]["inputDefinitions"]["parameters"]["run_dir"]["defaultValue"]
    assert default == "s3://parathink/runs/parallel_r1_seen"


@pytest.mark.parametrize("name", sorted(SNAPSHOTS))
def test_snapshot(name, tmp_path):
    """A change to the compiled pipeline shows in review; `make kfp-snapshots` rewrites the snapshots."""
    fresh = tmp_path / f"{name}.yaml"
    compile_snapshot(name, fresh)
    expected = (SNAPSHOT_DIR / f"{name}.yaml").read_text()
    got = fresh.read_text()
    if got != expected:
        diff = "".join(list(difflib.unified_diff(expected.splitlines(True), got.splitlines(True),
                                                 "snapshot", "fresh"))[:60])
        pytest.fail(f"components/snapshots/{name}.yaml is out of date (intended? run `make kfp-snapshots`):\n{diff}")


@pytest.mark.parametrize("bad", ["sft.lrr=1", "experiment=nope", "stages=[teacher,bogus]", "sft.lr=-1"])
def test_bad_override_fails_before_compiling_as_parathink_run_does(bad, tmp_path, capsys):
    from parathink.cli import main

    out = tmp_path / "pipeline.yaml"
    assert main(["kfp", "compile", bad, "--output", str(out)]) == 2
    kfp_err = capsys.readouterr().err.strip().splitlines()
    assert not out.exists()
    assert main(["run", bad, f"run_dir={tmp_path / 'run'}"]) == 2
    run_err = capsys.readouterr().err.strip().splitlines()
    assert len(kfp_err) == 1 and kfp_err == run_err[-1:], (kfp_err, run_err)
    assert not (tmp_path / "run").exists()
