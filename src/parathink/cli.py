"""The ``parathink`` command.

    parathink score INPUT.jsonl [--format F] [--scheme NAME --step N] [--output OUT.jsonl]
    parathink stage NAME [overrides...]     one curriculum stage (what Airflow and Kubeflow call)
    parathink run [overrides...]            the curriculum's stages in order
    parathink demo                          the tiny curriculum and its table
    parathink plan [overrides...] [--form OVERRIDE...]
                                            validate, then print the stages, their placement and pods as JSON;
                                            what follows --form came from a trigger form: limited to
                                            hydra_conf/form_allowlist.yaml (parathink.form_policy)
    parathink unlock RUN_DIR STAGE...       break the lock of a stage whose process is gone
    parathink promote ... / compare RUN_A RUN_B [RUN...]
    parathink report RUN_DIR                the run's report.md (stages, gates, results, Figure 3)
    parathink kfp compile|run|submit ...    the curriculum as a Kubeflow pipeline
    parathink data describe SPEC            what a problem-source spec reads (JSON)

Exit codes: 0 ok, 1 unexpected failure, 2 bad input or configuration, 3 a data-quality gate failed; a refusal is
one line on stderr (the command line's own errors too). Options go before or after the overrides of every subcommand
(``parathink promote --rollback NAME --why ...``, ``compare --rows A B``, ``plan --form ...``): the subcommands in
``OWN_ARGUMENTS`` read every word after their name themselves. Heavy packages are imported only by the subcommand
that needs them, so ``parathink score`` starts fast.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from collections.abc import Callable, Sequence

from parathink import exits, threads
from parathink.formats.tags import GRAMMARS


def _fail(msg: str, code: int = 2) -> int:
    print(f"parathink: error: {' '.join(str(msg).split())}", file=sys.stderr)
    return code


class Parser(argparse.ArgumentParser):
    """argparse, with its refusals in one line (its own print the usage first) and exit 2."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {' '.join(message.split())} (`{self.prog} --help` says more)\n")


# Subcommands that take every word after their name as theirs (Hydra overrides, their own options in any order):
# argparse's REMAINDER refuses a first word that looks like an option (`promote --rollback NAME` was "unrecognized
# arguments"), so these bypass it. The value says when this parser answers -h/--help instead: "any" (the help here is
# the whole story: any -h among the words, but never one after plan's --form, which is the form's to refuse),
# "first" (only as the first word: kfp's verbs have help of their own), "never" (the module's own parser has it).
OWN_ARGUMENTS = {"plan": "any", "run": "any", "demo": "any", "kfp": "first", "promote": "never", "compare": "never",
                 "report": "never", "data": "never"}


def cmd_score(args: argparse.Namespace) -> int:
    from parathink.rewards import get_reward
    from parathink.scoring import InputError, ScoreSummary, read_records, score_record

    try:
        reward = get_reward(args.scheme) if args.scheme else None
    except ValueError as e:
        return _fail(str(e))
    if args.step < 1:
        return _fail(f"--step counts from 1, got {args.step}")
    summary = ScoreSummary()
    lines: list[str] = []
    try:
        for _, rec in read_records(args.input, need_answer=reward is not None):
            scored = score_record(rec, args.format, reward, args.step)
            summary.add(scored)
            lines.append(json.dumps(scored))
    except InputError as e:
        return _fail(str(e))
    text = "".join(line + "\n" for line in lines)
    if args.output:
        from parathink.storage import StorageError, write_text

        try:
            write_text(args.output, text)  # whole or not at all (a temp file, then a rename), umask's permissions
        except StorageError as e:
            return _fail(str(e))
    else:
        sys.stdout.write(text)
    print(summary.line(), file=sys.stderr)
    return 0


def cmd_unlock(args: argparse.Namespace) -> int:
    """Break the lock of stages whose holder is gone (a pod killed while its S3 lease was still valid). Every stage
    named is checked before any lock is broken: the run directory exists, each name is a stage's (no path), and the
    run directory has a lock, an output or scratch for it."""
    from parathink.errors import ParathinkError
    from parathink.rundir.lock import break_lock, describe, known_stage

    try:
        for stage in args.stages:
            known_stage(args.run_dir, stage)
    except ParathinkError as e:
        return _fail(f"unlock: {e}", e.exit_code)
    for stage in args.stages:
        try:
            holder = break_lock(args.run_dir, stage)
        except ParathinkError as e:
            return _fail(str(e), e.exit_code)
        state = f"was held by {describe(holder)}" if holder is not None else "was not locked"
        print(f"parathink: unlocked stage {stage!r} of {args.run_dir}: it {state}", file=sys.stderr)
    return 0


def cmd_plan(args: argparse.Namespace) -> int:
    """``parathink plan``; the overrides after ``--form`` came from an Airflow trigger form and are held to the
    allowlist before anything is composed or imported (the DAG's first task runs this on the worker)."""
    from parathink.errors import ConfigError
    from parathink.pipeline.runner import main_plan

    overrides = list(args.overrides)
    if "--form" in overrides:
        from parathink import form_policy

        split = overrides.index("--form")
        trusted, form = overrides[:split], overrides[split + 1:]
        try:
            form_policy.check(trusted, form, form_policy.load())
        except ConfigError as e:
            return _fail(str(e), e.exit_code)
        overrides = [*trusted, *form]
    return main_plan(overrides)


def _delegate(module: str, func: str) -> Callable[[argparse.Namespace], int]:
    """A subcommand implemented elsewhere, imported only when it runs."""

    def run(args: argparse.Namespace) -> int:
        fn = getattr(importlib.import_module(module), func)
        if func == "main_stage":
            return int(fn(args.name, list(args.overrides)))
        return int(fn(list(args.overrides)))

    return run


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="parathink", description="Teach language models to think in parallel.")
    sub = p.add_subparsers(dest="command", required=True)

    s = sub.add_parser("score", help="score response records: format, metrics, grading, reward")
    s.add_argument("input", help="JSONL with a 'response' field per line (and 'answer' for grading)")
    s.add_argument("--format", default="parallel_r1", choices=GRAMMARS)
    s.add_argument("--scheme", help="reward scheme name (needs 'answer'), e.g. parallel_x_accuracy")
    s.add_argument("--step", type=int, default=1, help="training step for scheduled rewards (from 1)")
    s.add_argument("--output", help="write the per-record JSONL here instead of stdout")
    s.set_defaults(func=cmd_score)

    st = sub.add_parser("stage", help="run one curriculum stage")
    st.add_argument("name")
    st.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. run_dir=runs/x sft.lr=1e-5")
    # parathink.launch: one process per GPU (the placement's launch, under torchrun), else the stage here.
    st.set_defaults(func=_delegate("parathink.launch", "main_stage"))

    u = sub.add_parser("unlock", help="break a stage's lock whose holder is gone (docs/reliability.md)")
    u.add_argument("run_dir")
    u.add_argument("stages", nargs="+", metavar="STAGE")
    u.set_defaults(func=cmd_unlock)

    pl = sub.add_parser("plan", help="validate the config and print each stage's placement and pod (JSON): what "
                                     "orchestrators read; overrides after --form are held to the form's allowlist")
    pl.add_argument("overrides", nargs=argparse.REMAINDER)
    pl.set_defaults(func=cmd_plan)

    for name, module, func, help_ in [
        ("run", "parathink.launch", "main_run", "run the curriculum's stages in order"),
        ("demo", "parathink.pipeline.runner", "main_demo", "run the tiny curriculum and print its table"),
        ("promote", "parathink.pipeline.commands", "main_promote", "move the champion alias if the candidate wins"),
        ("compare", "parathink.pipeline.commands", "main_compare", "print runs' tables side by side (two or more)"),
        ("report", "parathink.report", "main", "(re)write a run directory's report.md from what it published"),
        ("kfp", "parathink.kfp.cli", "main", "Kubeflow Pipelines: compile | run --local | submit the curriculum"),
        ("data", "parathink.data.cli", "main", "problem sets: describe SPEC (what a source spec reads)"),
    ]:
        c = sub.add_parser(name, help=help_)
        c.add_argument("overrides", nargs=argparse.REMAINDER)
        c.set_defaults(func=_delegate(module, func))
    return p


def parse(argv: Sequence[str]) -> argparse.Namespace:
    """The command line as the subcommand will read it (``OWN_ARGUMENTS``: every word after its name, unparsed)."""
    parser = build_parser()
    words = list(argv)
    command = words[0] if words else None
    if command in OWN_ARGUMENTS and not _asks_help(OWN_ARGUMENTS[command], words[1:]):
        args = parser.parse_args([command])
        args.overrides = words[1:]
        return args
    if command in OWN_ARGUMENTS and OWN_ARGUMENTS[command] == "any":
        return parser.parse_args([command, "--help"])  # wherever the -h was: REMAINDER would take it as an override
    return parser.parse_args(words)


def _asks_help(when: str, words: list[str]) -> bool:
    helps = ("-h", "--help")
    if when == "first":
        return bool(words) and words[0] in helps
    own = words[:words.index("--form")] if "--form" in words else words
    return when == "any" and any(w in helps for w in own)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    # Before any subcommand imports torch: its thread pools size themselves once, from the environment.
    threads.configure()
    exits.stop_on_sigterm()  # a stage in a container is PID 1: SIGTERM must end it (exits.stop_on_sigterm)
    try:
        return args.func(args)
    except KeyboardInterrupt:
        return _fail("interrupted", exits.EXIT_INTERRUPTED)
    except exits.Terminated:
        return exits.stopped()
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
