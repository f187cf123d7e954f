"""The ``eval`` stage: every model stage present in the run, on every configured set (Parallel-R1 §4.1).

Writes ``<stage>/<set>.jsonl`` (one line per problem, every sample with its verdicts) and ``results.json``
(``{"stages": {stage: {set: {accuracy, pass_at_k, parallel_rate, relative_position, n, ...}}}}``). A model
stage absent from the run directory is skipped and named in ``results.json["missing"]``. Each finished
(stage, set) is kept in ``work_dir`` under the model's content hash, so a killed eval resumes where it stopped.
Its gate (``stages.eval.gate``): every model of the run evaluated on every set with its full size, no NaN.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from parathink import distributed, storage
from parathink.config.eval import EvalConfig, stage_mode
from parathink.config.thresholds import EvalThresholds
from parathink.errors import StageInputMissing
from parathink.evaluation import results as results_file
from parathink.evaluation.sets import active_sets, problems_and_k
from parathink.jsonl import load_record
from parathink.logs import log
from parathink.placement.roles import StageRole
from parathink.stages.context import StageContext
from parathink.stages.contract import Gate, StageSpec
from parathink.stages.eval.gate import eval_gate

# Per model and set, the figures the manifest (and so MLflow) carries; results.json keeps every figure.
MANIFEST_KEYS = ("accuracy", "pass_at_k", "parallel_rate", "path_accuracy", "any_path_accuracy")


def validate(cfg: DictConfig) -> None:
    EvalConfig.from_cfg(OmegaConf.to_container(cfg.eval, resolve=True))


def _model_hash(model_dir: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(model_dir.rglob("*")):
        if p.is_file():
            h.update(p.relative_to(model_dir).as_posix().encode())
            h.update(hashlib.sha256(p.read_bytes()).digest())
    return h.hexdigest()[:16]


def _cached_summary(meta: Path, fingerprint: str) -> dict | None:
    """The summary an interrupted attempt left for this model, or None (absent, another model's, or damaged)."""
    data = load_record(meta, "that set is evaluated again")
    if data is None or data.get("model_hash") != fingerprint or not isinstance(data.get("summary"), dict):
        return None
    return data["summary"]


def eval_rows(cfg: DictConfig, stage: str, sets: dict) -> list[tuple[str, str, int]]:
    """(row, set, paths) a stage's model is scored on: every set at ``eval.num_paths`` paths per block, and in
    structured mode at each of ``eval.path_counts`` as ``<set>@N`` (ParaThinker's table: accuracy and time against
    the number of paths)."""
    e = cfg.eval
    rows = [(name, name, e.num_paths) for name in sets]
    if stage_mode(cfg, stage) == "structured":
        rows += [(f"{name}@{n}", name, n) for name in sets for n in e.path_counts]
    return rows


class _Sampler:
    """The stage's model, loaded on first use, and one generator per number of paths: the native engine's, or
    (``eval.rollout.backend=vllm``) a vLLM engine of its own venv serving the model folder, closed by ``close``."""

    def __init__(self, cfg: DictConfig, ctx: StageContext, stage: str, model_dir: Path):
        self.cfg, self.ctx, self.stage, self.model_dir = cfg, ctx, stage, model_dir
        self.model = self.tokenizer = None
        self.generators: dict[int, tuple] = {}
        self.engines: list = []  # vLLM's, to close

    def close(self) -> None:
        for engine in self.engines:
            engine.close()
        self.engines = []

    def __call__(self, paths: int, seed: int) -> tuple:
        import torch

        from parathink.config.eval import sampling_config
        from parathink.evaluation.generators import engine_generator, vllm_generator
        from parathink.modeling import load_model, load_tokenizer
        from parathink.placement.memory_model import engine_kv_bytes

        e = self.cfg.eval
        if e.rollout.backend == "vllm":
            if paths not in self.generators:
                self.tokenizer = self.tokenizer or load_tokenizer(self.model_dir)
                config = json.loads((self.model_dir / "config.json").read_text(encoding="utf-8"))
                dtype = str(self.cfg.model.dtype)
                generate, name, engine = vllm_generator(
                    self.model_dir, self.tokenizer, grammar=str(self.cfg.format), num_paths=paths,
                    sampling=sampling_config(e.sampling, batch_size=e.batch_size, seed=seed), dtype=dtype,
                    kv_cache_bytes=engine_kv_bytes(e, "eval", config, dtype, distributed.device_memory(),
                                                   kind="eval"), seed=seed)
                self.engines.append(engine)
                self.generators[paths] = (generate, name)
            return self.generators[paths]
        if self.model is None:
            torch.manual_seed(self.ctx.seed)
            # in model.dtype: a training stage publishes fp32 masters, the engine samples in the run's dtype
            self.model, self.tokenizer = load_model(self.model_dir, device=distributed.device(),  # a GPU if any
                                                    dtype=self.cfg.model.dtype)
        if paths not in self.generators:
            self.generators[paths] = engine_generator(
                self.model, self.tokenizer, grammar=str(self.cfg.format), mode=stage_mode(self.cfg, self.stage),
                num_paths=paths, sampling=sampling_config(e.sampling, batch_size=e.batch_size, seed=seed),
                kv_cache_bytes=engine_kv_bytes(e, "eval", self.model.config.to_dict(), str(self.cfg.model.dtype),
                                               distributed.device_memory(), kind="eval"))
        return self.generators[paths]


def _sample_row(cfg: DictConfig, ctx: StageContext, label: str, spec: dict, generator: tuple, tokenizer) -> tuple:
    """(problems, summary) of one row; under a multi-process launch each process samples every size-th problem and
    the results are put back in the set's order, so the summary and the files are those of the whole set."""
    from parathink.evaluation.evaluate import evaluate_set, summarize_set

    e, procs = cfg.eval, distributed.group()
    generate, backend = generator
    records, k = spec["records"], int(spec["k"])
    mine = records[procs.rank::procs.size]
    bar = _bar(ctx, len(mine) * k, f"eval {label}") if procs.is_main else None
    problems, local = evaluate_set(mine, generate, k, grammar=str(cfg.format), tokenizer=tokenizer,
                                   batch_problems=e.batch_problems, progress=bar)
    if bar is not None:
        bar.close()
    shares = procs.gather(problems)
    problems = [shares[j % procs.size][j // procs.size] for j in range(len(records))]
    summary = summarize_set(problems, k, str(cfg.format))
    summary.update(generator=backend, k_from=spec["k_from"], repeats=spec["repeats"],
                   seconds_per_sample=local["seconds_per_sample"])  # this process's sampling time
    return problems, summary


def _evaluate_stage(cfg: DictConfig, ctx: StageContext, stage: str, model_dir: Path, sets: dict) -> dict:
    fingerprint = _model_hash(model_dir)
    rows, sampler = {}, _Sampler(cfg, ctx, stage, model_dir)
    try:
        return _evaluate_rows(cfg, ctx, stage, sets, sampler, fingerprint, rows)
    finally:
        sampler.close()


def _evaluate_rows(cfg: DictConfig, ctx: StageContext, stage: str, sets: dict, sampler: _Sampler, fingerprint: str,
                   rows: dict) -> dict:
    procs = distributed.group()
    for i, (row, set_name, paths) in enumerate(eval_rows(cfg, stage, sets)):
        cache = ctx.work_dir / stage / f"{row}.jsonl"
        meta = cache.with_suffix(".summary.json")
        summary = _cached_summary(meta, fingerprint) if cache.exists() else None
        if row != set_name and paths == cfg.eval.num_paths:  # the set's own row has this many paths
            rows[row], cache = rows[set_name], ctx.work_dir / stage / f"{set_name}.jsonl"
        elif procs.broadcast(summary is not None):  # rank 0's view of the shared scratch decides for every process
            rows[row] = summary if summary is not None else _cached_summary(meta, fingerprint)
            if procs.is_main:
                log(f"eval: {stage}/{row} reused from the interrupted attempt")
        else:
            generator = sampler(paths, seed=ctx.seed * 1000 + i + 7_919 * procs.rank)
            problems, rows[row] = _sample_row(cfg, ctx, f"{stage}/{row}", sets[set_name], generator,
                                              sampler.tokenizer)
            if procs.is_main:
                storage.write_text(cache, "".join(json.dumps(p) + "\n" for p in problems))
                storage.write_text(meta, json.dumps({"model_hash": fingerprint, "summary": rows[row]}))
        if not procs.is_main:
            continue
        out = ctx.out_dir / stage / f"{row}.jsonl"
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(cache.read_bytes())
        ctx.tracker.log_metrics(_loggable(f"{stage}.{row}", rows[row]))
    return rows


def _loggable(prefix: str, row: dict) -> dict[str, float]:
    """A row's numbers as tracker metrics; the paths-per-block distribution as one metric per count."""
    flat = {f"{prefix}.{k}": v for k, v in row.items() if isinstance(v, (int, float))}
    flat.update({f"{prefix}.paths_hist.{n}": v for n, v in (row.get("paths_hist") or {}).items()})
    return flat


def start_of(cfg: DictConfig, stage: str) -> str | None:
    """The model stage ``stage`` trains from: its ``init_from``; sft starts from base; base from nothing."""
    if stage == "base":
        return None
    node = cfg.get(stage)
    start = node.get("init_from") if node is not None else None
    return str(start) if start else ("base" if stage == "sft" else None)


def vs_start(cfg: DictConfig, out_dir: Path, stages: dict) -> dict:
    """Each evaluated stage against its evaluated start, per set: the paired difference of mean@k over the
    same problems and its standard error ({stage: {set: {start, delta, se, n_problems}}})."""
    from parathink.evaluation.metrics import paired_difference

    read: dict[tuple[str, str], dict[str, float]] = {}  # a start (base, rl_easy) serves several stages

    def per_problem(stage: str, set_name: str) -> dict[str, float]:
        if (stage, set_name) not in read:
            lines = (out_dir / stage / f"{set_name}.jsonl").read_text(encoding="utf-8").splitlines()
            read[stage, set_name] = {str(p["id"]): float(p["accuracy"]) for p in map(json.loads, lines)}
        return read[stage, set_name]

    out: dict = {}
    for stage, sets in stages.items():
        start = start_of(cfg, stage)
        if start not in stages:
            continue
        for set_name in sets:  # a row at N paths pairs with the start's row of its set (ParaThinker: sequential)
            if set_name not in stages[start] and set_name.partition("@")[0] not in stages[start]:
                continue
            base_set = set_name if set_name in stages[start] else set_name.partition("@")[0]
            a, b = per_problem(stage, set_name), per_problem(start, base_set)
            ids = [i for i in a if i in b]
            if len(ids) < 2:
                continue
            delta, se = paired_difference([a[i] for i in ids], [b[i] for i in ids])
            out.setdefault(stage, {})[set_name] = {"start": start, "start_set": base_set, "delta": delta, "se": se,
                                                   "n_problems": len(ids)}
    return out


def _bar(ctx: StageContext, total: int, desc: str):
    if not ctx.progress:
        return None
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit="sample", leave=False)


def run(cfg: DictConfig, ctx: StageContext) -> dict[str, float]:
    validate(cfg)
    sets = {}
    for name, node in active_sets(cfg).items():
        spec = OmegaConf.to_container(node, resolve=True)
        records, k = problems_and_k(name, spec, ctx.seed)
        sets[name] = {**spec, "records": records, **k}
    results: dict = {"stages": {}, "missing": [],
                     "settings": {"sampling": OmegaConf.to_container(cfg.eval.sampling, resolve=True),
                                  "mode": cfg.eval.mode, "format": str(cfg.format),
                                  "num_paths": cfg.eval.num_paths, "path_counts": list(cfg.eval.path_counts)}}
    for stage in cfg.eval.models:
        try:
            model_dir = ctx.input(str(stage)) / "model"
        except StageInputMissing:
            results["missing"].append(str(stage))
            log(f"eval: no {stage} output in the run directory; skipped")
            continue
        if not (model_dir / "config.json").exists():
            raise StageInputMissing(f"eval: {model_dir} has no config.json (is {stage!r} a model stage?)")
        results["stages"][str(stage)] = _evaluate_stage(cfg, ctx, str(stage), model_dir, sets)
    if not results["stages"]:
        raise StageInputMissing(f"eval: none of {list(cfg.eval.models)} has published a model in this run")
    if not distributed.group().is_main:
        return {}  # rank 0 writes the results
    results["vs_start"] = vs_start(cfg, ctx.out_dir, results["stages"])
    results_file.write(results, ctx.out_dir)
    return {f"{stage}.{s}.{key}": float(row[key]) for stage, sets_ in results["stages"].items()
            for s, row in sets_.items() for key in MANIFEST_KEYS if row.get(key) is not None}


# The model comes from the stages' outputs, hashed as inputs, so `model` is not a shared key. Under torchrun every
# process samples its share of each set's problems; rank 0 writes the files.
STAGE = StageSpec(run=run, validate=validate, gate=Gate(eval_gate, EvalThresholds), data_parallel=True,
                  shared_keys=("data", "format", "seed"), role=StageRole(memory="eval"))
