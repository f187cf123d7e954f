"""The DAGs' pure parts, without Airflow: the stage chain, the form's checks, the arguments parathink gets."""

from pathlib import Path

import pytest
import yaml

from parathink.config import compose
from parathink_airflow import chain
from parathink_airflow.form import (Form, FormError, arguments, check_for_pods, check_overrides, default_run_dir,
                                    run_name)

EXPERIMENTS = sorted(p.stem for p in (Path(__file__).parents[2] / "hydra_conf" / "experiment").glob("*.yaml"))


def test_canonical_order_is_the_configs_default_stage_list():
    config = yaml.safe_load((Path(__file__).parents[2] / "hydra_conf" / "config.yaml").read_text())
    assert list(chain.CANONICAL) == config["stages"]


@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_every_experiments_stage_list_fits_the_chain_in_order(experiment):
    stages = [str(s) for s in compose([f"experiment={experiment}"]).stages if str(s) != "promote"]
    slots = chain.assign(stages)
    order = [task_id for task_id, _ in chain.SLOTS]
    assert [slots[t] for t in sorted(slots, key=order.index)] == stages  # each stage once, in its order


def test_stages_take_their_canonical_slot_unless_the_order_forces_the_npr_one():
    assert chain.assign(["rl_easy"]) == {"rl_easy": "rl_easy"}
    assert chain.assign(["teacher", "filter"]) == {"teacher": "teacher", "filter": "filter"}
    npr = chain.assign(["base", "rl_easy", "teacher", "filter", "sft", "rl_hard", "eval"])
    assert npr["rl_easy_before_teacher"] == "rl_easy" and "rl_easy" not in npr


@pytest.mark.parametrize("stages, message", [
    (["filter", "teacher", "filter"], "cannot run in this order"),
    (["eval", "teacher"], "cannot run in this order"),
    (["promote"], "'promote' has no task"),
    (["prep"], "'prep' has no task"),
])
def test_orders_the_chain_cannot_run_are_refused(stages, message):
    with pytest.raises(chain.ChainError, match=message):
        chain.assign(stages)


@pytest.mark.parametrize("override", ["sft.lr=1e-5", "+new.key=1", "++a.b=[1,2]", "~teacher.limit=null",
                                      "tracking=none", "data.cold_start.0.n=40", "run_dir_extra=x"])
def test_hydra_overrides_pass(override):
    assert check_overrides([override]) == (override,)


@pytest.mark.parametrize("override, message", [
    ("sft.lr", "is not a Hydra override"),
    ("--help", "is not a Hydra override"),
    ("=3", "is not a Hydra override"),
    ("a=1\nb=2", "is not a Hydra override"),
    ("rm -rf /", "is not a Hydra override"),
    (3, "is not a Hydra override"),
    ("seed=3", "sets seed, which has its own field"),
    ("+run_dir=/tmp/x", "sets run_dir, which has its own field"),
    ("stages=[sft]", "sets stages, which has its own field"),
])
def test_anything_else_is_refused_naming_the_item(override, message):
    with pytest.raises(FormError, match=r"overrides\[1\]: .*" + message):
        check_overrides(["sft.lr=1e-5", override])


def test_the_form_is_checked_field_by_field():
    form = Form.read({"experiment": "tiny", "stages": None, "overrides": None, "seed": 3})
    assert (form.stages, form.overrides, form.executor, form.promote, form.run_dir) == ((), (), "local", False, None)
    for params, message in [({"executor": "docker"}, "executor: must be one of"),
                            ({"run_dir": "runs/a b"}, "run_dir: 'runs/a b' must be a path"),
                            ({"run_dir": "runs/a,b"}, "run_dir:"),
                            ({"seed": "7"}, "seed: must be an integer"),
                            ({"seed": True}, "seed: must be an integer"),
                            ({"overrides": "sft.lr=1"}, "overrides: must be a list")]:
        with pytest.raises(FormError, match=message):
            Form.read({"experiment": "tiny", **params})


def test_arguments_keep_the_users_overrides_last_and_their_tracking_choice():
    args = arguments("tiny", run_dir="/r", seed=1, stages=["teacher", "filter"], overrides=["sft.lr=1"],
                     tracking_uri="sqlite:////abs/mlflow.db")
    assert args == ["experiment=tiny", "run_dir=/r", "seed=1", "stages=[teacher,filter]",
                    "tracking.uri=sqlite:////abs/mlflow.db", "sft.lr=1"]
    mine = arguments("tiny", run_dir="/r", seed=1, stages=None, overrides=["tracking=server"],
                     tracking_uri="sqlite:////abs/mlflow.db")
    assert not any(a.startswith("tracking.uri=") for a in mine)


def test_default_run_directory_is_one_folder_per_run_under_the_runs_root():
    name = run_name("manual__2026-12-01T14:51:24.553173+00:00")
    assert name == "manual__2026-12-01T14-51-24.553173-00-00"
    assert default_run_dir("parathink_curriculum", name) == f"${{cluster.runs_root}}/parathink_curriculum/{name}"


def _placement(**over):
    base = {"nodes": 1, "volume": None, "retries": 2}
    return {**base, **over}


def test_pods_need_a_run_directory_they_can_see_and_one_node():
    check_for_pods({"run_dir": "s3://b/runs/a", "placement": {"sft": _placement()}}, max_retries=5)
    check_for_pods({"run_dir": "/runs/a", "placement": {
        "sft": _placement(volume={"claim": "runs", "mount_path": "/runs"})}}, max_retries=5)
    with pytest.raises(FormError, match="run_dir: '/tmp/a' is not visible to pods.*no volume"):
        check_for_pods({"run_dir": "/tmp/a", "placement": {"sft": _placement()}}, max_retries=5)
    with pytest.raises(FormError, match="sft: the cluster profile gives it 2 nodes.*executor=kfp"):
        check_for_pods({"run_dir": "s3://b/a", "placement": {"sft": _placement(nodes=2)}}, max_retries=5)
    with pytest.raises(FormError, match="sft: cluster retries.max=9 is above this DAG's ceiling of 5"):
        check_for_pods({"run_dir": "s3://b/a", "placement": {"sft": _placement(retries=9)}}, max_retries=5)
