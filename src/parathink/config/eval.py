"""``EvalConfig``: the settings of the ``eval`` stage (``stages/eval/``): every model stage of the run
sampled on every test set, k samples per problem, scored as mean@k and pass@k.

Every option is declared here, with its default and what it does; the defaults are the tiny curriculum's (two
synthetic sets of 200 problems, k=8). ``hydra_conf/stage/eval.yaml`` holds the gate thresholds, an experiment what
it changes (``parallel_r1_seen``: the paper's benchmarks and budget). The class is the Hydra schema of that file
(``pipeline.compose``), so a misspelt key, a value of the wrong type or outside its field's bounds fails when the
config is composed (``pipeline/schema.py``); ``check`` then refuses what needs several keys, naming
``eval.<key>``. No torch here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from parathink.config.fields import at_least, probability_mass, tokens, within
from parathink.config.rollout import RolloutBackend
from parathink.config.thresholds import EvalThresholds
from parathink.errors import ConfigError
from parathink.evaluation.sets import SET_KEYS
from parathink.formats.tags import MAX_PARATHINKER_PATHS

MODES = ("causal", "structured")
# Every model stage of the Parallel-R1 curriculum, in its order.
MODELS = ("base", "sft", "rl_easy", "rl_hard", "rl_scaffold", "grpo_baseline")


@dataclass(frozen=True)
class Sampling:
    temperature: float = at_least(0, 1.0)  # the paper samples at T=1.0 for mean@k / pass@k
    top_p: float = probability_mass(1.0)
    max_new_tokens: int = tokens(320)  # response budget, every path counted; 3 hard paths and a summary: <= ~290


def sampling_config(sampling: Any, *, batch_size: int, seed: int):
    """The engine's ``SamplingConfig`` for an ``eval.sampling`` section (a ``Sampling`` or the composed config's
    node): the one place the section's fields become runtime settings, for the eval stage and the promotion gate.
    The import waits for the call so that reading the config stays torch-free."""
    from parathink.engine.sampling import SamplingConfig

    return SamplingConfig(temperature=sampling.temperature, top_p=sampling.top_p,
                          max_new_tokens=sampling.max_new_tokens, batch_size=batch_size, seed=seed)


def _tiny_sets() -> dict[str, Any]:
    return {"easy": {"source": "synthetic", "level": "easy", "split": "test", "n": 200, "k": 8},
            "hard": {"source": "synthetic", "level": "hard", "split": "test", "n": 200, "k": 8}}


@dataclass(frozen=True)
class EvalConfig:
    enabled: bool = True  # false: `parathink run` leaves the stage out
    # Model stages evaluated when their output is in the run directory (absent ones are listed, not errors).
    models: list[str] = field(default_factory=lambda: list(MODELS))
    mode: str = "structured"  # how the engine decodes a block: structured (Unseen: paths forked) | causal (Seen)
    mode_by_stage: dict[str, str] = field(default_factory=dict)  # per-stage exceptions, e.g. {grpo_baseline: causal}
    num_paths: int = 2  # paths forked per block in structured mode (Parallel-R1's public code: 2)
    # Also score structured-mode models at each of these paths per block, as rows `<set>@N` (ParaThinker's table:
    # accuracy and wall time per sample against the number of paths; N = num_paths reuses the set's own row).
    path_counts: list[int] = field(default_factory=list)
    batch_size: int = at_least(1, 512)  # rows the engine decodes at most: faster until the KV cache budget is full
    # The engine's KV cache in GiB; 0 = on a GPU what gpu_memory_utilization of it leaves after the weights and the
    # decode step (docs/gpu.md), on a CPU the call's worst case. Rows beyond it wait or are preempted and recomputed.
    kv_cache_gib: float = at_least(0, 0.0)
    gpu_memory_utilization: float = within(0, 1, 0.9, open_low=True)
    batch_problems: int = at_least(1, 64)  # problems handed to the sampler per call (progress granularity vs batching)
    sampling: Sampling = field(default_factory=Sampling)
    # Which engine samples (native | vllm: causal modes only); the gates' probes follow it (sft.gate.probe.backend)
    rollout: RolloutBackend = field(default_factory=RolloutBackend)
    # A benchmark file the experiment's sets point at (``uri: ${eval.benchmarks}``; parallel_r1_seen); null = none.
    benchmarks: str | None = None
    # Test sets: name -> any problem source of parathink.data.sources.load_problems plus `k` (samples per problem).
    # An experiment disables an inherited set by setting it to null. n >= 1600 samples per set: fewer leave the
    # noise of re-scoring the tiny model above the differences it shows (docs/findings.md, "From code comments").
    sets: dict[str, Any] = field(default_factory=_tiny_sets)
    # The stage's quality gate on results.json (stages/eval/gate.py, docs/gates.md); its thresholds are in
    # eval.yaml. Not part of the config hash.
    gate: EvalThresholds = field(default_factory=EvalThresholds)

    @classmethod
    def from_cfg(cls, node: Mapping[str, Any]) -> EvalConfig:
        """Build and check the ``eval`` section (resolved, as plain data)."""
        values = dict(node)
        values["sampling"] = Sampling(**dict(values.get("sampling") or {}))
        values["rollout"] = RolloutBackend.build(values.get("rollout"), "eval.rollout")
        cfg = cls(**values)
        cfg.check()
        return cfg

    def check(self) -> None:
        self._check_sets()
        for stage, mode in {"*": self.mode, **self.mode_by_stage}.items():
            if mode not in MODES:
                where = "" if stage == "*" else f"_by_stage.{stage}"
                raise ConfigError(f"eval.mode{where}: {mode!r} not in {MODES}")
        self.rollout.check("eval.rollout", [("eval.mode", self.mode)] + [
            (f"eval.mode_by_stage.{stage}", mode) for stage, mode in self.mode_by_stage.items()])
        for n in [self.num_paths, *self.path_counts]:
            if not isinstance(n, int) or isinstance(n, bool) or not 1 <= n <= MAX_PARATHINKER_PATHS:
                raise ConfigError(f"eval.num_paths / eval.path_counts: {n!r} is not a path count in "
                                  f"1..{MAX_PARATHINKER_PATHS}")

    def _check_sets(self) -> None:
        active = {name: spec for name, spec in self.sets.items() if spec is not None}
        if not active:
            raise ConfigError("eval.sets: at least one test set is needed")
        for name, spec in active.items():
            if not spec.get("source"):
                raise ConfigError(f"eval.sets.{name}.source: missing")
            if spec["source"] == "synthetic":
                from parathink.data import synthetic

                synthetic.check_spec({k: v for k, v in spec.items() if k not in SET_KEYS}, f"eval.sets.{name}")
            if spec.get("k") is not None and int(spec["k"]) < 1:  # left out: the file's rows per problem
                raise ConfigError(f"eval.sets.{name}.k: must be >= 1, got {spec['k']}")


def stage_mode(cfg, stage: str) -> str:
    """How ``stage``'s model is evaluated (``eval.mode_by_stage``, else ``eval.mode``): read by the eval stage,
    the curriculum's tracking and the champion/challenger comparison, so all three score a model alike."""
    return cfg.eval.mode_by_stage.get(stage, cfg.eval.mode)
