"""The model gates' probe: a few hundred samples of one model on a fixed set of held-out problems.

Every model is sampled with the same problems, the same engine settings and the same seed, so two models' figures
are a paired comparison (the SFT gate: the cold-start model against the model it started from). Figures are
cached by model identity (a stage's output hash, or a fingerprint of a model folder) and probe settings, so a
rerun or a re-evaluated gate does not sample the same model twice.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from parathink.config.rollout import RolloutBackend
from parathink.errors import ConfigError

if TYPE_CHECKING:
    from parathink.quality.gate import GateInput

FIGURES = ("n", "n_problems", "accuracy", "parallel_rate", "valid_rate")


@dataclass(frozen=True)
class ProbeSpec:
    problems: dict  # any spec of parathink.data.sources.load_problems; held out from training
    k: int  # samples per problem
    mode: str  # engine mode: structured | causal
    num_paths: int
    temperature: float
    top_p: float
    max_new_tokens: int
    batch_size: int
    backend: str = "native"  # which engine samples: native | vllm (eval.rollout.backend's, causal mode only)

    @classmethod
    def from_cfg(cls, node: Mapping[str, Any], where: str) -> ProbeSpec:
        try:
            spec = cls(problems=dict(node["problems"]), k=int(node["k"]), mode=str(node["mode"]),
                       num_paths=int(node["num_paths"]), temperature=float(node["temperature"]),
                       top_p=float(node["top_p"]), max_new_tokens=int(node["max_new_tokens"]),
                       batch_size=int(node["batch_size"]), backend=str(node.get("backend", "native")))
        except (KeyError, TypeError, ValueError) as err:
            raise ConfigError(f"{where}: {err} (needs problems, k, mode, num_paths, temperature, top_p, "
                              f"max_new_tokens, batch_size)") from None
        if spec.k < 1 or spec.max_new_tokens < 1 or spec.batch_size < 1:
            raise ConfigError(f"{where}: k, max_new_tokens and batch_size must be >= 1")
        if spec.mode not in ("structured", "causal"):
            raise ConfigError(f"{where}.mode: {spec.mode!r} is not structured or causal")
        RolloutBackend(backend=spec.backend).check(where, [(f"{where}.mode", spec.mode)])
        if spec.problems.get("source") == "synthetic":
            from parathink.data import synthetic

            synthetic.check_spec(spec.problems, f"{where}.problems")
        return spec


def folder_fingerprint(folder: Path) -> str:
    """Names, sizes and mtimes of a model folder's files: its identity when no stage published it."""
    h = hashlib.sha256()
    for p in sorted(Path(folder).rglob("*")):
        if p.is_file():
            st = p.stat()
            h.update(f"{p.relative_to(folder).as_posix()}:{st.st_size}:{st.st_mtime_ns}\n".encode())
    return h.hexdigest()[:16]


def _key(model_id: str, spec: ProbeSpec, grammar: str, seed: int) -> str:
    text = json.dumps({"model": model_id, "spec": asdict(spec), "grammar": grammar, "seed": seed}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def sample(model_dir: Path | str, spec: ProbeSpec, grammar: str, seed: int) -> dict[str, float]:
    """Sample ``model_dir`` on the probe: its accuracy, parallel rate and valid-format rate
    (docs/design.md's metrics)."""
    import torch

    from parathink import distributed
    from parathink.data.sources import load_problems
    from parathink.engine import SamplingConfig
    from parathink.evaluation.evaluate import evaluate_set
    from parathink.evaluation.generators import engine_generator
    from parathink.modeling import load_model
    from parathink.placement.memory_model import probe_kv_bytes

    records = load_problems(spec.problems, seed=seed)
    torch.manual_seed(seed)
    sampling = SamplingConfig(temperature=spec.temperature, top_p=spec.top_p, max_new_tokens=spec.max_new_tokens,
                              batch_size=spec.batch_size, seed=seed)
    if spec.backend == "vllm":
        return _sample_with_vllm(Path(model_dir), spec, grammar, sampling, records)
    model, tok = load_model(model_dir, device=distributed.device())
    # On a GPU the engine's KV cache is the probe's kv_cache part of the plan (memory_model.probe_budget): without
    # a budget it would allocate every row at its longest (64 x 4 rows of 5,000 tokens of Qwen3-4B: ~117 GB)
    kv_bytes = probe_kv_bytes(spec, model.config.to_dict(), str(model.dtype), distributed.device_memory())
    generate, _ = engine_generator(model, tok, grammar=grammar, mode=spec.mode, num_paths=spec.num_paths,
                                   sampling=sampling, kv_cache_bytes=kv_bytes)
    _, summary = evaluate_set(records, generate, spec.k, grammar=grammar, tokenizer=tok,
                              batch_problems=len(records))
    del model, generate
    if torch.cuda.is_available():
        torch.cuda.empty_cache()  # the next stage may start a process of its own (the vLLM teacher after base's gate)
    return {key: float(summary[key]) for key in FIGURES}


def _sample_with_vllm(model_dir: Path, spec: ProbeSpec, grammar: str, sampling, records: list) -> dict[str, float]:
    """``sample`` through vLLM colocated in its own venv (``spec.backend=vllm``): the model folder as published, in
    its saved dtype, the KV cache the plan gave the probe (on a GPU)."""
    from parathink import distributed
    from parathink.evaluation.evaluate import evaluate_set
    from parathink.evaluation.generators import vllm_generator
    from parathink.modeling import load_tokenizer
    from parathink.placement.memory_model import probe_kv_bytes

    tok = load_tokenizer(model_dir)
    config = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
    dtype = str(config.get("dtype") or config.get("torch_dtype") or "float32")
    generate, _, engine = vllm_generator(model_dir, tok, grammar=grammar, num_paths=spec.num_paths,
                                         sampling=sampling, dtype=dtype, seed=sampling.seed,
                                         kv_cache_bytes=probe_kv_bytes(spec, config, dtype,
                                                                       distributed.device_memory()))
    try:
        _, summary = evaluate_set(records, generate, spec.k, grammar=grammar, tokenizer=tok,
                                  batch_problems=len(records))
    finally:
        engine.close()
    return {key: float(summary[key]) for key in FIGURES}


def cached_sample(model_dir: Path | str, model_id: str, spec: ProbeSpec, grammar: str, seed: int,
                  cache_dir: Path) -> tuple[dict[str, float], bool]:
    """(figures, whether they came from the cache) for the model ``model_id`` stored in ``model_dir``."""
    path = Path(cache_dir) / f"probe-{_key(model_id, spec, grammar, seed)}.json"
    try:
        figures = json.loads(path.read_text(encoding="utf-8"))
        if isinstance(figures, dict) and all(isinstance(figures.get(k), (int, float)) for k in FIGURES):
            return {k: float(figures[k]) for k in FIGURES}, True
    except (OSError, ValueError):
        pass  # absent or damaged: sample again
    figures = sample(model_dir, spec, grammar, seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps({**figures, "model": model_id, "backend": spec.backend}), encoding="utf-8")
    os.replace(tmp, path)
    return figures, False


def stage_model(stage: str, output_hash: str | None) -> str:
    """A published model's identity in the probe cache: the same whichever gate probes it (base's, then sft's)."""
    return f"stage:{stage}:{output_hash}"


def probe_model(model_dir: Path | str, model_id: str, spec: ProbeSpec, cfg, out: GateInput) -> tuple[dict, str]:
    """The probe's figures on a model (sampled once per model, spec and seed: the cache) and a note for the table."""
    figures, cached = cached_sample(model_dir, model_id, spec, str(cfg.format), out.seed, out.cache_dir)
    note = f"{int(figures['n'])} samples{', cached' if cached else ''}"
    return figures, note
