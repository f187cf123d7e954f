"""The `teacher` stage: cold-start parallel traces (Parallel-R1 Sec. 3.1; NPR's self-distillation).

Reads the problems of ``teacher.problems`` (by default ``data.cold_start``), asks the configured backend for one
parallel trace per problem, and publishes ``raw.jsonl`` (``id, source, problem, answer, level, response`` plus
the backend's own fields) in problem order. Records are appended to ``work_dir/raw.jsonl`` as they finish, so
a killed or failed run resumes with no record lost or written twice. Its gate (``quality.data_gates.teacher_gate``):
records for enough of the problems, and the raw-traces suite (valid-format rate).
"""

from __future__ import annotations

import os
import time
from typing import Any

from omegaconf import DictConfig, OmegaConf

from parathink import jsonl
from parathink.errors import ConfigError
from parathink.quality.data_gates import TEACHER_KEYS as GATE_KEYS, teacher_gate as gate  # noqa: F401  (the runner's)
from parathink.stages.context import StageContext
from parathink.teacher import BACKENDS, RawStore, TeacherUnavailable
from parathink.teacher.traces import SUMMARIES

SHARED_KEYS = ("data", "format", "seed", "model")
OUTPUT_FIELDS = ("id", "source", "problem", "answer", "level", "response")
EXTRA_FIELDS = ("path_answers", "vote", "finish_reason")


def validate(cfg: DictConfig) -> None:
    t = cfg.teacher
    if t.backend not in BACKENDS:
        raise ConfigError(f"teacher.backend: {t.backend!r} is not one of {', '.join(BACKENDS)}")
    if t.backend == "scripted" and t.grammar != "parallel_r1":
        raise ConfigError(f"teacher.grammar: backend scripted writes parallel_r1 traces only, got {t.grammar!r}")
    for backend, key in (("hf", "model"), ("openai", "model"), ("vllm", "model")):
        if t.backend == backend and not t[backend][key]:
            raise ConfigError(f"teacher.{backend}.{key}: required for teacher.backend={backend}")
    if t.backend in ("scripted", "self") and int(t[t.backend].num_paths) < 2:
        raise ConfigError(f"teacher.{t.backend}.num_paths: a block needs >= 2 paths, got {t[t.backend].num_paths}")
    if t.backend == "self":
        _validate_self(t.self, str(t.grammar))
    limit = t.get("limit")
    if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool) or limit < 1):
        raise ConfigError(f"teacher.limit: must be an integer >= 1 (or null for all), got {limit!r}")
    problems = t.problems
    if not OmegaConf.is_list(problems) or len(problems) == 0:
        raise ConfigError("teacher.problems: a non-empty list of problem sets is required")
    for i, spec in enumerate(problems):
        if not OmegaConf.is_dict(spec) or not spec.get("source"):
            raise ConfigError(f"teacher.problems[{i}].source: missing")
        if t.backend == "scripted" and spec.source != "synthetic":
            raise ConfigError(f"teacher.problems[{i}].source: the scripted teacher handles synthetic problems only, "
                              f"got {spec.source!r}")
        if spec.source == "synthetic":
            from parathink.data import synthetic

            synthetic.check_spec(OmegaConf.to_container(spec, resolve=True), f"teacher.problems[{i}]")


def _validate_self(sec: DictConfig, grammar: str) -> None:
    from parathink.teacher.selfdistill import FORKS, PATH_COUNTS

    if sec.summary not in SUMMARIES:
        raise ConfigError(f"teacher.self.summary: {sec.summary!r} is not one of {', '.join(SUMMARIES)}")
    if sec.fork not in FORKS:
        raise ConfigError(f"teacher.self.fork: {sec.fork!r} is not one of {', '.join(FORKS)}")
    if sec.fork != "start" and grammar == "parathinker":
        raise ConfigError("teacher.self.fork: a ParaThinker block opens the response; only 'start' applies")
    if sec.path_count not in PATH_COUNTS:
        raise ConfigError(f"teacher.self.path_count: {sec.path_count!r} is not one of {', '.join(PATH_COUNTS)}")
    if not 1 <= int(sec.min_paths) <= int(sec.num_paths):
        raise ConfigError(f"teacher.self.min_paths: must be in 1..num_paths={sec.num_paths}, got {sec.min_paths}")


def load_problem_sets(specs: Any, seed: int, limit: int | None) -> list[dict]:
    from parathink.data.sources import load_problems

    problems, seen = [], set()
    for spec in OmegaConf.to_container(specs, resolve=True) if OmegaConf.is_config(specs) else specs:
        for rec in load_problems(spec, seed=seed):
            if rec["id"] not in seen:
                seen.add(rec["id"])
                problems.append(rec)
    return problems[:limit] if limit else problems


def _load(source: str, cfg: DictConfig):
    from parathink.distributed import device
    from parathink.modeling import load_model

    return load_model(source, device=device(), dtype=cfg.model.get("dtype"))  # a GPU when there is one


def make_backend(cfg: DictConfig, ctx: StageContext):
    t = cfg.teacher
    name = t.backend
    if name == "scripted":
        from parathink.teacher.scripted import ScriptedTeacher

        return ScriptedTeacher(list(t.scripted.strategies), int(t.scripted.num_paths), int(t.scripted.prefix_steps))
    if name in ("self", "hf"):
        import torch

        from parathink.teacher.generators import Sampling, make_generator, tag_token_ids

        sec = t[name]
        if sec.get("num_threads"):
            torch.set_num_threads(int(sec.num_threads))
        source = sec.model if sec.model else str(ctx.input("base") / "model")
        model, tok = _load(source, cfg)
        generator = make_generator(sec.get("generator", "hf"), model, tok, t.grammar)
        banned = tag_token_ids(tok) if sec.get("ban_tags") else ()
        sampling = Sampling(temperature=float(sec.temperature), top_p=float(sec.top_p),
                            max_new_tokens=int(sec.max_new_tokens), seed=int(cfg.seed), batch_size=int(sec.batch_size),
                            ban_token_ids=banned)
        if name == "self":
            from parathink.teacher.selfdistill import SelfTeacher

            return SelfTeacher(generator, tok, sampling, num_paths=int(sec.num_paths), chunk=int(sec.chunk),
                               summary=str(sec.summary), grammar=str(t.grammar), fork=str(sec.fork),
                               path_count=str(sec.path_count), min_paths=int(sec.min_paths))
        from parathink.teacher.hf import HFTeacher

        return HFTeacher(generator, tok, sampling, grammar=t.grammar)
    if name == "openai":
        from parathink.teacher.openai_http import OpenAIConfig, OpenAITeacher

        o = t.openai
        return OpenAITeacher(OpenAIConfig(
            base_url=o.base_url, model=o.model, api=o.api, api_key_env=o.api_key_env, concurrency=int(o.concurrency),
            timeout_s=float(o.timeout_s), max_retries=int(o.max_retries), backoff_s=float(o.backoff_s),
            max_tokens=int(o.max_tokens), temperature=float(o.temperature), top_p=float(o.top_p), grammar=t.grammar,
            extra_body=dict(o.extra_body) if o.get("extra_body") is not None else None))
    from parathink.teacher.vllm_offline import VLLMTeacher

    v = t.vllm
    return VLLMTeacher(v.model, temperature=float(v.temperature), top_p=float(v.top_p), max_tokens=int(v.max_tokens),
                       seed=int(cfg.seed), grammar=t.grammar, engine_kwargs=OmegaConf.to_container(v.engine_kwargs))


def output_record(rec: dict, backend: str) -> dict:
    out = {k: rec[k] for k in OUTPUT_FIELDS if rec.get(k) is not None}
    out.update({k: rec[k] for k in EXTRA_FIELDS if k in rec})
    out["teacher"] = backend
    return out


def _write_jsonl(path, records: list[dict]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w", encoding="utf-8") as f:
        for r in records:
            f.write(jsonl.dumps(r) + "\n")  # a lone surrogate from an endpoint stays escaped; the filter rejects it
    os.replace(tmp, path)


def _summary(records: list[dict], grammar: str) -> dict[str, float]:
    from parathink.formats import parse
    from parathink.grading import grade

    from parathink.formats.metrics import paths_histogram

    if not records:
        return {"parallel_rate": 0.0, "accuracy": 0.0}
    traces = [parse(r["response"], grammar) for r in records]
    correct = sum(grade(r["response"], r["answer"])[1] for r in records)
    # The share of blocks with each number of paths (NPR: plans per block, the teacher's choice the student learns).
    return {"parallel_rate": sum(t.parallel for t in traces) / len(records), "accuracy": correct / len(records),
            **{f"paths_hist.{n}": share for n, share in paths_histogram(traces).items()}}


def run(cfg: DictConfig, ctx: StageContext) -> dict[str, float]:
    t = cfg.teacher
    problems = load_problem_sets(t.problems, int(cfg.seed), t.get("limit"))
    store = RawStore(ctx.work_dir / "raw.jsonl")
    resumed = sum(p["id"] in store for p in problems)
    pending = [p for p in problems if p["id"] not in store]
    started = time.time()
    generated = 0
    if pending:
        backend = make_backend(cfg, ctx)
        bar = None
        if ctx.progress:
            from tqdm import tqdm

            bar = tqdm(total=len(problems), initial=resumed, desc=f"teacher ({t.backend})", unit="problem")
        try:
            for rec in backend.generate(pending):
                store.append(output_record(rec, t.backend))
                generated += 1
                if bar is not None:
                    bar.update(1)
        except TeacherUnavailable as e:
            raise TeacherUnavailable(f"{e}; {len(store)} of {len(problems)} records kept in {store.path}, "
                                     f"a rerun resumes from there") from None
        finally:
            store.close()
            if bar is not None:
                bar.close()
            if hasattr(backend, "close"):
                backend.close()
    elapsed = time.time() - started
    records = store.ordered(problems)
    missing = len(problems) - len(records)
    if missing:
        raise RuntimeError(f"teacher: backend {t.backend} returned no record for {missing} of {len(problems)} problems")
    _write_jsonl(ctx.out_dir / "raw.jsonl", records)
    metrics = {"problems": float(len(problems)), "generated": float(generated), "resumed": float(resumed),
               "seconds": elapsed, "records_per_s": generated / elapsed if elapsed > 0 else 0.0,
               **_summary(records, t.grammar)}
    ctx.tracker.log_metrics(metrics)
    return metrics
