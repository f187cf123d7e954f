"""The `teacher` stage: cold-start parallel traces (Parallel-R1 Sec. 3.1; NPR's self-distillation).

Reads the problems of ``teacher.problems`` (by default ``data.cold_start``), asks the configured backend for one
parallel trace per problem, and publishes ``raw.jsonl`` (``id, source, problem, answer, level, response`` plus
the backend's own fields) in problem order. Records are appended to ``work_dir/raw.jsonl`` as they finish, so
a killed or failed run resumes with no record lost or written twice. Its gate (``stages/teacher/gate.py``):
records for enough of the problems, and the raw-traces suite (valid-format rate).
"""

from __future__ import annotations

import dataclasses
import os
import time
from typing import Any

from omegaconf import DictConfig, OmegaConf

from parathink import jsonl
from parathink.config.teacher import TeacherConfig
from parathink.config.thresholds import TeacherThresholds
from parathink.placement.roles import StageRole
from parathink.stages.context import StageContext
from parathink.stages.contract import Gate, StageSpec
from parathink.stages.teacher.gate import teacher_gate
from parathink.teacher import RawStore, TeacherUnavailable

OUTPUT_FIELDS = ("id", "source", "problem", "answer", "level", "response")
EXTRA_FIELDS = ("path_answers", "vote", "finish_reason")


def validate(cfg: DictConfig) -> None:
    TeacherConfig.of(cfg)


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
    t = TeacherConfig.of(cfg)
    if t.backend == "scripted":
        from parathink.teacher.scripted import ScriptedTeacher

        return ScriptedTeacher(list(t.scripted.strategies), t.scripted.num_paths, t.scripted.prefix_steps)
    if t.backend in ("self", "hf"):
        return _sampling_teacher(t, cfg, ctx)
    if t.backend == "openai":
        from parathink.teacher.openai_http import OpenAIConfig, OpenAITeacher

        return OpenAITeacher(OpenAIConfig(**dataclasses.asdict(t.openai), grammar=t.grammar))
    from parathink.placement.cluster import placement
    from parathink.teacher.vllm_offline import VLLMTeacher

    v = t.vllm
    # The engines over the pod's GPUs, as `parathink plan` prints them (placement.teacher.engines).
    engines = placement(cfg, "teacher").engines or {"engines": 1, "gpus_per_engine": 1}
    release_device_memory()
    return VLLMTeacher(v.model, temperature=v.temperature, top_p=v.top_p, max_tokens=v.max_tokens, seed=int(cfg.seed),
                       grammar=t.grammar, engine_kwargs=dict(v.engine_kwargs), engines=engines["engines"],
                       gpus_per_engine=engines["gpus_per_engine"])


def release_device_memory() -> None:
    """Hand back the GPU memory this process's allocator still caches before the vLLM workers start.

    In ``parathink run`` the base stage's gate probed the model on this process's GPU first; its tensors are gone
    once the stage returns, but torch's caching allocator keeps their blocks reserved, and vLLM sizes its KV cache
    from what the GPU has free (``gpu_memory_utilization`` of the whole card): a worker beside tens of GB still
    reserved would start with a smaller cache, or refuse to start. A process that never used CUDA has nothing to
    release (and is not made to start CUDA here)."""
    import gc
    import sys

    gc.collect()  # cycles (a model and its hooks) hold tensors until collected
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        torch.cuda.empty_cache()


def _sampling_teacher(t: TeacherConfig, cfg: DictConfig, ctx: StageContext):
    """The backends that sample a local model: ``self`` (its own samples voted on) and ``hf`` (zero-shot prompt)."""
    import torch

    from parathink.engine import SamplingConfig
    from parathink.teacher.generators import ban, make_generator, tag_token_ids

    sec = t.backend_config
    if sec.num_threads:
        torch.set_num_threads(sec.num_threads)
    model, tok = _load(sec.model or str(ctx.input("base") / "model"), cfg)
    # hf has no generator or ban_tags setting: transformers' generate, every token allowed (a zero-shot teacher
    # writes its own tags).
    is_self = t.backend == "self"
    generator = make_generator(sec.generator if is_self else "hf", model, tok, t.grammar)
    banned = tag_token_ids(tok) if is_self and sec.ban_tags else ()
    sampling = SamplingConfig(temperature=sec.temperature, top_p=sec.top_p, max_new_tokens=sec.max_new_tokens,
                              seed=int(cfg.seed), batch_size=sec.batch_size, logit_bias=ban(banned))
    if is_self:
        from parathink.teacher.selfdistill import SelfTeacher

        return SelfTeacher(generator, tok, sampling, num_paths=sec.num_paths, chunk=sec.chunk, summary=sec.summary,
                           grammar=t.grammar, fork=sec.fork, path_count=sec.path_count, min_paths=sec.min_paths)
    from parathink.teacher.hf import HFTeacher

    return HFTeacher(generator, tok, sampling, grammar=t.grammar)


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
    from parathink.formats.metrics import paths_histogram
    from parathink.grading import grade

    if not records:
        return {"parallel_rate": 0.0, "accuracy": 0.0}
    traces = [parse(r["response"], grammar) for r in records]
    correct = sum(grade(r["response"], r["answer"])[1] for r in records)
    # The share of blocks with each number of paths (NPR: plans per block, the teacher's choice the student learns).
    return {"parallel_rate": sum(t.parallel for t in traces) / len(records), "accuracy": correct / len(records),
            **{f"paths_hist.{n}": share for n, share in paths_histogram(traces).items()}}


def run(cfg: DictConfig, ctx: StageContext) -> dict[str, float]:
    t = TeacherConfig.of(cfg)
    problems = load_problem_sets(t.problems, int(cfg.seed), t.limit)
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


STAGE = StageSpec(run=run, validate=validate, gate=Gate(teacher_gate, TeacherThresholds),
                  shared_keys=("data", "format", "seed", "model"), role=StageRole(memory="teacher"))
