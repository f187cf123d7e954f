"""What the runner records for a curriculum run, whichever backend sits underneath.

``tracking.backend`` chooses: ``mlflow`` (parent run per curriculum run, nested run per stage, models
registered as ``parathink-<experiment>``, plots), ``jsonl`` (one JSON-lines file per stage in the run's
scratch), ``none``. The parent run id lives in the run directory's ``run.json`` and each stage's nested run
id in its ``work_dir``, so a resumed run or stage writes into the same MLflow runs as before the kill.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from omegaconf import DictConfig

from parathink.evaluation import results as results_file
from parathink.jsonl import load_record
from parathink.redact import recorded_config, redact_text
from parathink.rundir.manifest import GATES, config_hash
from parathink.rundir.timings import TIMINGS
from parathink.tracking.datasets import log_datasets, stage_datasets
from parathink.tracking.flavor import is_transformers_checkpoint
from parathink.tracking.lineage import git_state, lineage_tags, run_name
from parathink.tracking.registry import registered_name
from parathink.tracking.tracker import JsonlTracker, NullTracker, Tracker

TRACKING_FILE = "_tracking.json"  # in a stage's work_dir: its nested MLflow run id


def _recorded_run_id(file: Path) -> str | None:
    """The nested run id a killed attempt left (None when there is none or the file is damaged)."""
    data = load_record(file, "the stage gets a new MLflow run")
    return data.get("run_id") if data else None


class CurriculumTracking:
    """Backend-neutral hooks; the base class records nothing (``tracking.backend=none``)."""

    def __init__(self, cfg: DictConfig):
        self.cfg = cfg

    @staticmethod
    def check_reachable(cfg: DictConfig) -> None:
        """Raise (one line) when the configured store cannot be used; before the run creates anything."""
        if "tracking" in cfg and str(cfg.tracking.backend) == "mlflow":
            from parathink.tracking.reachable import ensure_reachable

            ensure_reachable(str(cfg.tracking.uri))

    @staticmethod
    def from_config(cfg: DictConfig, rundir, meta: dict) -> CurriculumTracking:
        backend = str(cfg.tracking.backend) if "tracking" in cfg else "none"
        if backend == "mlflow":
            return MlflowCurriculumTracking(cfg, rundir, meta)
        if backend == "jsonl":
            return JsonlCurriculumTracking(cfg, rundir)
        return CurriculumTracking(cfg)

    def stage_tracker(self, name: str, work_dir: Path, section: dict) -> Tracker:
        return NullTracker()

    def stage_done(self, name: str, tracker: Tracker, manifest, out_dir: Path) -> None:
        pass

    def stage_failed(self, name: str, tracker: Tracker) -> None:
        pass

    def _decode(self, name: str) -> dict | None:
        """How this run's ``eval`` decodes stage ``name``'s model (mode, paths per block), for the version's metadata;
        None in a config without an eval section."""
        from parathink.config.eval import stage_mode

        if self.cfg.get("eval") is None:
            return None
        return {"mode": stage_mode(self.cfg, name), "num_paths": int(self.cfg.eval.num_paths)}

    def gate_rechecked(self, name: str, manifest, gate_dir: Path) -> None:
        """A published stage's gate was evaluated again (``pipeline/gating.py (recheck)``)."""

    def run_finished(self, rundir, status: str) -> None:
        pass


def final_metrics(results: dict, stage: str | None) -> dict[str, float]:
    """``final.<set>.<metric>`` of ``stage``'s rows: runs of experiments with other stage lists line up in MLflow's
    compare view on these columns (the stage-named ones, ``<stage>.<set>.<metric>``, stay for the detail)."""
    rows = results.get("stages", {}).get(stage, {}) if stage else {}
    return {f"final.{tset}.{k}": float(v) for tset, row in rows.items() for k, v in row.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool)}


def gate_metrics(gates: dict | None) -> dict[str, float]:
    """The verdict as metrics: ``gate.passed`` (1/0) and each expectation's numeric observation, ``gate.<name>``."""
    if not gates or not gates.get("enabled", True):
        return {}
    out = {"gate.passed": float(bool(gates.get("passed")))}
    for e in gates.get("expectations", []):
        value = e.get("observed")
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            out[f"gate.{e['name']}"] = float(value)
    return out


class JsonlCurriculumTracking(CurriculumTracking):
    def __init__(self, cfg: DictConfig, rundir):
        super().__init__(cfg)
        self.dir = rundir.local / ".tracking"

    def stage_tracker(self, name: str, work_dir: Path, section: dict) -> Tracker:
        tracker = JsonlTracker(self.dir / f"{name}.jsonl")
        tracker.log_params(section)
        return tracker

    def stage_done(self, name: str, tracker: Tracker, manifest, out_dir: Path) -> None:
        tracker.log_metrics({**manifest.metrics, **gate_metrics(manifest.gates)})

    def gate_rechecked(self, name: str, manifest, gate_dir: Path) -> None:
        JsonlTracker(self.dir / f"{name}.jsonl").log_metrics(gate_metrics(manifest.gates))


class MlflowCurriculumTracking(CurriculumTracking):
    def __init__(self, cfg: DictConfig, rundir, meta: dict):
        from parathink.tracking.mlflow_tracker import MlflowSession

        super().__init__(cfg)
        self.rundir = rundir
        t = cfg.tracking
        self.session = MlflowSession(str(t.uri), str(t.get("experiment") or f"parathink-{cfg.experiment_name}"),
                                     t.get("artifact_location"))
        self.model_name = registered_name(cfg)
        previous = meta.get("mlflow") if isinstance(meta.get("mlflow"), dict) else {}
        uri = redact_text(str(t.uri))  # what run.json may record of it
        parent_id = previous.get("parent_run_id") if previous.get("uri") == uri else None
        run_dir = redact_text(str(rundir.root))
        self.lineage = {**lineage_tags(os.environ, run_dir=run_dir, config_hash=config_hash(recorded_config(cfg)),
                                       git=git_state()), "parathink.experiment": str(cfg.experiment_name)}
        name = run_name(str(cfg.experiment_name), seed=int(cfg.get("seed", 0)), run_dir=run_dir, environ=os.environ)
        self.parent = self.session.open_run(parent_id, name, tags=self.lineage)
        if self.parent.run_id != parent_id:
            self.parent.log_params(recorded_config(cfg))
        meta["mlflow"] = {"uri": uri, "parent_run_id": self.parent.run_id, "experiment_id": self.session.experiment_id}

    # ------------------------------------------------------------ stages
    def stage_tracker(self, name: str, work_dir: Path, section: dict) -> Tracker:
        file = work_dir / TRACKING_FILE
        run_id = _recorded_run_id(file)
        tracker = self.session.open_run(run_id, name, parent_id=self.parent.run_id,
                                        tags={**self.lineage, "parathink.stage": name,
                                              "parathink.config_hash": config_hash(section)})
        file.write_text(json.dumps({"run_id": tracker.run_id}))
        if tracker.run_id != run_id:
            tracker.log_params(section)
        return tracker

    def stage_done(self, name: str, tracker, manifest, out_dir: Path) -> None:
        tracker.log_metrics(manifest.metrics)
        tracker.log_metrics({"duration_s": manifest.duration_s})
        tracker.set_tags({"parathink.output_hash": manifest.output_hash})
        log_datasets(self.session.client, tracker.run_id, stage_datasets(manifest, self.lineage["parathink.run_dir"]))
        tracker.log_artifact(out_dir / "_manifest.json")
        for file in ("metrics.jsonl", TIMINGS):  # the step log, and the times the hashed files leave out
            if (out_dir / file).exists():
                tracker.log_artifact(out_dir / file)
        failed = self._log_gate(tracker, manifest, out_dir / GATES)
        if (out_dir / "model" / "config.json").exists() and self.cfg.tracking.get("register_models", True):
            if not failed:  # a model that failed its gate is kept for inspection, never a registry candidate
                self._register(tracker.run_id, name, manifest, out_dir / "model")
            else:  # kept for inspection beside the failed gate's report
                tracker.log_artifact(out_dir / "model", "model")
        if (out_dir / "results.json").exists() and not failed:
            self._eval_done(tracker, results_file.read(out_dir), out_dir)  # its rows with their times
        self.session.close_run(tracker, status="FAILED" if failed else "FINISHED")

    def _log_gate(self, tracker, manifest, gate_dir: Path) -> bool:
        """Log the gate's metrics and report; whether it failed."""
        tracker.log_metrics(gate_metrics(manifest.gates))
        if gate_dir.is_dir():
            tracker.log_artifact(gate_dir, "gates")
        if manifest.gates:
            tracker.set_tags({"parathink.gate": {True: "passed", False: "failed", None: "disabled"}[
                manifest.gates.get("passed")]})
        return bool(manifest.gates) and manifest.gates.get("passed") is False

    def _register(self, run_id: str, name: str, manifest, model_dir: Path) -> None:
        """A new version of the registered model, with the transformers flavor when transformers can load the
        checkpoint (``parathink.tracking.flavor``); a checkpoint it cannot load goes as the raw ``model`` artifact."""
        from parathink.tracking.flavor import register
        from parathink.tracking.registry import versions_of_run

        if name in versions_of_run(self.session.client, self.model_name, {name: run_id}):
            return
        logged = any(f.path == "model" for f in self.session.client.list_artifacts(run_id))
        if not is_transformers_checkpoint(model_dir) and not logged:
            self.session.client.log_artifacts(run_id, str(model_dir), "model")
        register(self.session.client, self.model_name, run_id, model_dir, stage=name,
                 grammar=str(self.cfg.get("format", "parallel_r1")), tags={"output_hash": manifest.output_hash},
                 decode=self._decode(name))

    def gate_rechecked(self, name: str, manifest, gate_dir: Path) -> None:
        """Into the stage's own MLflow run: the new verdict; a model that passes now becomes a registry candidate."""
        if not self.session._alive(manifest.mlflow_run_id):
            return  # published under another tracking store: the manifest and _gates/ hold the verdict
        tracker = self.session.open_run(manifest.mlflow_run_id, name, parent_id=self.parent.run_id)
        failed = self._log_gate(tracker, manifest, gate_dir)
        if not failed and any(rel.startswith("model/") for rel in manifest.outputs) \
                and self.cfg.tracking.get("register_models", True):
            self._register(tracker.run_id, name, manifest, self.rundir.resolve_input(name) / "model")
        self.session.close_run(tracker, status="FAILED" if failed else "FINISHED")

    def stage_failed(self, name: str, tracker) -> None:
        self.session.close_run(tracker, status="FAILED")

    def _eval_done(self, tracker, results: dict, out_dir: Path) -> None:
        from parathink.tracking.registry import tag_eval_results

        flat = {f"{stage}.{tset}.{k}": v for stage, sets in results.get("stages", {}).items()
                for tset, row in sets.items() for k, v in row.items() if isinstance(v, (int, float))}
        tracker.log_metrics(flat)
        tracker.log_artifact(out_dir / "results.json")
        self.parent.log_metrics(flat)
        best = tag_eval_results(self.session.client, self.model_name, results, self.parent.run_id,
                                metric=str(self.cfg.tracking.promote.metric))
        if best is not None:  # the candidate's rows again under names that do not depend on the stage list
            stage = self.session.client.get_model_version(self.model_name, best).tags.get("stage")
            self.parent.log_metrics(final_metrics(results, stage))
            self.parent.set_tags({"parathink.final_stage": stage})

    # ------------------------------------------------------------ the run
    def run_finished(self, rundir, status: str) -> None:
        from parathink.tracking.plots import PLOT_DIR

        plot_dir = rundir.local / PLOT_DIR
        try:
            for png in sorted(plot_dir.glob("*.png")):  # drawn by parathink.report, just before
                self.parent.log_artifact(png, "plots")
            results = rundir.resolve_input("eval") / "results.json"
            if results.exists():
                self.parent.log_artifact(results)
            if (rundir.local / "report.md").exists():  # parathink.report, written just before
                self.parent.log_artifact(rundir.local / "report.md")
            run_json = plot_dir.parent / "run.json"
            run_json.parent.mkdir(parents=True, exist_ok=True)  # no report this call: nothing made the folder
            run_json.write_text(json.dumps(rundir.read_run(), indent=1, sort_keys=True))
            self.parent.log_artifact(run_json)
        finally:
            self.session.close_run(self.parent, status=status)
