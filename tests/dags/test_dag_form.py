"""The DAGs' pure parts, without Airflow: the stage chain, the form's checks, the arguments parathink gets."""

from pathlib import Path

import pytest
import yaml
from parathink_airflow import chain
from parathink_airflow.form import (
    Form,
    FormError,
    arguments,
    check_for_pods,
    check_overrides,
    default_run_dir,
    run_name,
)

from parathink.pipeline.compose import compose

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
                                      "~sft.gate", "tracking=none", "data.cold_start.0.n=40", "run_dir_extra=x"])
def test_hydra_overrides_pass(override):
    assert check_overrides([override]) == (override,)


@pytest.mark.parametrize("override, message", [
    ("sft.lr", "is not a Hydra override"),
    ("--help", "is not a Hydra override"),
    ("=3", "is not a Hydra override"),
    ("a=1\nb=2", "is not a Hydra override"),
    ("rm -rf /", "is not a Hydra override"),
    ("format=$\\{oc.env\\:X\\}", "is not a Hydra override"),
    ("sft.lr=\x1b[31m", "is not a Hydra override"),
    (3, "is not a Hydra override"),
    ("seed=3", "sets seed, which has its own field"),
    ("+run_dir=/tmp/x", "sets run_dir, which has its own field"),
    ("stages=[sft]", "sets stages, which has its own field"),
    ("sft.lr=" + "1" * 2048, "is not a Hydra override"),
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
    """``pod_run_dir`` is parathink plan's (parathink.placement.cluster.pod_run_dir); null: no pod can see the run directory."""
    check_for_pods({"run_dir": "runs/a", "pod_run_dir": "s3://b/a", "placement": {"sft": _placement()}}, 5)
    with pytest.raises(FormError, match="run_dir: '/tmp/a' is not visible to pods.*no volume"):
        check_for_pods({"run_dir": "/tmp/a", "pod_run_dir": None, "placement": {"sft": _placement()}}, 5)
    with pytest.raises(FormError, match="run_dir: '/tmp/a' is not visible to pods.*under the cluster profile's "
                                        "volume /runs"):
        check_for_pods({"run_dir": "/tmp/a", "pod_run_dir": None, "placement": {
            "sft": _placement(volume={"claim": "runs", "mount_path": "/runs"})}}, 5)
    ok = {"run_dir": "s3://b/a", "pod_run_dir": "s3://b/a"}
    with pytest.raises(FormError, match="sft: the cluster profile gives it 2 nodes.*executor=kfp"):
        check_for_pods({**ok, "placement": {"sft": _placement(nodes=2)}}, max_retries=5)
    with pytest.raises(FormError, match="sft: cluster retries.max=9 is above this DAG's ceiling of 5"):
        check_for_pods({**ok, "placement": {"sft": _placement(retries=9)}}, max_retries=5)


CONFIG = Path(__file__).parents[2] / "hydra_conf"
# The attacks, and neighbours of them; every one is refused by the schema and by `parathink plan --form`.
ATTACKS = ["+stage_modules.teacher=/tmp/x.py", "stage_modules.teacher=/tmp/x.py", "cluster.image=evil/img:latest",
           "cluster.service_account=cluster-admin", "+cluster.secrets.X={secret: other, key: k}",
           "cluster.node_pool.tolerations=[{operator: Exists}]", "++cluster.image=evil/img", "tracking.uri=http://evil",
           "hydra.run.dir=/tmp", "teacher.openai.base_url=http://evil", "teacher.openai.api_key_env=AWS_SECRET_ACCESS_KEY",
           "teacher.hf.model=evil/remote-code", "sft.deepspeed=/tmp/x.json", "sft.init=evil/weights",
           "teacher.vllm.engine_kwargs={trust_remote_code: true}", "sft.lr=${oc.env:AWS_SECRET_ACCESS_KEY}",
           "cache_dir=/", "sft={deepspeed: /tmp/x.json}", "model=qwen3_4b_base",
           # issue 48: a group by path, Hydra's escapes of an interpolation, packages, other groups, unicode
           "data=../../../../../../../tmp/x/evil", "data=/tmp/x/evil", "tracking=../data/gsm8k", "+data=gsm8k",
           "format=$\\{oc.env\\:FAKE_SECRET\\}", "format='${oc.env:X}'", "eval.models=[base,'${oc.env:X}']",
           "sft.lr=${oc.decode:'1'}", "data@sft=gsm8k", "stage@sft=rl", "stage/x=rl", "experiment=npr", "cluster=gpu",
           "\uff53tage_modules.base=x", "sft.lr=1\x00", "teacher.vllm.engine_kwargs.trust_remote_code=true",
           "~stage_modules", "~data", "~cluster.secrets", "~hydra", "sft.lr=1\n", "~sft.gate\n", "data=gsm8k\n",
           "sft.lr=" + "1" * 2042]  # 2,049 characters
RESEARCH = ["sft.lr=1e-5", "+sft.gate.min_parallel_rate=0.4", "~teacher.limit=null", "tracking=none", "data=gsm8k",
            "data.cold_start.0.n=40", "eval.sets.hard.n=400", "rl_hard.steps=200", "teacher.backend=scripted",
            "format=npr", "force=[eval]", "teacher.vllm.temperature=0.6", "tracking=server", "data=synthetic",
            "eval.benchmarks=s3://parathink/data/test.parquet", "eval.models=[sft,rl_hard]", "~eval.sets.math",
            "~sft.gate.min_parallel_rate"]


def _schema(widened=()):
    import re

    from parathink_airflow.form import schema_pattern

    return re.compile(schema_pattern(CONFIG, widened))


@pytest.mark.parametrize("widened", [(), ("cluster.image",), ("teacher.hf.model", "stage_modules.base"),
                                     ("cluster.retries.*",)])
def test_the_forms_schema_is_the_pattern_plan_checks_first(widened, monkeypatch):
    """One rule: the DAG's copy of the pattern (the DAG folder imports nothing of parathink) is the very string
    parathink.form_policy checks each override against, for the shipped allowlist and group folders."""
    from parathink_airflow.form import schema_pattern

    from parathink import form_policy

    monkeypatch.setenv(form_policy.WIDEN_ENV, ",".join(widened))
    assert schema_pattern(CONFIG, widened) == form_policy.pattern(form_policy.load(CONFIG),
                                                                  form_policy.config_groups(CONFIG))


def test_the_form_gives_at_most_a_hundred_overrides_as_plan_takes():
    from parathink_airflow.form import MAX_OVERRIDES

    from parathink import form_policy

    assert MAX_OVERRIDES == form_policy.MAX_OVERRIDES
    assert len(check_overrides(["sft.lr=1"] * MAX_OVERRIDES)) == MAX_OVERRIDES
    with pytest.raises(FormError, match="overrides: 101 of them, more than the 100"):
        check_overrides(["sft.lr=1"] * 101)


def test_the_forms_schema_and_plan_agree_on_every_attack_and_every_research_override():
    from parathink import form_policy
    from parathink.errors import ConfigError

    allowlist, schema = form_policy.load(), _schema()
    for override in ATTACKS:
        assert not schema.search(override), override  # jsonschema's way: re.search
        with pytest.raises(ConfigError, match="form override"):
            form_policy.check_keys([override], allowlist)
    for override in RESEARCH:
        assert schema.search(override), override
        form_policy.check_keys([override], allowlist)


def test_browsers_read_the_pattern_as_python_does():
    """JSON Schema patterns are ECMAScript (the UI validates with them, Unicode mode): the same verdicts in node."""
    import json
    import shutil
    import subprocess

    node = shutil.which("node")
    if node is None:
        pytest.skip("no node")
    script = ("const [p, xs] = JSON.parse(require('fs').readFileSync(0, 'utf8')); const r = new RegExp(p, 'u');"
              "console.log(JSON.stringify(xs.map(x => r.test(x))));")
    cases = [*ATTACKS, *RESEARCH]
    out = subprocess.run([node, "-e", script], input=json.dumps([_schema().pattern, cases]), text=True,
                         capture_output=True, check=True, timeout=60).stdout
    assert json.loads(out) == [bool(_schema().match(c)) for c in cases]


def test_the_schema_without_an_allowlist_still_refuses_a_dollar_and_a_final_newline():
    import re

    from parathink_airflow.form import OVERRIDE_PATTERN

    syntax = re.compile(OVERRIDE_PATTERN)
    assert syntax.search("sft.lr=1") and syntax.search("~sft.gate")
    for bad in ["sft.lr=1\n", "format=$\\{oc.env\\:X\\}", "sft.lr=${x}", "sft.lr"]:
        assert not syntax.search(bad), bad


def test_an_operator_widens_the_schema_by_deployment_not_by_form():
    assert not _schema().match("cluster.image=mine/img:1")
    assert _schema(["cluster.image"]).match("cluster.image=mine/img:1")
    assert _schema(["teacher.hf.model"]).match("teacher.hf.model=org/m")  # lifts the deny it names
    assert not _schema(["teacher.hf.model"]).match("teacher.vllm.model=org/m")
    assert not _schema(["data"]).match("data=../x")  # a group stays chosen by name, whatever is widened
    with pytest.raises(FormError, match="form allowlist: 'a=b' is not a key glob"):
        _schema(["a=b"])


@pytest.mark.parametrize("experiment", ["../x", "tiny,npr", "tiny stages=[x]"])
def test_an_experiment_is_a_name(experiment):
    with pytest.raises(FormError, match="experiment: .* is not the name of an experiment"):
        Form.read({"experiment": experiment})


def test_the_deployment_fixes_the_cluster_profile_and_runs_root_before_the_users_overrides():
    from parathink_airflow.form import deployment_overrides

    mine = deployment_overrides({"PARATHINK_CLUSTER": "gpu", "PARATHINK_RUNS_ROOT": "s3://corp/runs"})
    assert mine == ["cluster=gpu", "cluster.runs_root=s3://corp/runs"] and deployment_overrides({}) == []
    args = arguments("parallel_r1_seen", run_dir="${cluster.runs_root}/d/r", seed=1, stages=None,
                     overrides=["sft.lr=1"], deployment=mine)
    assert args == ["experiment=parallel_r1_seen", *mine, "run_dir=${cluster.runs_root}/d/r", "seed=1", "sft.lr=1"]
    assert compose(args).run_dir == "s3://corp/runs/d/r"


def test_the_dags_deployment_settings_are_parathinks_and_compose_as_they_would_from_the_environment():
    """dags/ parses without parathink, so it writes the deployment's variables again (form.DEPLOYMENT_KEYS): the
    same variables and keys as parathink.config.deployment, and the overrides it passes give the config the
    environment gives."""
    from parathink_airflow.form import DEPLOYMENT_KEYS, deployment_overrides

    from parathink.config import deployment
    from parathink.pipeline.compose import compose

    theirs = {s.env: s.key for s in deployment.SETTINGS if s.kind == "value"}
    assert {**DEPLOYMENT_KEYS, "PARATHINK_RUNS_ROOT": "cluster.runs_root"} == theirs  # runs_root: written above
    env = {"PARATHINK_CLUSTER": "gpu", "PARATHINK_IMAGE": "reg.example.com/t@sha256:" + "0" * 64,
           "PARATHINK_NAMESPACE": "ml", "PARATHINK_MLFLOW_URI": "https://mlflow.example.com",
           "PARATHINK_HF_TOKEN_SECRET": "hub:tok"}
    from_args = compose(["experiment=parallel_r1_seen", *deployment_overrides(env)])
    from_env = compose(["experiment=parallel_r1_seen", *deployment.overrides(env)])
    assert from_args.cluster == from_env.cluster
    assert from_args.cluster.image == env["PARATHINK_IMAGE"] and from_args.cluster.secrets.HF_TOKEN.secret == "hub"
