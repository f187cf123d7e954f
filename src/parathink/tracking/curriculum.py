"""What the runner records for a curriculum run, whichever backend sits underneath.

``tracking.backend`` chooses: ``mlflow`` (parent run per curriculum run, nested run per stage, models
registered as ``parathink-<experiment>``, plots), ``jsonl`` (one JSON-lines file per stage in the run's
scratch), ``none``. The parent run id lives in the run directory's ``run.json`` and each stage's nested run
id in its ``work_dir``, so a resumed run or stage writes into the same MLflow runs as before the kill.
"""

from __future__ import annotations

import json
from pathlib import Path
from omegaconf import DictConfig

from parathink.jsonl import load_record
from parathink.redact import recorded_config, redact_text
from parathink.tracking.base import JsonlTracker, NullTracker, Tracker

TRACKING_FILE = "_tracking.json"  # in a stage's work_dir: its nested MLflow run id
MODEL_STAGES = ("base", "sft", "rl_easy", "rl_hard", "rl_scaffold", "grpo_baseline")


def _recorded_run_id(file: Path) -> str | None:
    """The nested run id a killed attempt left (None when there is none or the file is damaged)."""
    data = load_record(file, "the stage gets a new MLflow run")
    return data.get("run_id") if data else None


def registered_name(cfg: DictConfig) -> str:
    return str(cfg.tracking.get("registered_model") or f"parathink-{cfg.experiment_name}")


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
    def from_config(cfg: DictConfig, rundir, meta: dict) -> "CurriculumTracking":
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

    def run_finished(self, rundir, status: str) -> None:
        pass


class JsonlCurriculumTracking(CurriculumTracking):
    def __init__(self, cfg: DictConfig, rundir):
        super().__init__(cfg)
        self.dir = rundir.local / ".tracking"

    def stage_tracker(self, name: str, work_dir: Path, section: dict) -> Tracker:
        tracker = JsonlTracker(self.dir / f"{name}.jsonl")
        tracker.log_params(section)
        return tracker

    def stage_done(self, name: str, tracker: Tracker, manifest, out_dir: Path) -> None:
        tracker.log_metrics(manifest.metrics)


class MlflowCurriculumTracking(CurriculumTracking):
    def __init__(self, cfg: DictConfig, rundir, meta: dict):
        from parathink.tracking.mlflow_tracker import MlflowSession

        super().__init__(cfg)
        t = cfg.tracking
        self.session = MlflowSession(str(t.uri), str(t.get("experiment") or f"parathink-{cfg.experiment_name}"),
                                     t.get("artifact_location"))
        self.model_name = registered_name(cfg)
        previous = meta.get("mlflow") if isinstance(meta.get("mlflow"), dict) else {}
        uri = redact_text(str(t.uri))  # what run.json may record of it
        parent_id = previous.get("parent_run_id") if previous.get("uri") == uri else None
        self.parent = self.session.open_run(parent_id, f"{cfg.experiment_name}:{Path(str(rundir.root)).name}",
                                            tags={"parathink.run_dir": redact_text(str(rundir.root))})
        if self.parent.run_id != parent_id:
            self.parent.log_params(recorded_config(cfg))
        meta["mlflow"] = {"uri": uri, "parent_run_id": self.parent.run_id, "experiment_id": self.session.experiment_id}

    # ------------------------------------------------------------ stages
    def stage_tracker(self, name: str, work_dir: Path, section: dict) -> Tracker:
        file = work_dir / TRACKING_FILE
        run_id = _recorded_run_id(file)
        tracker = self.session.open_run(run_id, name, parent_id=self.parent.run_id,
                                        tags={"parathink.stage": name})
        file.write_text(json.dumps({"run_id": tracker.run_id}))
        if tracker.run_id != run_id:
            tracker.log_params(section)
        return tracker

    def stage_done(self, name: str, tracker, manifest, out_dir: Path) -> None:
        tracker.log_metrics(manifest.metrics)
        tracker.log_metrics({"duration_s": manifest.duration_s})
        tracker.set_tags({"parathink.output_hash": manifest.output_hash})
        tracker.log_artifact(out_dir / "_manifest.json")
        if (out_dir / "metrics.jsonl").exists():
            tracker.log_artifact(out_dir / "metrics.jsonl")
        if (out_dir / "model" / "config.json").exists() and self.cfg.tracking.get("register_models", True):
            from parathink.tracking.registry import register_model

            tracker.log_artifact(out_dir / "model", "model")
            register_model(self.session.client, self.model_name, tracker.run_id, stage=name,
                           tags={"output_hash": manifest.output_hash})
        if (out_dir / "results.json").exists():
            self._eval_done(tracker, json.loads((out_dir / "results.json").read_text()), out_dir)
        self.session.close_run(tracker)

    def stage_failed(self, name: str, tracker) -> None:
        self.session.close_run(tracker, status="FAILED")

    def _eval_done(self, tracker, results: dict, out_dir: Path) -> None:
        from parathink.tracking.registry import tag_eval_results

        flat = {f"{stage}.{tset}.{k}": v for stage, sets in results.get("stages", {}).items()
                for tset, row in sets.items() for k, v in row.items() if isinstance(v, (int, float))}
        tracker.log_metrics(flat)
        tracker.log_artifact(out_dir / "results.json")
        self.parent.log_metrics(flat)
        tag_eval_results(self.session.client, self.model_name, results, self.parent.run_id,
                         metric=str(self.cfg.tracking.promote.metric))

    # ------------------------------------------------------------ the run
    def run_finished(self, rundir, status: str) -> None:
        from parathink.tracking.plots import write_run_plots

        plot_dir = rundir.local / ".tracking" / "plots"
        try:
            for png in write_run_plots(rundir, plot_dir, tuple(str(s) for s in self.cfg.stages)):
                self.parent.log_artifact(png, "plots")
            results = rundir.resolve_input("eval") / "results.json"
            if results.exists():
                self.parent.log_artifact(results)
            run_json = plot_dir.parent / "run.json"
            run_json.write_text(json.dumps(rundir.read_run(), indent=1, sort_keys=True))
            self.parent.log_artifact(run_json)
        finally:
            self.session.close_run(self.parent, status=status)
