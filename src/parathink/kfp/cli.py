"""``parathink kfp ...``: the curriculum as a Kubeflow pipeline.

    parathink kfp compile [overrides] [--output pipeline.yaml]     write the compiled pipeline (IR YAML)
    parathink kfp run --local [--runner subprocess|docker] [--pipeline-root DIR] [overrides]
                                                                  run it on this machine with kfp.local
    parathink kfp submit --host URL [--wait] [overrides]           submit it to a KFP endpoint (kfp.Client)
    parathink kfp status --host URL --run-name NAME                0 succeeded, 1 failed, 75 running, 2 no such run
    parathink kfp trainjob NAME [overrides]                        (inside a KFP task) one stage as a TrainJob

Overrides are those of ``parathink run``; they are validated before anything is compiled, and a bad one fails
with the same one-line error and exit code 2.
"""

from __future__ import annotations

import argparse
import sys
import time

from parathink.errors import ConfigError
from parathink.logs import log

VERBS = ("compile", "run", "submit", "status", "trainjob")


def _parser(verb: str) -> argparse.ArgumentParser:
    """One parser per verb (argparse's intermixed parsing, which lets options sit among the overrides, does not
    work through subparsers)."""
    p = argparse.ArgumentParser(prog=f"parathink kfp {verb}")
    if verb == "compile":
        p.add_argument("--output", "-o", default="pipeline.yaml", help="where to write it (default: pipeline.yaml)")
    elif verb == "run":
        p.add_argument("--local", action="store_true", required=True, help="run it on this machine with kfp.local")
        p.add_argument("--runner", choices=("subprocess", "docker"), default="subprocess",
                       help="subprocess: each task in this venv (default); docker: each task in the profile's image "
                            "through the Docker API at DOCKER_HOST (Docker or `podman system service`)")
        p.add_argument("--pipeline-root", help="kfp.local's own outputs (default: .kfp-local beside the run dir; "
                                               "docker: the run dir's parent, which its containers see)")
    elif verb in ("submit", "status"):
        p.add_argument("--host", required=True, help="the KFP API endpoint, e.g. http://ml-pipeline.kubeflow:8888")
        p.add_argument("--namespace", help="the KFP profile namespace (multi-user deployments only)")
        p.add_argument("--token-file", help="a bearer token file, re-read on refresh (e.g. "
                                            "/var/run/secrets/kubernetes.io/serviceaccount/token)")
        p.add_argument("--run-name", required=verb == "status",
                       help="the run's name; submit: an existing run of that name is not submitted again")
    if verb == "submit":
        p.add_argument("--wait", action="store_true", help="wait for the run; exit non-zero when it fails")
        p.add_argument("--timeout", type=float, default=30 * 86400, help="seconds to wait at most (default: 30 days)")
        p.add_argument("--poll", type=float, default=30.0, help="seconds between status reads while waiting")
    elif verb == "trainjob":
        p.add_argument("stage")
    if verb != "status":
        p.add_argument("overrides", nargs="*", help="Hydra overrides, as for `parathink run`")
    return p


def _plan(overrides: list[str]):
    from parathink.kfp.plan import make_plan

    return make_plan(overrides)


def _compile(args) -> int:
    from parathink.kfp.pipeline import compile_to

    started = time.perf_counter()
    plan = _plan(args.overrides)
    out = compile_to(plan, args.output)
    log(f"wrote {out}: {len(plan.stages)} tasks ({' -> '.join(plan.stages)}), run_dir {plan.run_dir} "
        f"({time.perf_counter() - started:.1f} s)")
    return 0


def _run_local(args) -> int:
    from parathink.kfp import local

    plan = _plan(args.overrides)
    root = args.pipeline_root or local.default_pipeline_root(plan.run_dir, args.runner)
    return local.run(plan, root, args.runner)


def _endpoint(args):
    from parathink.kfp.submit import Endpoint

    return Endpoint(args.host, args.namespace, args.token_file)


def _submit(args) -> int:
    from parathink.kfp.submit import submit

    return submit(_plan(args.overrides), _endpoint(args), wait=args.wait, timeout_s=args.timeout, poll_s=args.poll,
                  name=args.run_name)


def _status(args) -> int:
    from parathink.kfp.submit import status

    return status(_endpoint(args), args.run_name)


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in VERBS:
        print(__doc__.strip().split("\n\n")[1], file=sys.stderr)
        return 2
    parser = _parser(argv[0])
    args = parser.parse_intermixed_args(argv[1:]) if argv[0] != "status" else parser.parse_args(argv[1:])
    args.verb = argv[0]
    if args.verb == "trainjob":
        from parathink.kfp.launch import main_trainjob

        return main_trainjob(args.stage, args.overrides)
    try:
        return {"compile": _compile, "run": _run_local, "submit": _submit, "status": _status}[args.verb](args)
    except ConfigError as err:
        print(f"parathink: error: {err}", file=sys.stderr)
        return 2
