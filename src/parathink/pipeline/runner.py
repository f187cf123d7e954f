"""The curriculum runner: compose and validate the config, then run stages with skip, resume and atomic publish.

``parathink run``, ``parathink stage NAME`` (what Airflow and Kubeflow call), ``parathink plan`` and ``parathink
demo`` are ``main_run``, ``main_stage``, ``main_plan`` and ``main_demo`` here (``parathink.cli`` dispatches); each
returns its exit code (``parathink.exits``: 0 ok, 2 bad config or input, 3 a quality gate failed, 1 anything else).

Per stage (docs/design.md, "The curriculum"):
1. the config hash covers the stage's section plus the shared keys it reads (``manifest.stage_config``);
2. a stage whose published manifest has the same config hash, whose recorded inputs still have the same
   output hashes, and whose files are intact is skipped;
3. otherwise, with a ``stage_cache`` set, an output of the same stage, config, seed and inputs that another run
   directory stored there is checked file by file and published as this one's (``parathink.rundir.cache``);
4. otherwise ``run(cfg, ctx)`` writes into a fresh temp folder; ``ctx.work_dir`` survives a kill (the stage
   keeps checkpoints there) unless the config hash changed; on return the runner hashes the outputs, writes
   the manifest and publishes atomically (and stores it in the stage cache), then clears ``work_dir``.
Under a multi-process launch (torchrun, ``accelerate launch``) rank 0 alone does 2 to 4's bookkeeping; stages
marked ``data_parallel`` run on every process, the rest on rank 0 while the others wait (``parathink.distributed``).
Stages are imported lazily by name (``parathink.stages.<name>``, ``parathink.stages.BUILTIN``, or the config's
``stage_modules`` mapping: a dotted module, ``module:attribute``, a ``.py`` file or a stage folder), so a missing
stage is a one-line config error; what each gives the runner is its ``StageSpec`` (``parathink.stages.contract``). Each
stage's log ends with one line that carries its metrics:
``[parathink] filter: done in 5.1 s, output 3f2a...; accepted=36 accepted_rate=0.45 ...``.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from parathink import distributed, storage
from parathink.errors import ConfigError, Unavailable
from parathink.evaluation import results as results_file
from parathink.exits import EXIT_OK, guarded
from parathink.jsonl import load_record
from parathink.logs import log, metrics_tail
from parathink.pipeline import gating
from parathink.pipeline.compose import compose
from parathink.placement import cluster, peak
from parathink.placement.roles import StageRole
from parathink.quality import GateFailed
from parathink.redact import redact_text
from parathink.rundir import provenance, timings
from parathink.rundir.cache import EntryDamaged, Hit, StageCache
from parathink.rundir.folder import RunDir, warn
from parathink.rundir.manifest import GATES, Manifest, config_hash, stage_config
from parathink.stages import BUILTIN
from parathink.stages.context import StageContext
from parathink.stages.contract import StageSpec, spec_of

ATTEMPT = "_attempt.json"  # in work_dir: which config hash the scratch belongs to


# ---------------------------------------------------------------- config

def stage_module(cfg: DictConfig, name: str) -> StageSpec:
    """The stage ``name``: ``stage_modules.<name>`` when the config maps it, else the built-in one."""
    target = str(cfg.get("stage_modules", {}).get(name, BUILTIN.get(name, f"parathink.stages.{name}")))
    if target.endswith(".py"):
        loaded = _load_file(name, target)
    elif "/" in target or Path(target).is_dir():
        loaded = _load_folder(name, target)
    else:
        loaded = _import_target(name, target)
    return spec_of(loaded, name, target)


def stage_roles(cfg: DictConfig, names: list[str]) -> dict[str, StageRole]:
    """{name: what the stage declares for placement and the memory model}, in order (``cluster.plan`` reads it)."""
    return {name: stage_module(cfg, name).role for name in names}


def _load_file(name: str, target: str) -> Any:
    path = Path(target)
    if not path.is_file():
        raise ConfigError(f"stage_modules.{name}: file {target} does not exist")
    spec = importlib.util.spec_from_file_location(f"parathink_stage_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _load_folder(name: str, target: str) -> Any:
    """A stage folder laid out as the built-in ones are (``__init__.py`` exporting ``STAGE``, beside it its gate
    and whatever else it needs, imported relatively): the plug-in form of a whole stage in one folder."""
    init = Path(target) / "__init__.py"
    if not init.is_file():
        raise ConfigError(f"stage_modules.{name}: folder {target} has no __init__.py (a stage folder exports STAGE "
                          "there)")
    module_name = f"parathink_stage_{name}"
    spec = importlib.util.spec_from_file_location(module_name, init, submodule_search_locations=[str(init.parent)])
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module  # its relative imports (``from .gate import ...``) resolve through here
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[module_name]
        raise
    return module


def _import_target(name: str, target: str) -> Any:
    """``package.module`` or ``package.module:attribute``."""
    module_name, _, attribute = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as err:
        if err.name and module_name.startswith(err.name):
            raise ConfigError(f"stage {name!r}: module {module_name} does not exist (not implemented yet?)") from err
        raise ConfigError(f"stage {name!r}: importing {module_name} failed: {err}") from err
    if not attribute:
        return module
    if not hasattr(module, attribute):
        raise ConfigError(f"stage {name!r}: {module_name} has no {attribute!r}")
    return getattr(module, attribute)


TRACKING_BACKENDS = ("mlflow", "jsonl", "none")


def _validate_run(cfg: DictConfig) -> None:
    """The keys every run reads: where it goes, its seed, how it is tracked."""
    run_dir = cfg.get("run_dir")
    if run_dir is None or not str(run_dir).strip():
        raise ConfigError(f"run_dir: must be a local path or an s3:// URI, got {run_dir!r}")
    try:
        storage.check_uri(str(run_dir))
    except storage.StorageError as err:
        raise ConfigError(f"run_dir: {err}") from None
    where = cfg.get("stage_cache")
    if where is not None:
        try:
            storage.check_uri(str(where))
        except storage.StorageError as err:
            raise ConfigError(f"stage_cache: {err}") from None
        if not str(where).strip():
            raise ConfigError("stage_cache: must be null, a local path or an s3:// URI, got ''")
    if not isinstance(cfg.get("seed"), int) or isinstance(cfg.seed, bool):
        raise ConfigError(f"seed: must be an integer, got {cfg.get('seed')!r}")
    if "tracking" in cfg and str(cfg.tracking.backend) not in TRACKING_BACKENDS:
        raise ConfigError(f"tracking.backend: {cfg.tracking.backend!r} is not one of {', '.join(TRACKING_BACKENDS)}")


def validate(cfg: DictConfig, names: list[str]) -> dict[str, StageSpec]:
    """Everything that can be checked before the first stage starts; returns the stages."""
    _validate_run(cfg)
    try:
        distributed.world_size()
    except ValueError as err:
        raise ConfigError(str(err)) from None
    stages = {}
    for name in names:
        if name not in cfg or not isinstance(cfg[name], DictConfig):
            raise ConfigError(f"stages: unknown stage {name!r} (no config section {name!r})")
        cluster.placement(cfg, name)  # the profile's values (quantities, counts), wherever the stage runs
        stages[name] = stage_module(cfg, name)
        if stages[name].validate:
            stages[name].validate(cfg)
        gating.validate(cfg, name, stages[name])
    for name in cfg.get("force", []):
        if name not in cfg:
            raise ConfigError(f"force: unknown stage {name!r}")
    return stages


# ---------------------------------------------------------------- one stage

def is_up_to_date(rundir: RunDir, name: str, chash: str) -> tuple[bool, str]:
    """(skip?, why) for stage ``name`` whose current config hash is ``chash``: its manifest, its inputs through the
    whole chain (``RunDir.stale_reason``) and its published bytes (``RunDir.damaged_files``) must all still hold."""
    m = rundir.manifest(name)
    if m is None:
        return False, "no published output"
    if m.config_hash != chash:
        return False, "config changed"
    why = rundir.stale_reason(name)
    if why:
        return False, why
    bad = rundir.damaged_files(m)
    if bad:
        log(f"{name}: {', '.join(bad[:5])} no longer what was published")
        return False, "published files missing or altered"
    return True, "up to date"


def _read_attempt(path: Path) -> dict:
    """What the interrupted attempt's scratch was made from; a damaged record discards the scratch."""
    attempt = load_record(path, "its scratch is discarded")
    if attempt is None or not isinstance(attempt.get("inputs", {}), dict):
        return {"config_hash": None} if path.exists() else {}
    return attempt


def _prepare_work_dir(rundir: RunDir, name: str, chash: str) -> tuple[Path, dict]:
    """The stage's scratch, kept for a resume only when it was made with this config from these inputs.

    A checkpoint trained on other data or settings must not be continued: the scratch is discarded when the
    config hash differs or when an input the interrupted attempt read has been republished since.
    """
    work = rundir.work_dir(name)
    attempt_file = work / ATTEMPT
    attempt = _read_attempt(attempt_file)
    stale = [inp for inp, h in attempt.get("inputs", {}).items() if rundir.output_hash(inp) != h]
    if attempt and (attempt.get("config_hash") != chash or stale):
        why = "config changed" if attempt.get("config_hash") != chash else f"input {stale[0]!r} changed"
        log(f"{name}: {why} since the interrupted attempt; discarding its scratch")
        shutil.rmtree(work)
        work.mkdir(parents=True)
        attempt = {}
    attempt["config_hash"] = chash
    attempt["attempts"] = attempt.get("attempts", 0) + 1
    attempt.setdefault("inputs", {})
    attempt_file.write_text(json.dumps(attempt))
    return work, attempt


def _torch_threads(n: int | None = None) -> int | None:
    """torch's intra-op thread count (set it when ``n`` is given); None when torch was never imported."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    if n is not None:
        torch.set_num_threads(n)
    return torch.get_num_threads()


def _default_threads() -> int:
    from parathink.threads import default_threads  # the pod's CPU quota and affinity, not the node's core count

    return default_threads()


def run_stage(cfg: DictConfig, name: str, stage: StageSpec, rundir: RunDir, tracking,
              procs: distributed.Group | None = None) -> dict:
    """Run (or skip) one stage; returns its manifest as a dict.

    Rank 0 holds the stage's lock (``parathink.rundir.lock``) from the up-to-date check to the publish, so no other
    process runs or publishes this stage meanwhile. Under a multi-process launch (``procs.size`` > 1) rank 0
    decides, tracks and publishes; a ``data_parallel`` stage runs on every process (each writes
    its outputs only on rank 0), any other runs on rank 0 while the rest wait.
    """
    procs = procs or distributed.Group()
    section = stage_config(cfg, name, stage.shared_keys)
    chash = config_hash(section)
    if not procs.is_main:
        return _follow_stage(cfg, name, stage, rundir, procs)
    with rundir.lock(name) as lock:
        return _lead_stage(cfg, name, stage, rundir, tracking, procs, section, chash, lock)


def _follow_stage(cfg: DictConfig, name: str, stage: StageSpec, rundir: RunDir, procs: distributed.Group) -> dict:
    """A rank other than 0: rank 0's decision, then the stage's work if it is data-parallel."""
    skip, _ = procs.broadcast(None)
    if skip and name not in list(cfg.get("force", [])):
        return {"stage": name, "status": "skipped"}
    procs.barrier()  # rank 0 prepares the scratch (it may discard a stale one)
    if stage.data_parallel:
        _run_on_other_rank(cfg, name, stage, rundir, procs.rank)
    procs.barrier()  # rank 0 publishes
    return {"stage": name, "status": "ran"}


def _lead_stage(cfg: DictConfig, name: str, stage: StageSpec, rundir: RunDir, tracking,
                procs: distributed.Group, section: dict, chash: str, lock) -> dict:
    """Rank 0: skip the stage when it is up to date, else run it, judge its gate and publish."""
    forced = name in list(cfg.get("force", []))
    cache = StageCache.from_config(cfg)
    decision = is_up_to_date(rundir, name, chash)
    hit = None
    if not decision[0] and not forced and cache is not None:
        hit = _from_cache(cache, name, chash, int(cfg.seed), rundir)
        decision = (True, "cache hit") if hit else (False, f"{decision[1]}; not in the stage cache")
    skip, why = procs.broadcast(decision)
    if skip and not forced:
        if hit is not None:
            said = f"stage {name}: cache hit from {hit.key} (produced by run {hit.produced_by})"
            return _skip(cfg, name, stage, rundir, tracking, said, status="cached")
        _keep_in_cache(cache, rundir, name)
        return _skip(cfg, name, stage, rundir, tracking, f"{name}: skipped ({why})")
    work, attempt = _prepare_work_dir(rundir, name, chash)
    procs.barrier()
    on_every_rank = stage.data_parallel
    where = f" on {procs.size} processes" if procs.size > 1 and on_every_rank else ""
    log(f"{name}: running{where} ({why}{'; forced' if forced else ''}"
        f"{'; resuming from its work dir' if attempt['attempts'] > 1 else ''})")
    tracker = tracking.stage_tracker(name, work, section)
    manifest = Manifest(stage=name, config_hash=chash, config=section, inputs={}, seed=int(cfg.seed),
                        started_at=time.time(), mlflow_run_id=getattr(tracker, "run_id", None))
    tmp = rundir.fresh_tmp(name)
    try:
        published, gate_error = _run_and_publish(cfg, name, stage, rundir, manifest, tmp, work, attempt,
                                                 tracker, lock)
    except BaseException:
        tracking.stage_failed(name, tracker)
        raise
    tracking.stage_done(name, tracker, manifest, published)
    if gate_error is None and not (manifest.gates and manifest.gates.get("passed") is False):
        _store(cache, published, manifest, rundir)  # only what the next stage may consume
    if published == tmp:
        shutil.rmtree(tmp, ignore_errors=True)
    shutil.rmtree(work, ignore_errors=True)  # finished: the scratch (checkpoints) is no longer needed
    procs.barrier()
    log(f"{name}: done in {manifest.duration_s:.1f} s, output {manifest.output_hash}{metrics_tail(manifest.metrics)}")
    if gate_error is not None:
        raise gate_error  # no verdict: the next run evaluates the gate again, without recomputing the stage
    gating.raise_if_failed(name, manifest.gates, rundir.stage_uri(name))
    return {"status": "ran", **json.loads(manifest.to_json())}


def _skip(cfg: DictConfig, name: str, stage: StageSpec, rundir: RunDir, tracking, said: str,
          status: str = "skipped") -> dict:
    """An up-to-date stage (or one just published from the stage cache): its published verdict stands (judged again
    only when its thresholds changed)."""
    published = rundir.manifest(name)
    log(f"{said}{metrics_tail(published.metrics)}")
    if gating.needs_evaluation(cfg, name, stage, published):
        gating.recheck(cfg, name, stage, rundir, published, tracking)
    gating.raise_if_failed(name, published.gates, rundir.stage_uri(name))
    return {"stage": name, "status": status, **json.loads(published.to_json())}


# ---------------------------------------------------------------- the stage cache (parathink.rundir.cache)

def _from_cache(cache: StageCache, name: str, chash: str, seed: int, rundir: RunDir) -> Hit | None:
    """Publish the stage's output from the cache when an entry was made from what this run directory holds; the
    hit, or None (no entry, a damaged one, or a store that cannot be read: the stage runs, with a warning)."""
    tmp, hit = rundir.fresh_tmp(name), None
    try:
        hit = cache.lookup(name, chash, seed, rundir, warn)
        if hit is None:
            return None
        cache.fetch(hit, tmp)
        rundir.publish(name, tmp, hit.entry)
        return hit
    except EntryDamaged as err:
        warn(f"stage cache entry {hit.key} of {name} is not used ({err}); the stage runs")
        return None
    except (OSError, Unavailable) as err:  # StorageError is an OSError
        warn(f"stage cache {cache.root}: not read ({err}); the stage runs")
        return None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _store(cache: StageCache | None, folder: Path, manifest: Manifest, rundir: RunDir) -> None:
    """Store a published output; a store that cannot be written is a warning, never the run's failure."""
    if cache is None:
        return
    try:
        key = cache.store(folder, manifest, rundir.root)
    except (OSError, Unavailable) as err:
        warn(f"stage cache {cache.root}: {manifest.stage} not stored ({err})")
        return
    log(f"stage {manifest.stage}: stored in the stage cache as {key}")


def _keep_in_cache(cache: StageCache | None, rundir: RunDir, name: str) -> None:
    """An up-to-date output the cache does not hold (made before ``stage_cache`` was set, or the store was
    emptied): stored now, so that the next run directory finds it."""
    m = rundir.manifest(name)
    if cache is None or m is None or (m.gates and m.gates.get("passed") is False):
        return
    try:
        held = cache.holds(m)
    except (OSError, Unavailable) as err:
        warn(f"stage cache {cache.root}: not read ({err})")
        return
    if not held:
        _store(cache, rundir.resolve_input(name), m, rundir)


def _run_and_publish(cfg: DictConfig, name: str, stage: StageSpec, rundir: RunDir, manifest: Manifest, tmp: Path,
                     work: Path, attempt: dict, tracker, lock) -> tuple[Path, Exception | None]:
    """Run the stage into ``tmp``, record what it read and made, judge its gate, publish. Returns where it was
    published and the error that kept the gate from reaching a verdict (None when it reached one)."""
    inputs = manifest.inputs

    def resolve(other: str) -> Path:
        rundir.check_input(other)  # altered after publishing, or made from replaced inputs: never consumed
        inputs[other] = rundir.output_hash(other)  # recorded even when absent: its arrival triggers a rerun
        attempt["inputs"] = dict(inputs)  # what this attempt's scratch was made from
        (work / ATTEMPT).write_text(json.dumps(attempt))
        return rundir.resolve_input(other)

    ctx = StageContext(name=name, out_dir=tmp, work_dir=work, seed=int(cfg.seed), tracker=tracker,
                       resolve_input=resolve)
    per_stage = peak.reset_peak()  # the stage's own peak, not the largest of the stages before it in this process
    # the stage and its gate's probe (plan's device_memory covers both); on a CPU only where asked for (scale=cpu)
    with peak.DevicePeak(cfg.get("measure_device_memory")) as device_peak:
        with provenance.recording() as external:
            metrics = _call(stage, cfg, ctx)
        # Where the peak cannot be reset the figure is the process's so far: named so, not passed off as the stage's.
        metrics["peak_rss_mb" if per_stage else "process_peak_rss_mb"] = round(peak.peak_rss_mb(), 1)
        manifest.inputs, manifest.external = dict(inputs), dict(external)
        manifest.finish(tmp, metrics)
        # The gate judges the finished output before it is published, so the verdict is published with it; an
        # output whose gate fails (or cannot be evaluated) is still published, for inspection, and never consumed.
        manifest.gates, gate_error = gating.evaluate(cfg, name, stage, tmp, tmp / GATES, manifest, rundir)
    timings.write(tmp, device_memory=device_peak.record(_device_estimate(cfg, name, stage.role)))
    lock.check()  # a lease lost while the stage ran (taken over, broken): another process owns the output now
    return rundir.publish(name, tmp, manifest), gate_error


def _device_estimate(cfg: DictConfig, name: str, role: StageRole) -> int | None:
    """The bytes ``parathink plan`` estimated for this stage on this placement (None: it holds no model)."""
    memory_plan = cluster.plan(cfg, {name: role})[name].device_memory
    return None if memory_plan is None else memory_plan.get("estimate_bytes")


def _call(stage: StageSpec, cfg: DictConfig, ctx: StageContext) -> dict:
    threads = _torch_threads()
    try:
        return stage.run(cfg, ctx) or {}
    finally:
        # A stage may pin torch's threads (the teacher runs on 1); `parathink run` executes every stage in one
        # process, so without this the next stage would silently inherit it.
        _torch_threads(threads if threads is not None else _default_threads())


def _run_on_other_rank(cfg: DictConfig, name: str, stage: StageSpec, rundir: RunDir, rank: int) -> None:
    """A data-parallel stage on a rank other than 0: the same scratch (checkpoints are loaded by every rank),
    its own throw-away output folder, no tracking, no manifest."""
    tmp = rundir.fresh_tmp(f"{name}.rank{rank}")
    ctx = StageContext(name=name, out_dir=tmp, work_dir=rundir.work_dir(name), seed=int(cfg.seed),
                       resolve_input=rundir.resolve_input, progress=False)
    try:
        _call(stage, cfg, ctx)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# ---------------------------------------------------------------- a run

def quiet_progress_under_ci() -> None:
    """Under CI no progress bars at all: ours follow ``ctx.progress``; tqdm and Hugging Face's follow these."""
    if os.environ.get("CI", "").lower() in ("1", "true"):
        os.environ.setdefault("TQDM_DISABLE", "1")
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
        if "transformers" in sys.modules:
            sys.modules["transformers"].utils.logging.disable_progress_bar()


def execute(cfg: DictConfig, names: list[str]) -> dict[str, dict]:
    """Validate everything, then run ``names`` in order in ``cfg.run_dir``; returns each stage's record.

    Nothing is created before the config is valid, the tracking server answers, the stage cache (if any) can be
    used and the run directory can be written: a bad value leaves no folder and no FAILED run in MLflow.
    """
    from parathink.tracking.curriculum import CurriculumTracking

    quiet_progress_under_ci()
    stages = validate(cfg, names)
    names = [n for n in names if cfg[n].get("enabled", True)]
    procs = distributed.group()  # one process: the identity; under torchrun: joins the processes here
    if procs.is_main:
        CurriculumTracking.check_reachable(cfg)
        if (cache := StageCache.from_config(cfg)) is not None:
            cache.probe()
    rundir = RunDir(str(cfg.run_dir), cfg.get("cache_dir"), process_rank=procs.rank)
    if not procs.is_main:  # rank 0 alone writes run.json and tracks
        records = {name: run_stage(cfg, name, stages[name], rundir, CurriculumTracking(cfg), procs) for name in names}
        distributed.finish()
        return records
    rundir.probe()
    started: dict = {}

    def start(meta: dict) -> None:  # under the run's lock: one MLflow parent run however many processes start
        meta.setdefault("experiment", str(cfg.experiment_name))
        meta.setdefault("created", time.time())
        started["tracking"] = CurriculumTracking.from_config(cfg, rundir, meta)

    rundir.update_run(start)
    records = _run_stages(cfg, names, stages, rundir, started["tracking"], procs)
    distributed.finish()
    return records


def _run_stages(cfg: DictConfig, names: list[str], stages: dict[str, StageSpec], rundir: RunDir, tracking,
                procs: distributed.Group) -> dict[str, dict]:
    """Rank 0: the stages in order, each one's outcome in run.json; the MLflow parent run closed either way."""
    records: dict[str, dict] = {}
    status = "FAILED"
    gate_failed = False
    try:
        for name in names:
            try:
                records[name] = run_stage(cfg, name, stages[name], rundir, tracking, procs)
            except GateFailed:
                gate_failed = True
                _record_gate_failure(rundir, name)
                raise
            entry = {k: records[name].get(k) for k in ("status", "output_hash", "duration_s", "mlflow_run_id")}
            entry["gate_passed"] = (records[name].get("gates") or {}).get("passed")
            # update_run calls it at once; the defaults bind this iteration's name and entry all the same.
            rundir.update_run(lambda meta, name=name, entry=entry: meta.setdefault("stages", {}).__setitem__(
                name, entry))
        status = "FINISHED"
    finally:
        if records or gate_failed:  # not when nothing got as far as publishing (e.g. another process held the lock)
            _write_report(cfg, names, rundir)
        tracking.run_finished(rundir, status=status)
    return records


def _write_report(cfg: DictConfig, names: list[str], rundir: RunDir) -> None:
    """``report.md`` over every stage of the experiment that has published, after every run, passed or failed.
    A report that cannot be written is a warning: it must never hide the run's own outcome."""
    from parathink import report

    stages = list(dict.fromkeys([str(s) for s in cfg.stages] + names))
    try:
        log(f"report: {report.write(rundir, str(cfg.experiment_name), stages)}")
    except Exception as err:
        log(f"warning: report.md not written ({type(err).__name__}: {err})")


def _record_gate_failure(rundir: RunDir, name: str) -> None:
    """run.json's entry of a stage whose published output did not pass its gate."""
    if not rundir.gate_failed(name):
        return  # its input's gate failed, or the stage raised GateFailed itself before publishing
    m = rundir.manifest(name)
    entry = {"status": "gate_failed", "gate_passed": False, "output_hash": m.output_hash if m else None,
             "duration_s": m.duration_s if m else None, "mlflow_run_id": m.mlflow_run_id if m else None}
    rundir.update_run(lambda meta: meta.setdefault("stages", {}).__setitem__(name, entry))


# ---------------------------------------------------------------- the commands (parathink.cli dispatches)

def main_run(overrides: list[str]) -> int:
    """``parathink run [overrides]``: every stage of ``cfg.stages`` in order."""
    def go():
        cfg = compose(overrides)
        execute(cfg, [str(s) for s in cfg.stages])
    return guarded(go)


def main_stage(name: str, overrides: list[str]) -> int:
    """``parathink stage NAME [overrides]``: one stage (skipped when its output is up to date)."""
    def go():
        cfg = compose(stage_aliases(name, overrides))
        execute(cfg, [name])
    return guarded(go)


def stage_aliases(name: str, overrides: list[str]) -> list[str]:
    """Short overrides a built-in stage accepts (filter: ``input=``, ``output=``, ``gate.*=``), expanded."""
    target = BUILTIN.get(name, f"parathink.stages.{name}")
    try:
        stage = spec_of(_import_target(name, target), name, target)
    except ConfigError:
        return overrides  # unknown stage: compose/execute report it
    return stage.expand_overrides(overrides) if stage.expand_overrides else overrides


def plan_document(cfg: DictConfig, names: list[str], given: list[str] | None = None) -> dict:
    """What an orchestrator needs to place a run: its stages in order, each stage's placement, the tracking store.

    The config is validated exactly as ``parathink run`` validates it, so a bad override fails here, in seconds,
    with the same one-line error (docs/orchestration.md).
    """
    from parathink.config import deployment
    from parathink.placement import cluster, podspec

    specs = validate(cfg, names)  # each stage loaded once: its role is read off the spec validate loaded
    names = [n for n in names if cfg[n].get("enabled", True)]
    placements = cluster.plan(cfg, {n: specs[n].role for n in names})
    t = cfg.get("tracking") or {}
    return {
        "experiment": str(cfg.experiment_name),
        "run_dir": str(cfg.run_dir),
        "seed": int(cfg.seed),
        "stages": names,
        "cluster": {"name": str(cfg.cluster.name), "accelerator": str(cfg.cluster.accelerator),
                    "runs_root": str(cfg.cluster.runs_root)},
        # What the deployment set and where each came from: the command line, its environment, the profile
        # (config.deployment).
        "deployment": deployment.provenance(os.environ, list(given or []), cfg),
        # Where every pod of a cluster finds the run directory, or null when none can (placement.cluster.pod_run_dir).
        "pod_run_dir": cluster.pod_run_dir(str(cfg.run_dir), str(cfg.cluster.runs_root),
                                           next(iter(placements.values())).volume if placements else None),
        "placement": {n: p.to_dict() for n, p in placements.items()},
        # What this installation can run itself: an orchestrator refuses a local executor that would fail an hour
        # in (the orchestrator image's parathink plans only: no torch, no kfp).
        "runtime": {m: importlib.util.find_spec(m) is not None for m in ("torch", "kfp")},
        # Each stage's Pod without its command (the orchestrator adds it): Airflow's pod template (placement.podspec).
        "pods": {n: podspec.pod(p) for n, p in placements.items()},
        "tracking": {k: (redact_text(str(t.get(k))) if t.get(k) is not None else None)
                     for k in ("backend", "uri", "experiment", "registered_model")},
    }


def main_plan(overrides: list[str]) -> int:
    """``parathink plan [overrides]``: validate the config and print the run's placement as one JSON object."""
    def go():
        cfg = compose(overrides)
        print(json.dumps(plan_document(cfg, [str(s) for s in cfg.stages], overrides), indent=1))
    return guarded(go)


def main_demo(argv: list[str]) -> int:
    """``parathink demo [overrides]``: the tiny curriculum, then its table and how to open MLflow."""
    state: dict = {}

    def go():
        cfg = compose(["experiment=tiny", *argv])
        started = time.time()
        execute(cfg, [str(s) for s in cfg.stages])
        state["cfg"], state["minutes"] = cfg, (time.time() - started) / 60
    code = guarded(go)
    if code != EXIT_OK or distributed.rank() != 0:  # one process prints the table
        return code
    _print_demo_summary(state["cfg"], state["minutes"])
    return EXIT_OK


def _print_demo_summary(cfg: DictConfig, minutes: float) -> None:
    from parathink.evaluation.table import format_table, format_vs_start

    rundir = RunDir(str(cfg.run_dir), cfg.get("cache_dir"))
    results_dir = rundir.resolve_input("eval")
    if (results_dir / results_file.FILE).exists():
        results = results_file.read(results_dir)
        print(format_table(results))
        deltas = format_vs_start(results)
        if deltas:
            print("\n" + deltas)
    print(f"\ncurriculum finished in {minutes:.1f} min; run directory: {rundir.root}")
    print(f"report: {storage.join(rundir.root, 'report.md')} (stage times, gates, this table, Figure 3)")
    if cfg.tracking.backend == "mlflow":
        mlflow_bin = Path(sys.executable).with_name("mlflow")
        print(f"MLflow UI:  {mlflow_bin if mlflow_bin.exists() else 'mlflow'} ui --backend-store-uri "
              f"{redact_text(str(cfg.tracking.uri))} --port 5000   (run it here, then open http://127.0.0.1:5000; "
              f"experiment {cfg.tracking.experiment}, registered model {cfg.tracking.registered_model})")

