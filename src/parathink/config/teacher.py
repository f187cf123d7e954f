"""``TeacherConfig``: the settings of the ``teacher`` stage (``stages/teacher/``), one sub-config per backend.

The class is the Hydra schema of ``hydra_conf/stage/teacher.yaml`` (``pipeline.compose``): a misspelt key or a value
of the wrong type fails while composing, in one line. ``check`` refuses what types cannot say (an unknown backend, a
model a backend needs and was not given), before any stage starts. The defaults are the tiny curriculum's: the
``self`` teacher samples the base stage's model. Every section is in the config (and its hash) whichever backend is
picked, so that switching backends back and forth does not lose the others' settings.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from parathink.config.fields import at_least, count, probability_mass
from parathink.config.thresholds import TeacherThresholds
from parathink.errors import ConfigError
from parathink.formats.grammar import GRAMMAR_REGISTRY

BACKENDS = ("scripted", "self", "hf", "openai", "vllm")


@dataclass(frozen=True)
class ScriptedConfig:
    """Exact traces for the synthetic domain, no model (``parathink.teacher.scripted``)."""

    # Strategies in order of preference, the first num_paths that apply make the paths. `regroup` (signed sums) is a
    # skill the tiny base lacks: docs/calibration.md shows such paths cost accuracy after SFT.
    strategies: list[str] = field(default_factory=lambda: ["left_to_right", "backwards", "regroup"])
    num_paths: int = at_least(2, 2)  # paths per block (Parallel-R1's public code uses 2)
    prefix_steps: int = at_least(0, 0)  # steps solved sequentially before the block; 0 = the whole solution in parallel


@dataclass(frozen=True)
class SelfConfig:
    """NPR's teacher-free route: the model's own samples become the paths (``parathink.teacher.selfdistill``)."""

    model: str | None = None  # null = the base stage's model/; or builtin:tiny_base, a local dir, s3://, .gguf
    generator: str = "engine"  # engine (parathink.engine, KV-cache decode; 1.4x transformers here) | hf (generate)
    num_paths: int = at_least(2, 3)  # samples per problem (a block's most paths); more: a surer vote, longer traces
    # all | decided (the fewest samples, from min_paths, whose vote is decided: NPR's plans) | random (uniform in
    # min_paths..num_paths: ParaThinker's 2-4 paths)
    path_count: str = "all"
    min_paths: int = at_least(1, 2)
    # start: the block opens the response | agreed: the lines every sample shares come first, sequentially, and the
    # block opens where they differ (Parallel-R1's relative position then means something; not for parathinker,
    # whose block opens the response)
    fork: str = "start"
    # vote ("Most give V.") | listed ("Paths give A, B, C." in path order, then the vote); under the structured
    # layout paths have no order, so a listed summary cannot be learnt
    summary: str = "vote"
    temperature: float = at_least(0, 1.0)  # diversity between paths vs each path's accuracy
    top_p: float = probability_mass(1.0)
    max_new_tokens: int = at_least(1, 96)  # a hard worked solution is ~60 tokens for the tiny tokenizer
    batch_size: int = at_least(1, 192)  # sequences per generate call: speed vs memory
    chunk: int = at_least(1, 256)  # problems per store flush: a kill loses at most this much work
    ban_tags: bool = True  # tags never sampled inside a path (a sequential solution has none; off-policy is fine)
    num_threads: int | None = at_least(1, 1)  # torch threads; 1: no thrash on a shared 2-core CPU; null = torch's


@dataclass(frozen=True)
class HFConfig:
    """A transformers model asked zero-shot (``data/prompts/teacher_<grammar>.txt``; ``parathink.teacher.hf``)."""

    model: str | None = None  # load_model source (required for this backend)
    temperature: float = at_least(0, 0.7)
    top_p: float = probability_mass(1.0)
    max_new_tokens: int = at_least(1, 1024)
    batch_size: int = at_least(1, 8)
    num_threads: int | None = at_least(1, None)  # torch threads; null = torch default


@dataclass(frozen=True)
class OpenAIEndpointConfig:
    """Any OpenAI-compatible server (e.g. ``vllm serve``; ``parathink.teacher.openai_http``). The client's own
    settings (``OpenAIConfig``) add the teacher's grammar and need a model; here the model may stay null while
    another backend is picked."""

    base_url: str = "http://127.0.0.1:8000/v1"
    model: str | None = None  # the served model name (required for this backend)
    api: str = "chat"  # chat (/chat/completions, chat template applied by the server) | completions
    api_key_env: str | None = "OPENAI_API_KEY"  # the key is read from this variable, never from a config file
    concurrency: int = at_least(1, 8)  # requests in flight: throughput vs server load
    # Per request, in whole seconds: an int, as the YAML always wrote it, so that runs made before this schema keep
    # their config hash (a float would record 120.0 and regenerate their traces).
    timeout_s: int = at_least(1, 120)
    max_retries: int = at_least(0, 4)  # per request, on connection errors, timeouts, 429 and 5xx
    backoff_s: float = at_least(0, 1.0)  # first retry delay; doubles each retry
    max_tokens: int = at_least(1, 2048)
    temperature: float = at_least(0, 0.7)
    top_p: float = probability_mass(1.0)
    extra_body: dict[str, Any] = field(default_factory=dict)  # server-specific request fields, e.g. {top_k: 20}


@dataclass(frozen=True)
class VLLMConfig:
    """vLLM's offline engine, in vLLM's own venv (``parathink.teacher.vllm_offline``; GPU nodes)."""

    model: str | None = None  # hub id or local dir (required for this backend)
    temperature: float = at_least(0, 0.7)
    top_p: float = probability_mass(1.0)
    max_tokens: int = at_least(1, 4096)
    # How the engines use the pod's GPUs (cluster.gpus_per_node; parathink plan prints them as placement.teacher.
    # engines): data = one engine per GPU, each answering its share of every chunk; tensor = one engine sharded over
    # all of them (tensor_parallel_size = the GPUs). data by default: an 8B teacher (16 GB in bf16) fits one 80 GB
    # GPU with room for its KV cache, and eight engines that never talk decode about eight times one engine's tokens
    # per second; tensor parallel adds two all-reduces per layer and step, worth it only for a teacher that does not
    # fit one GPU.
    parallel: str = "data"
    engine_kwargs: dict[str, Any] = field(default_factory=dict)  # passed to vllm.LLM (gpu_memory_utilization, ...)


@dataclass(frozen=True)
class TeacherConfig:
    enabled: bool = True  # false: `parathink run` leaves the stage out
    backend: str = "self"  # scripted | self | hf | openai | vllm (parathink/teacher/__init__.py)
    # scripted writes parallel_r1 only, self all three; the zero-shot prompt is teacher_<grammar>.txt
    grammar: str = "${format}"
    problems: Any = "${data.cold_start}"  # problem sets (parathink.data.sources specs)
    limit: int | None = count(None)  # first N problems only (smoke runs); null = all
    scripted: ScriptedConfig = field(default_factory=ScriptedConfig)
    self: SelfConfig = field(default_factory=SelfConfig)
    hf: HFConfig = field(default_factory=HFConfig)
    openai: OpenAIEndpointConfig = field(default_factory=OpenAIEndpointConfig)
    vllm: VLLMConfig = field(default_factory=VLLMConfig)
    # The quality gate on raw.jsonl (stages/teacher/gate.py, docs/gates.md); its thresholds are in
    # teacher.yaml. Not part of the config hash.
    gate: TeacherThresholds = field(default_factory=TeacherThresholds)

    @classmethod
    def of(cls, cfg) -> TeacherConfig:
        """The root config's ``teacher`` section, checked; errors name ``teacher.<key>``."""
        from omegaconf import OmegaConf

        return cls.from_cfg(OmegaConf.to_container(cfg.teacher, resolve=True))

    @classmethod
    def from_cfg(cls, node: Mapping[str, Any]) -> TeacherConfig:
        values = dict(node)
        for key, sub in (("scripted", ScriptedConfig), ("self", SelfConfig), ("hf", HFConfig),
                         ("openai", OpenAIEndpointConfig), ("vllm", VLLMConfig)):
            values[key] = sub(**dict(values.get(key) or {}))
        cfg = cls(**values)
        cfg.check()
        return cfg

    def check(self) -> None:
        if self.backend not in BACKENDS:
            raise ConfigError(f"teacher.backend: {self.backend!r} is not one of {', '.join(BACKENDS)}")
        grammar = GRAMMAR_REGISTRY.get(self.grammar)  # None: unknown (the config schema refuses it first)
        if self.backend == "scripted" and not (grammar and grammar.scripted_teacher):
            scripted = " or ".join(name for name, g in GRAMMAR_REGISTRY.items() if g.scripted_teacher)
            raise ConfigError(f"teacher.grammar: backend scripted writes {scripted} traces only, got {self.grammar!r}")
        if self.backend in ("hf", "openai", "vllm") and not self.backend_config.model:
            raise ConfigError(f"teacher.{self.backend}.model: required for teacher.backend={self.backend}")
        if self.backend in ("scripted", "self") and self.backend_config.num_paths < 2:
            raise ConfigError(f"teacher.{self.backend}.num_paths: a block needs >= 2 paths, got "
                              f"{self.backend_config.num_paths}")
        if self.backend == "self":
            self._check_self()
        if self.backend == "vllm":
            self._check_vllm()
        if self.limit is not None and self.limit < 1:
            raise ConfigError(f"teacher.limit: must be an integer >= 1 (or null for all), got {self.limit!r}")
        self._check_problems()

    @property
    def backend_config(self):
        return getattr(self, self.backend)

    def _check_self(self) -> None:
        from parathink.teacher.selfdistill import FORKS, PATH_COUNTS
        from parathink.teacher.traces import SUMMARIES

        s = self.self
        if s.summary not in SUMMARIES:
            raise ConfigError(f"teacher.self.summary: {s.summary!r} is not one of {', '.join(SUMMARIES)}")
        if s.fork not in FORKS:
            raise ConfigError(f"teacher.self.fork: {s.fork!r} is not one of {', '.join(FORKS)}")
        g = GRAMMAR_REGISTRY.get(self.grammar)
        if s.fork != "start" and g is not None and g.forks_at_start:
            raise ConfigError(f"teacher.self.fork: a {g.title} block opens the response; only 'start' applies")
        if s.path_count not in PATH_COUNTS:
            raise ConfigError(f"teacher.self.path_count: {s.path_count!r} is not one of {', '.join(PATH_COUNTS)}")
        if not 1 <= s.min_paths <= s.num_paths:
            raise ConfigError(f"teacher.self.min_paths: must be in 1..num_paths={s.num_paths}, got {s.min_paths}")

    def _check_vllm(self) -> None:
        from parathink.placement.cluster import VLLM_PARALLEL

        v = self.vllm
        if v.parallel not in VLLM_PARALLEL:
            raise ConfigError(f"teacher.vllm.parallel: must be one of {', '.join(VLLM_PARALLEL)}, got {v.parallel!r}")
        if "tensor_parallel_size" in v.engine_kwargs:  # two settings for one thing would disagree
            raise ConfigError("teacher.vllm.engine_kwargs.tensor_parallel_size: set by teacher.vllm.parallel and the "
                              "pod's GPUs (data: 1 per engine, tensor: every GPU); remove it")

    def _check_problems(self) -> None:
        if not isinstance(self.problems, list) or not self.problems:
            raise ConfigError("teacher.problems: a non-empty list of problem sets is required")
        for i, spec in enumerate(self.problems):
            if not isinstance(spec, dict) or not spec.get("source"):
                raise ConfigError(f"teacher.problems[{i}].source: missing")
            if self.backend == "scripted" and spec["source"] != "synthetic":
                raise ConfigError(f"teacher.problems[{i}].source: the scripted teacher handles synthetic problems "
                                  f"only, got {spec['source']!r}")
            if spec["source"] == "synthetic":
                from parathink.data import synthetic

                synthetic.check_spec(spec, f"teacher.problems[{i}]")
