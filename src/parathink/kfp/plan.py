"""What a pipeline run executes, from the user's overrides: validated exactly as ``parathink run`` validates them.

:func:`make_plan` composes the config, runs ``parathink plan``'s checks (:func:`pipeline.runner.plan_document`)
and reads every placement from the cluster profile, so a typo fails here, before anything is compiled, with the
same one-line :class:`ConfigError`. :func:`objects` turns one stage of a plan into Kubernetes objects.

KFP, not the profile, decides the namespace of a task's pod: ``kubeflow`` for a single-user deployment, the
profile's namespace for a multi-user one (docs/kubeflow.md, "Where KFP runs the pods"). So a plan's URLs of the
chart's Services, named in the profile by their short name (``http://parathink-mlflow:5000``, which resolves only
in the chart's namespace), are qualified with the profile's namespace (:func:`service_url`), and the launcher of a
multi-node stage creates its TrainJob in the namespace its own pod runs in (:meth:`Plan.in_namespace`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

from parathink.errors import ConfigError
from parathink.kfp import manifests
from parathink.placement import cluster, podspec
from parathink.placement.cluster import Placement


@dataclass(frozen=True)
class Plan:
    experiment: str
    seed: int
    run_dir: str  # the pipeline's run directory: placement.cluster.pod_run_dir's, or as given when no pod can see it
    stages: list[str]
    placements: dict[str, Placement]  # where each stage's `parathink stage` runs
    launchers: dict[str, Placement]  # multi-node stages: the pod that creates the TrainJob and waits for it
    overrides: list[str]  # the user's overrides minus run_dir (the pipeline's one parameter)
    service_account: str  # the profile's; a KFP run takes it at submit time
    pods_see_run_dir: bool = True  # False: run_dir is a folder on this machine (kfp.local only; submit refuses it)

    def task_placement(self, stage: str) -> Placement:
        """Where the KFP task of ``stage`` runs: its own placement, or the launcher's for a multi-node stage."""
        return self.launchers.get(stage) or self.placements[stage]

    def in_namespace(self, namespace: str) -> Plan:
        """This plan with every pod (and TrainJob) in ``namespace``: where KFP runs them, not the profile's."""
        def moved(ps: dict[str, Placement]) -> dict[str, Placement]:
            return {s: dataclasses.replace(p, namespace=namespace) for s, p in ps.items()}
        return dataclasses.replace(self, placements=moved(self.placements), launchers=moved(self.launchers))


def service_url(value: str, namespace: str) -> str:
    """``http://parathink-mlflow:5000`` -> ``http://parathink-mlflow.parathink.svc:5000``: a URL whose host is one
    DNS label (a Service of ``namespace``, found through the pod's own namespace's search path) made to resolve from
    any namespace. Anything else (a dotted host, localhost, an IP, not an http URL) is returned as it is."""
    try:
        parts = urlsplit(value)
        host = parts.hostname
    except ValueError:
        return value
    if parts.scheme not in ("http", "https") or not host or "." in host or ":" in host or host == "localhost":
        return value
    userinfo, at, hostport = parts.netloc.rpartition("@")
    netloc = f"{userinfo}{at}{host}.{namespace}.svc{hostport[len(host):]}"
    return urlunsplit(parts._replace(netloc=netloc))


def _services_qualified(p: Placement) -> Placement:
    """``p`` with the Service URLs of its env resolvable from any namespace (the profile's namespace is the
    chart's: where its MLflow runs)."""
    return dataclasses.replace(p, env={k: service_url(v, p.namespace) for k, v in p.env.items()})


def _launchers(cfg, placements: dict[str, Placement]) -> dict[str, Placement]:
    """For each multi-node stage, a CPU pod on the default pool (the profile's ``resources.cpu``, no GPU, no
    GPU-pool selector or tolerations): it only creates the TrainJob and waits; the GPUs go to the TrainJob."""
    from omegaconf import OmegaConf

    profile = {**OmegaConf.to_container(cfg.cluster, resolve=True), "gpu_stages": [], "stage_overrides": {}}
    # The launcher lives as long as the TrainJob it waits for: the stage's own timeout, not a CPU stage's.
    return {s: _services_qualified(dataclasses.replace(cluster.placement(profile, s), timeout_s=p.timeout_s,
                                                       api_access=True))
            for s, p in placements.items() if p.nodes > 1}


def _key(override: str) -> str:
    return override.split("=", 1)[0].lstrip("+~")


def make_plan(overrides: list[str]) -> Plan:
    """Compose and validate the config for ``overrides``; raises ConfigError (one line) when anything is wrong."""
    from parathink.pipeline.compose import compose
    from parathink.pipeline.runner import plan_document, stage_roles

    cfg = compose(list(overrides))
    if not isinstance(cfg.seed, int) or isinstance(cfg.seed, bool):
        raise ConfigError(f"seed: must be an integer, got {cfg.seed!r}")
    doc = plan_document(cfg, [str(s) for s in cfg.stages])
    placements = {s: _services_qualified(p) for s, p in cluster.plan(cfg, stage_roles(cfg, doc["stages"])).items()}
    if not placements:
        raise ConfigError("stages: the pipeline needs at least one enabled stage")
    return Plan(experiment=doc["experiment"], seed=doc["seed"], stages=doc["stages"],
                run_dir=doc["pod_run_dir"] or doc["run_dir"],  # kept as given for kfp.local; submit refuses it
                placements=placements, launchers=_launchers(cfg, placements),
                overrides=[o for o in overrides if _key(o) != "run_dir"],
                service_account=next(iter(placements.values())).service_account,
                pods_see_run_dir=doc["pod_run_dir"] is not None)


def objects(plan: Plan, stage: str, owner: dict | None = None) -> list[dict]:
    """The Kubernetes objects that run ``stage`` of ``plan``, as plain dicts.

    A one-node stage: its Pod, running ``parathink stage NAME``. A multi-node stage: the launcher Pod (running
    ``parathink kfp trainjob NAME``) and the TrainJob it creates (``owner``: the launcher Pod's ownerReference).
    """
    p = plan.placements[stage]
    command = manifests.stage_command(stage, plan.run_dir, plan.overrides)
    if p.nodes == 1:
        return [podspec.pod(p, command)]
    launcher = ["parathink", "kfp", "trainjob", *command[2:]]
    return [podspec.pod(plan.task_placement(stage), launcher),
            manifests.trainjob_manifest(p, command, manifests.trainjob_name(stage), owner)]


def stage_objects(overrides: list[str], stage: str) -> list[dict]:
    """:func:`objects` of ``stage`` for the run ``overrides`` describe (for tests that create them on an API server)."""
    return objects(make_plan([*overrides, f"stages=[{stage}]"]), stage)
