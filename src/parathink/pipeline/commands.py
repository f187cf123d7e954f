"""``parathink promote`` and ``parathink compare``: the command lines that compose a config and hand it to the
registry (``tracking.registry``) or the results tables (``tracking.compare``). They live with the pipeline, which
composes configs, so that tracking stays below it and never composes one itself."""

from __future__ import annotations

import argparse

from parathink.errors import BadInput
from parathink.exits import guarded
from parathink.pipeline.compose import compose


def main_compare(argv: list[str]) -> int:
    """``parathink compare RUN RUN [RUN...]``: the runs' results tables side by side (``--rows``: stacked)."""
    from parathink.evaluation.table import format_compare, format_runs
    from parathink.tracking.compare import load_results

    parser = argparse.ArgumentParser(prog="parathink compare")
    parser.add_argument("runs", nargs="+", metavar="RUN", help="run directories or MLflow run ids (two or more)")
    parser.add_argument("--rows", action="store_true", help="a row per run and stage, also for two runs")
    parser.add_argument("--tracking-uri", default=None, help="MLflow tracking URI (for run ids)")
    args = parser.parse_args(argv)

    def go():
        if len(args.runs) < 2:
            raise BadInput(f"parathink compare: give two or more runs, got {len(args.runs)}")
        uri = args.tracking_uri
        if uri is None:
            uri = str(compose([]).tracking.uri)
        results = [load_results(ref, uri) for ref in args.runs]
        if len(results) == 2 and not args.rows:
            table = format_compare(*results)  # whole before anything is printed
            print(f"A = {args.runs[0]}\nB = {args.runs[1]}\n")
        else:
            table = format_runs([(ref.rstrip("/").rsplit("/", 1)[-1], r) for ref, r in zip(args.runs, results)])
        print(table)
    return guarded(go)


def main_promote(argv: list[str]) -> int:
    """``parathink promote [overrides]``: e.g. ``tracking.promote.candidate=3 tracking.promote.margin=0.01``;
    ``parathink promote --rollback NAME [--why TEXT] [overrides]`` moves NAME's champion back to the one before."""
    parser = argparse.ArgumentParser(prog="parathink promote", add_help=True)
    parser.add_argument("--rollback", metavar="NAME", help="registered model whose champion goes back one version")
    parser.add_argument("--why", default="rolled back by hand", help="recorded on both versions")
    args, overrides = parser.parse_known_args(list(argv))

    def go():
        from parathink.config.promote import PromoteConfig
        from parathink.tracking.reachable import client
        from parathink.tracking.registry import promote, registered_name, rollback

        cfg = compose(overrides)
        if args.rollback:
            print(rollback(client(str(cfg.tracking.uri)), args.rollback, args.why))
            return
        rule = PromoteConfig.of(cfg)  # the metric and margin, one line each when bad
        promoted, why = promote(client(str(cfg.tracking.uri)), registered_name(cfg), rule.candidate, rule.metric,
                                float(rule.margin))
        print(why)
    return guarded(go)
