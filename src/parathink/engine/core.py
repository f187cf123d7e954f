"""The rollout engine: batched KV-cached sampling, causal or forked (structured), on torch.

``causal`` (Parallel-R1 Seen): one stream per sample; the model writes its paths one after another and the
layout is plain causal. ``structured`` (Parallel-R1 Unseen, NPR §3.2, ParaThinker §3): when a stream opens a
block, the engine forks one row per path from the stream's cache (the prefix is copied, not recomputed); each
path starts with forced opening tags at position p+1, the rows decode concurrently, a path that closes waits
(its entries are parked), and when the last one closes the paths' entries are merged into one row, which writes
the block's closers at p + longest + 1 and continues with every path visible. The token sequence this produces
is exactly what ``parathink.formats.layouts.build_layout`` lays out, so the training forward recomputes the
engine's log-probs (``parathink.engine.recompute``).

Every token's log-prob is the raw log-softmax at the context that precedes it in the *serialized* sequence: a
path's opening tag is scored after the previous path's closing tag (that row's last logits), the block closer
after the last path. Forced tokens (opening tags, closers, budget closers) carry loss-mask 0.

The budget ``max_new_tokens`` counts every token of every branch (forced ones too) and always leaves room for
the closers the open tags owe; when it runs out the engine writes them and stops (finish_reason "length").
Before a fork it checks the block can still be closed (and NPR's ``min_fork_budget``); if not, the opener is
not sampled. Inside a path the model cannot end the sequence (EOS is not sampled there) nor close it with another
path's tag (ParaThinker's thought i ends at ``</think{i}>``; a model trained on relabelled thoughts may reach for
another label, and a thought closed by ``</think1>`` breaks the trace); with ParaThinker,
whose block opens the response, a later thought tag is not sampled outside a block. Such bans shape only what
is sampled; the reported log-probs stay the raw ones. Tags the model writes inside a path are path text, as
the layout reads them.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from parathink.engine.cache import RowCache
from parathink.engine.decode import EagerDecode, StaticDecode
from parathink.engine.grammar import ForkGrammar, eos_ids, stream_rule
from parathink.engine.kv_budget import (
    BLOCK_TOKENS,
    PREFILL_TOKENS,
    blocks_for,
    kv_bytes_per_token,
    min_kv_blocks,
    worst_case_kv_bytes,
)
from parathink.engine.paged import PagedCache
from parathink.engine.runner import cache_shape, make_runner
from parathink.engine.sampling import SamplingConfig, draw, penalise_repeats, stream_key, uniform_bits
from parathink.engine.scheduler import BudgetScheduler
from parathink.engine.stream import StreamTags
from parathink.engine.transfer import upload
from parathink.errors import ConfigError
from parathink.formats.grammar import GRAMMAR_REGISTRY
from parathink.formats.layouts import Layout, TagIds, build_layout, causal_layout

MODES = ("causal", "structured")
DECODES = ("auto", "eager", "static")
KV_LAYOUTS = ("auto", "paged", "contiguous")


@dataclass
class Sample:
    """One generated response. ``logprobs`` and ``loss_mask`` have one entry per response token."""

    prompt_ids: list[int]
    response_ids: list[int]
    logprobs: list[float]
    loss_mask: list[int]
    finish_reason: str  # "stop" (EOS) or "length" (budget; open tags closed by the engine)
    text: str
    prompt_index: int = 0
    num_blocks: int = 0  # forks the engine made (structured mode)


@dataclass(eq=False)
class _Path:
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float | None] = field(default_factory=list)
    mask: list[int] = field(default_factory=list)
    closed: bool = False  # its closing tag has been chosen
    parked: torch.Tensor | None = None  # its cache entries while the other paths finish


@dataclass(eq=False)
class _Block:
    p: int  # position of the opener (the last token before the paths)
    prefix_len: int  # cache entries before the paths
    paths: list[_Path]
    closer_logprob: float | None = None
    done: int = 0
    cut: bool = False  # the budget ran out inside the block


@dataclass(eq=False)
class _Seq:
    index: int
    prompt_index: int
    prompt: list[int]
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    mask: list[int] = field(default_factory=list)
    used: int = 0
    block: _Block | None = None
    in_summary: bool = False
    plans: int = 0
    blocks: int = 0
    stop_after_forced: bool = False
    finish_reason: str | None = None
    stream: StreamTags | None = None
    rows: list = field(default_factory=list)  # its rows in the batch (one, or one per open path)
    key: int = 0  # its main stream's sampling key (``sampling.stream_key``)
    order: int = -1  # when it was first admitted: the newest in flight is preempted first
    seen_from: int | None = None  # the main row's repetition-penalty context: tokens[seen_from:] (None: prompt too)


@dataclass(eq=False)
class _Row:
    seq: _Seq
    pos: int  # position of the token fed last (the next decided token gets pos + 1)
    feed: int = -1
    path: int = -1  # -1: the sequence's main stream
    forced: deque = field(default_factory=deque)
    closing: bool = False  # fed its path's closing tag: score the next serialized token, then park
    fork: int = 0  # fork into this many paths after this step's forward
    done: bool = False  # out of budget with nothing to close: leaves without a token
    key: int = 0  # the sampling key of the stream it writes (the sequence's main one, or its path's)


class Engine:
    """Rollouts for RL, evaluation and the self-distilling teacher.

    ``Engine(model, tokenizer, grammar="parallel_r1", mode="causal" | "structured", num_paths=2)``;
    ``generate(prompt_ids, sampling, num_samples)`` -> ``list[Sample]`` (prompt-major);
    ``layout(sample)`` -> the ``Layout`` training uses for prompt + response;
    ``generate_texts(prompts, sampling, num_samples)`` -> ``list[list[str]]``.
    ``num_paths`` is the paths per block (NPR: the most plans that fork; a block has as many paths as plans).
    ``min_fork_budget``: no fork with fewer tokens of budget left (NPR: 1024). ``backend``: see ``runner``.
    ``decode``: ``eager`` (shapes follow the rows), ``static`` (bucketed shapes; captured as CUDA graphs on a
    GPU when ``cuda_graphs``), ``auto`` (static on a GPU with the fast runner, else eager); see ``decode``.
    ``release()`` frees what the engine keeps between calls (the CUDA graphs and their input buffer).
    ``kv_cache_bytes``: the most KV cache a call holds (docs/gpu.md, "KV cache budget"). None, or a budget that
    covers the worst case, allocates every row at the longest length up front (the contiguous path);
    a smaller one pages the cache in blocks, admits streams as blocks are free and preempts (then recomputes)
    the newest when the rows cannot grow. ``stats`` describes the last call (preemptions, peak KV bytes, ...).
    ``kv_layout``: ``auto`` (the above), ``paged`` (the block cache even where the budget, or no budget, covers the
    worst case: then it holds the worst case in blocks and never preempts), ``contiguous`` (every row at the longest
    length up front; a budget below that worst case is refused).
    """

    def __init__(self, model, tokenizer, grammar: str = "parallel_r1", mode: str = "causal", num_paths: int = 2,
                 *, min_fork_budget: int = 0, backend: str = "auto", decode: str = "auto", cuda_graphs: bool = True,
                 kv_cache_bytes: int | None = None, kv_layout: str = "auto"):
        if mode not in MODES:
            raise ValueError(f"engine mode must be one of {MODES}, got {mode!r}")
        if decode not in DECODES:
            raise ValueError(f"engine decode must be one of {DECODES}, got {decode!r}")
        if num_paths < 1:
            raise ValueError(f"engine num_paths must be >= 1, got {num_paths}")
        if kv_cache_bytes is not None and kv_cache_bytes < 1:
            raise ConfigError(f"engine kv_cache_bytes must be >= 1 or None (no budget), got {kv_cache_bytes}")
        if kv_layout not in KV_LAYOUTS:
            raise ConfigError(f"engine kv_layout must be one of {KV_LAYOUTS}, got {kv_layout!r}")
        self.kv_cache_bytes, self.kv_layout = kv_cache_bytes, kv_layout
        self.stats: dict = {}  # of the last generate call (``_Run.stats``)
        self.model, self.tokenizer, self.grammar, self.mode = model, tokenizer, grammar, mode
        self.num_paths, self.min_fork_budget = num_paths, min_fork_budget
        # An unknown grammar is no error here: causal sampling of a model without tags needs none.
        most = getattr(GRAMMAR_REGISTRY.get(grammar), "max_paths", None)
        if most is not None and num_paths > most:
            raise ValueError(f"{grammar} has tags for at most {most} paths, asked {num_paths}")
        self.tags: TagIds | None
        self.g: ForkGrammar | None
        self.tags, self.g = stream_rule(tokenizer, grammar, num_paths, mode)
        self.eos = eos_ids(tokenizer, getattr(getattr(model, "generation_config", None), "eos_token_id", None))
        self.pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else self.eos[0]
        self.runner = make_runner(model, backend)
        if decode == "static" and not self.runner.static:
            raise ValueError("engine decode 'static' needs the fast runner (a Qwen3/Llama-style decoder, backend "
                             f"auto or fast), got {type(self.runner).__name__}")
        self.decode, self.cuda_graphs = decode, cuda_graphs
        self._static: StaticDecode | None = None
        self.max_positions = getattr(model.config, "max_position_embeddings", None)

    # ------------------------------------------------------------------------------------------------ public

    def layout(self, sample: Sample) -> Layout:
        """The layout of prompt + response, exactly as training builds it."""
        ids = list(sample.prompt_ids) + list(sample.response_ids)
        if self.mode == "causal":
            return causal_layout(len(ids))
        return build_layout(ids, self.tags)

    def release(self) -> None:
        """Free the CUDA graphs and buffers kept for the next call (the next call captures them again)."""
        self._static = None

    def decoder(self, device: torch.device):
        """The decode step of a call on ``device`` (``decode``): eager, or the static one the engine keeps."""
        kind = self.decode
        if kind == "auto":
            kind = "static" if device.type == "cuda" and self.runner.static else "eager"
        if kind == "eager":
            return EagerDecode(self.runner)
        graphs = self.cuda_graphs and device.type == "cuda"
        if self._static is None or self._static.graphs != graphs:
            self._static = StaticDecode(self.runner, graphs)
        return self._static

    def generate_texts(self, prompts: Sequence[str], sampling: SamplingConfig, num_samples: int = 1) -> list[list[str]]:
        """Texts of ``num_samples`` responses per prompt string."""
        ids = [self.tokenizer.encode(p, add_special_tokens=False) for p in prompts]
        samples = self.generate(ids, sampling, num_samples)
        return [[s.text for s in samples[i * num_samples:(i + 1) * num_samples]] for i in range(len(prompts))]

    @torch.no_grad()
    def generate(self, prompt_ids: Sequence[Sequence[int]] | Sequence[int], sampling: SamplingConfig,
                 num_samples: int = 1) -> list[Sample]:
        """``num_samples`` samples per prompt, prompt-major (all of prompt 0, then prompt 1, ...)."""
        prompts = self._check(prompt_ids, sampling, num_samples)
        self.runner.sync()
        device = next(self.model.parameters()).device
        seed = sampling.seed if sampling.seed is not None else int(torch.randint(0, 2 ** 62, ()).item())
        seqs = [_Seq(i * num_samples + j, i, prompts[i], key=stream_key(seed, i * num_samples + j))
                for i in range(len(prompts)) for j in range(num_samples)]
        if self.mode == "causal" and self.tags is not None:
            for s in seqs:
                s.stream = StreamTags(self.tags)
        # Rows: at most batch_size streams are admitted, and each may fork into num_paths rows. The cache holds
        # them all at the longest length from the start (growing it would copy every live row, and on a GPU hold
        # both copies at once): rows x (prompt + max_new_tokens) x layers x 2 x kv_heads x head_dim x dtype bytes,
        # committed on a GPU, touched as written on a CPU (docs/gpu.md sizes it).
        rows = min(len(seqs), sampling.batch_size) * (self.num_paths if self.mode == "structured" else 1)
        state = _Run(self, sampling, seed, device, max(len(p) for p in prompts) + sampling.max_new_tokens + 1, rows)
        try:
            state.run(deque(seqs))
        finally:
            state.decoder.bind(None)  # the cache goes with the call (a kept decoder must not hold it)
            self.stats = state.stats()
        return [self._sample(s) for s in seqs]

    # ----------------------------------------------------------------------------------------------- helpers

    def _check(self, prompt_ids, sampling: SamplingConfig, num_samples: int) -> list[list[int]]:
        if num_samples < 1:
            raise ValueError(f"generate: num_samples must be >= 1, got {num_samples}")
        prompts = list(prompt_ids)
        if prompts and isinstance(prompts[0], int):
            prompts = [prompts]  # one prompt given as a flat list of ids
        prompts = [list(map(int, p)) for p in prompts]
        if not prompts:
            raise ValueError("generate: no prompts")
        for i, p in enumerate(prompts):
            if not p:
                raise ValueError(f"generate: prompt {i} is empty")
        longest = max(len(p) for p in prompts)
        if self.max_positions and longest + sampling.max_new_tokens > self.max_positions:
            raise ValueError(f"generate: prompt of {longest} tokens + max_new_tokens {sampling.max_new_tokens} "
                             f"exceeds the model's max_position_embeddings {self.max_positions}")
        return prompts

    def _sample(self, s: _Seq) -> Sample:
        assert all(lp is not None for lp in s.logprobs), "engine bug: a forced token was never scored"
        body = s.tokens[:-1] if s.tokens and s.finish_reason == "stop" and s.tokens[-1] in self.eos else s.tokens
        text = self.tokenizer.decode(body, skip_special_tokens=False)
        return Sample(prompt_ids=list(s.prompt), response_ids=list(s.tokens), logprobs=[float(x) for x in s.logprobs],
                      loss_mask=list(s.mask), finish_reason=s.finish_reason or "length", text=text,
                      prompt_index=s.prompt_index, num_blocks=s.blocks)


class _Run(BudgetScheduler):
    """The state of one ``generate`` call: rows in the cache, their sequences, the decode loop (under a KV budget:
    ``scheduler``)."""

    def __init__(self, engine: Engine, sampling: SamplingConfig, seed: int, device, max_len: int, rows: int):
        self.e, self.s, self.seed, self.device = engine, sampling, seed, device
        self.g = engine.g
        self.structured = engine.mode == "structured"
        layers, kv_heads, head_dim = cache_shape(engine.model)
        dtype = next(engine.model.parameters()).dtype
        self.token_bytes = kv_bytes_per_token(layers, kv_heads, head_dim, dtype.itemsize)
        budget = engine.kv_cache_bytes
        worst = worst_case_kv_bytes(rows, max_len, self.token_bytes)
        # A budget that covers the worst case changes nothing (``kv_layout="auto"``): the contiguous cache, CUDA
        # graphs and all. ``paged`` forces the blocks; without a budget they hold every row's worst case.
        if engine.kv_layout == "contiguous" and budget is not None and budget < worst:
            raise ConfigError(f"engine kv_layout='contiguous' allocates {worst:,} bytes of KV (every row at its "
                              f"longest) but kv_cache_bytes={budget:,}: raise the budget or use kv_layout='auto'")
        self.paged = engine.kv_layout == "paged" or (
            engine.kv_layout == "auto" and budget is not None and budget < worst)
        if self.paged:
            if budget is None:  # every row at its longest, a spare block each, and the sink
                blocks = max(rows * (blocks_for(max_len) + 1),
                             min_kv_blocks(max_len, engine.num_paths, self.structured))
                budget = (blocks + 1) * BLOCK_TOKENS * self.token_bytes
            blocks = budget // (BLOCK_TOKENS * self.token_bytes)
            self._check_budget(budget, blocks, max_len)
            self.cache = PagedCache(layers, rows, kv_heads, max_len, head_dim, dtype, device, blocks)
        else:
            self.cache = RowCache(layers, rows, kv_heads, max_len, head_dim, dtype, device)
        engine.runner.prepare(max_len)  # positions never reach max_len
        # Paged or contiguous, the step is the engine's (``decode``): a paged static step reads its block table
        # from a fixed device buffer, so it replays as a CUDA graph like the contiguous one.
        self.decoder = engine.decoder(torch.device(device))
        self.decoder.bind(self.cache)
        self.waiting: deque = deque()  # preempted sequences, oldest first: recomputed before new ones are admitted
        self.admitted = self.preemptions = self.preempted_in_block = self.recomputed = self.max_rows = 0
        self.rows: list[_Row] = []
        self.penalty = sampling.repetition_penalty_in_paths
        vocab = engine.model.get_output_embeddings().weight.shape[0]
        self.seen = torch.zeros(rows, vocab, dtype=torch.bool, device=device) if self.penalty != 1.0 else None
        self.eos = set(engine.eos)
        self.path_close = engine.tags.path_close if engine.tags is not None else frozenset()
        # Per path: the closers that are not its own (none where every path closes with one tag: </Path>, </step>).
        self.other_closers = [sorted(set(self.path_close) - {c}) for c in self.g.path_close] if self.g else []
        # What a path row may never sample (EOS and the other paths' closers), per path, on the device: banned for
        # all of a path's rows in one write a step (as (row, token) pairs: 16 a row with ParaThinker, every step).
        self.path_bans = [upload([*sorted(self.eos), *c], torch.long, device) for c in self.other_closers]
        self.bias = None
        if sampling.logit_bias:
            bias = torch.zeros(vocab)
            for t, b in sampling.logit_bias.items():
                if not 0 <= int(t) < vocab:
                    raise ValueError(f"SamplingConfig.logit_bias: token id {t} is outside the vocabulary "
                                     f"(0..{vocab - 1})")
                bias[int(t)] = float(b)
            self.bias = bias.to(device)
        self.neg_inf = torch.full((), float("-inf"), device=device)
        self.marks: list[tuple[int, int]] = []  # (row, token) seen this step, for the repetition penalty

    # ----------------------------------------------------------------------------------------------- loop

    def run(self, pending: deque) -> None:
        if self.paged:
            return self._run_paged(pending)
        while pending or self.rows:
            n_old = len(self.rows)
            logits = []
            if n_old:
                logits.append(self._decode(n_old))
            # batch_size caps the streams in flight, not the rows: a forked stream's paths are the rows the cache
            # was sized for (batch_size x num_paths). Counting ParaThinker's paths against it would run a quarter
            # of the rows a 4-path call allocated, at four times the steps.
            room = self.s.batch_size - self._streams()
            if pending and (not n_old or room >= max(1, self.s.batch_size // 4)):
                logits.append(self._admit([pending.popleft() for _ in range(min(room, len(pending)))]))
            self.max_rows = max(self.max_rows, len(self.rows))
            self._step(torch.cat(logits) if len(logits) > 1 else logits[0])

    def _streams(self) -> int:
        """Sequences in flight (``SamplingConfig.batch_size`` caps them; a forked one has a row per open path)."""
        return len({id(r.seq) for r in self.rows})

    def stats(self) -> dict:
        """What the call held and did: the KV it allocated and its peak (bytes), preemptions, recomputed tokens."""
        allocated = self.cache.kv.numel() * self.cache.kv.element_size()
        peak = self.cache.peak * BLOCK_TOKENS * self.token_bytes if self.paged else allocated
        return {"paged": self.paged, "kv_cache_bytes": allocated, "peak_kv_bytes": peak,
                "kv_bytes_per_token": self.token_bytes, "preemptions": self.preemptions,
                "preempted_in_block": self.preempted_in_block,
                "recomputed_tokens": self.recomputed, "max_rows_in_flight": self.max_rows}

    def _decode(self, n: int) -> torch.Tensor:
        rows = self.rows[:n]
        logits = self.decoder(([r.feed for r in rows], [r.pos for r in rows], [r.path + 1 for r in rows]), n)
        self.cache.advance(n)
        return logits

    def _admit(self, seqs: list[_Seq]) -> torch.Tensor:
        """Prefill the prompts of ``seqs`` (each distinct prompt once, then copied) into new rows at the end."""
        start = len(self.rows)
        first: dict[int, int] = {}
        unique: list[_Seq] = []
        for s in seqs:
            if s.prompt_index not in first:
                first[s.prompt_index] = len(unique)
                unique.append(s)
        self.cache.check_rows(start + len(seqs))
        self.cache.check_len(max(len(s.prompt) for s in unique))
        # In groups of at most PREFILL_TOKENS padded tokens (one prompt at least): a prefill's activations, mask and
        # logits grow with B x T, and all of a rollout's prompts at once (512 rows of 2,000) would not fit beside
        # the KV cache (memory_model.prefill_workspace counts one group).
        parts, group = [], max(1, PREFILL_TOKENS // max(len(s.prompt) for s in unique))
        for g0 in range(0, len(unique), group):
            chunk = unique[g0:g0 + group]
            t = max(len(s.prompt) for s in chunk)
            tokens = upload([s.prompt + [self.e.pad] * (t - len(s.prompt)) for s in chunk], torch.long, self.device)
            lens = [len(s.prompt) for s in chunk]
            positions = torch.arange(t, device=self.device).expand(len(chunk), t)
            last = upload([n - 1 for n in lens], torch.long, self.device)
            self.cache.begin_prefill(start + g0, lens, t)
            parts.append(self.e.runner.prefill(tokens, positions, start + g0, self.cache, torch.zeros_like(positions),
                                               last))
            self.cache.prefilled(start + g0, lens, t)
        logits = parts[0] if len(parts) == 1 else torch.cat(parts)
        # Rows [start, start + len(unique)) hold the distinct prompts; the other samples copy them.
        copies = [s for s in seqs if all(s is not u for u in unique)]
        if copies:
            dst = list(range(start + len(unique), start + len(seqs)))
            self.cache.copy_rows([start + first[s.prompt_index] for s in copies], dst)
        ordered = unique + copies
        for s in ordered:
            row = _Row(seq=s, pos=len(s.prompt) - 1, key=s.key)
            s.rows = [row]
            s.order, self.admitted = self.admitted, self.admitted + 1
            if self.structured and self.g.opener is None:  # ParaThinker: the paths open the response
                k = self.e.num_paths
                if self._left(s, 0) >= self.g.fork_cost(k):
                    row.fork = k
            self.rows.append(row)
        out = logits.float()[upload([first[s.prompt_index] for s in ordered], torch.long, self.device)]
        if self.seen is not None:
            self.seen[start:start + len(ordered)] = False
            self.marks += [(start + j, t) for j, s in enumerate(ordered) for t in s.prompt]
            self._mark_seen()
        return out

    def _mark_seen(self) -> None:
        """Apply the step's (row, token) marks to ``seen`` in one write."""
        if self.seen is not None and self.marks:
            rows, toks = zip(*self.marks)
            self.seen[upload(rows, torch.long, self.device), upload(toks, torch.long, self.device)] = True
        self.marks = []

    # ----------------------------------------------------------------------------------------------- budget

    def _need(self, s: _Seq) -> int:
        """Tokens the sequence must still write to close what is open."""
        if s.stream is not None:
            return len(s.stream.closers(self.g)) + sum(len(r.forced) for r in s.rows)
        if s.block is not None:
            open_paths = sum(1 for p in s.block.paths if not p.closed)
            return (open_paths + sum(len(r.forced) for r in s.rows) + len(self.g.block_closers) + 1)
        return len(self._main_closers(s))

    def _main_closers(self, s: _Seq) -> list[int]:
        """What the main stream must still write (pending forced tokens first) to leave nothing open."""
        forced = list(s.rows[0].forced) if s.rows else []
        if s.stream is not None:
            return forced + s.stream.closers(self.g)
        if self.g is not None and (s.in_summary or any(t in self.g.summary_open for t in forced)):
            return forced + [self.g.summary_close]
        return forced

    def _left(self, s: _Seq, this_step: int) -> int:
        return self.s.max_new_tokens - s.used - self._need(s) - this_step

    def _plan_budget(self) -> tuple[list[tuple[int, int]], dict[int, list[int]]]:
        """Per row, before sampling: cut sequences out of budget; return tokens to ban as (row, token), and per
        path the rows that ban its ``path_bans``."""
        bans: list[tuple[int, int]] = []
        path_rows: dict[int, list[int]] = {}
        by_seq: dict[int, list[int]] = {}
        for i, r in enumerate(self.rows):
            by_seq.setdefault(id(r.seq), []).append(i)
        for idx in by_seq.values():
            s = self.rows[idx[0]].seq
            deciding = [i for i in idx if not self.rows[i].closing]
            if self.rows[idx[0]].fork or s.stop_after_forced or (s.block is not None and s.block.cut):
                continue  # a fork's cost was checked when its opener was sampled; a cut is final
            left = self._left(s, len(deciding))
            if left < 0:
                self._cut(s, idx)
                continue
            for i in deciding:
                r = self.rows[i]
                if r.forced:
                    continue
                if r.path >= 0:
                    path_rows.setdefault(r.path, []).append(i)
                    continue
                bans += self._main_bans(i, s, left)
        return bans, path_rows

    def _main_bans(self, i: int, s: _Seq, left: int) -> list[tuple[int, int]]:
        """Tokens the main stream may not sample now: openers whose closers no longer fit."""
        if self.g is None:
            return []
        out = []
        if s.stream is not None:
            return [(i, t) for t in s.stream.bans(self.g, left)]
        if self.g.opener is None:
            out += [(i, t) for t in self.g.tags.path_open]  # ParaThinker forks only at the start
        else:
            k = self._paths_for(s)
            if left < max(self.g.fork_cost(k), self.e.min_fork_budget):
                out.append((i, self.g.opener))
        if left < 1 and not s.in_summary:
            out += [(i, t) for t in self.g.summary_open]
        return out

    def _paths_for(self, s: _Seq) -> int:
        if self.g.plan is not None:  # NPR: one path per plan
            return max(1, min(s.plans, self.e.num_paths))
        return self.e.num_paths

    def _cut(self, s: _Seq, idx: list[int]) -> None:
        """The budget ran out: every row of ``s`` now writes only its closers."""
        for i in idx:
            r = self.rows[i]
            if r.closing:
                continue
            if r.path >= 0:
                r.forced = deque([self.g.path_close[r.path]])
                s.block.cut = True
            else:
                r.forced = deque(self._main_closers(s)) if self.g is not None else deque()
                s.stop_after_forced = True
                r.done = not r.forced

    # ----------------------------------------------------------------------------------------------- step

    def _step(self, logits: torch.Tensor) -> None:
        """Choose every row's next token from its logits [B, V] and update the rows."""
        chosen, values = self._choose(logits)
        remove: list[int] = []
        n = len(self.rows)
        for i in range(n):
            r = self.rows[i]
            if r.done:
                r.seq.finish_reason = "length"
                r.seq.rows.remove(r)
                remove.append(i)
            elif r.closing:
                self._park(i, r, values[i], remove)
            elif r.fork:
                self._fork(i, r, values[i])
            else:
                forced = bool(r.forced)
                if forced:
                    r.forced.popleft()
                self._take(i, r, chosen[i], values[i], forced, remove)
        self._mark_seen()
        if remove:
            self._compact(remove)

    def _choose(self, logits: torch.Tensor) -> tuple[list[int], list[float]]:
        """Each row's token (drawn, or the one the engine decides) and its raw log-prob, read back to the host in
        one transfer: the step's one host sync, which the grammar, the budget and the forks depend on."""
        logp = torch.log_softmax(logits, -1)  # [B, V] raw, temperature 1: what training recomputes
        bans, path_rows = self._plan_budget()
        shaped = logits if self.bias is None else logits + self.bias
        if self.seen is not None:
            in_path = upload([r.path >= 0 for r in self.rows], torch.bool, self.device)[:, None]
            shaped = torch.where(in_path, penalise_repeats(shaped, self.seen[:len(self.rows)], self.penalty), shaped)
        if bans or path_rows:
            # In place where ``shaped`` is already this step's own copy: out of place, every step of a forked call
            # copied the whole [B, V] logits once more (70 ms a step at 256 rows of a 151k vocabulary, on a CPU).
            if shaped is logits:
                shaped = shaped.clone()
            if bans:
                rows_t, toks_t = upload(list(zip(*bans)), torch.long, self.device)
                shaped.index_put_((rows_t, toks_t), self.neg_inf)
            for path, rows in path_rows.items():
                shaped.index_put_((upload(rows, torch.long, self.device)[:, None], self.path_bans[path][None]),
                                  self.neg_inf)
        x = upload([self._fixed(), self._bits()], torch.long, self.device)  # [2, B]
        drawn = draw(shaped, self.s.temperature, self.s.top_p, x[1])  # [B]
        scored = torch.where(x[0] >= 0, x[0], drawn)  # [B]
        values = logp.gather(1, scored[:, None]).squeeze(1)  # [B]
        read = torch.stack([scored.double(), values.double()]).tolist()  # token ids are exact in float64
        return [int(t) for t in read[0]], read[1]

    def _bits(self) -> list[int]:
        """Each row's random bits: a function of its stream and the index of the token it decides, nothing else
        (so a sequence samples the same tokens whatever shares the batch, see ``sampling``)."""
        if self.s.temperature == 0:
            return [0] * len(self.rows)
        return [uniform_bits(r.key, len(r.seq.tokens) if r.path < 0 else len(r.seq.block.paths[r.path].tokens))
                for r in self.rows]

    def _fixed(self) -> list[int]:
        """The token each row scores when the engine, not the sampler, decides it (-1: the drawn one)."""
        out = []
        for r in self.rows:
            if r.done:
                out.append(0)
            elif r.closing:  # score the token that follows this path in the serialized sequence
                nxt = r.path + 1
                out.append(self.g.path_open[nxt][0] if nxt < len(r.seq.block.paths) else self.g.block_closers[0])
            elif r.fork:
                out.append(self.g.path_open[0][0])
            else:
                out.append(r.forced[0] if r.forced else -1)
        return out

    def _take(self, i: int, r: _Row, token: int, lp: float, forced: bool, remove: list[int]) -> None:
        s = r.seq
        s.used += 1
        r.feed, r.pos = token, r.pos + 1
        if self.seen is not None:
            self.marks.append((i, token))
        if r.path >= 0:
            path = s.block.paths[r.path]
            path.tokens.append(token)
            path.logprobs.append(lp)
            path.mask.append(0 if forced else 1)
            if token in self.path_close:
                path.closed, r.closing = True, True
            return
        s.tokens.append(token)
        s.logprobs.append(lp)
        s.mask.append(0 if forced else 1)
        if s.stream is not None:
            s.stream.see(token, self.g)
        elif self.structured:
            if token in self.g.summary_open:
                s.in_summary = True
            elif token == self.g.summary_close:
                s.in_summary = False
            if self.g.guideline is not None:
                s.plans = 0 if token == self.g.guideline else s.plans + (token == self.g.plan)
            if token == self.g.opener and not forced:
                r.fork = self._paths_for(s)
        if (token in self.eos and not forced) or (s.stop_after_forced and not r.forced):
            s.finish_reason = "stop" if token in self.eos and not forced else "length"
            s.rows.remove(r)
            remove.append(i)

    def _fork(self, i: int, r: _Row, lp_first: float) -> None:
        """Row i fed the opener: it becomes path 0, and k-1 copies of its cache become paths 1..k-1."""
        s, k = r.seq, r.fork
        s.blocks += 1
        block = _Block(p=r.pos, prefix_len=self.cache.lens[i], paths=[_Path() for _ in range(k)])
        s.block = block
        r.fork = 0
        new = list(range(len(self.rows), len(self.rows) + k - 1))
        if new:
            self.cache.check_rows(len(self.rows) + k - 1)
            self.cache.copy_rows([i] * len(new), new)
            if self.seen is not None:
                self.seen[new[0]:new[-1] + 1] = self.seen[i]
        rows = [r] + [_Row(seq=s, pos=r.pos) for _ in new]
        self.rows += rows[1:]
        s.rows = list(rows)
        for j, row in enumerate(rows):
            opening = self.g.path_open[j]
            row.path, row.forced = j, deque(opening[1:])
            row.key = stream_key(self.seed, s.index, s.blocks * 64 + j + 1)
            path = block.paths[j]
            path.tokens.append(opening[0])
            path.logprobs.append(lp_first if j == 0 else None)  # scored when path j-1 closes
            path.mask.append(0)
            row.feed, row.pos = opening[0], block.p + 1
            s.used += 1
            if self.seen is not None:
                self.marks.append((i if j == 0 else new[j - 1], opening[0]))

    def _park(self, i: int, r: _Row, lp_next: float, remove: list[int]) -> None:
        """Row i fed its path's closing tag: score what follows the path, then wait (or merge if last)."""
        s, b = r.seq, r.seq.block
        if r.path + 1 < len(b.paths):
            b.paths[r.path + 1].logprobs[0] = lp_next
        else:
            b.closer_logprob = lp_next
        b.done += 1
        r.closing = False
        longest = max(len(p.tokens) for p in b.paths)
        if b.done < len(b.paths):
            b.paths[r.path].parked = self.cache.take(i, b.prefix_len)
            s.rows.remove(r)
            remove.append(i)
            return
        # The last path closed: this row becomes the merged stream (prefix + every path).
        for j, p in enumerate(b.paths):
            if j != r.path:
                self.cache.append(i, p.parked)
                p.parked = None
            s.tokens += p.tokens
            s.logprobs += p.logprobs
            s.mask += p.mask
        s.block = None
        closers = self.g.block_closers
        r.path, r.pos, r.key = -1, b.p + longest, s.key
        r.forced = deque(closers[1:])
        if b.cut:
            r.forced.append(self.g.summary_close)
            s.stop_after_forced = True
        s.used += 1
        s.tokens.append(closers[0])
        s.logprobs.append(b.closer_logprob)
        s.mask.append(0)
        r.feed, r.pos = closers[0], r.pos + 1
        if closers[0] in self.g.summary_open:
            s.in_summary = True
        s.seen_from = len(s.tokens)
        if self.seen is not None:
            self.seen[i] = False  # the penalty applies inside paths only
        if s.stop_after_forced and not r.forced:
            s.finish_reason = "length"
            s.rows.remove(r)
            remove.append(i)

    def _compact(self, remove: list[int]) -> None:
        """Drop the rows at ``remove``, keeping the others contiguous: the order is that of removing each in turn
        (highest first) by moving the last row into its slot, but each surviving row's entries move at most once
        (a merged row holding every path would otherwise be copied once per path that closed with it)."""
        self.cache.free_rows(remove)
        order = list(range(len(self.rows)))
        for i in sorted(remove, reverse=True):
            last = order.pop()
            if i < len(order):
                order[i] = last
        # Sources are surviving rows past the new end, destinations the removed rows' slots: disjoint.
        moves = [(src, dst) for dst, src in enumerate(order) if src != dst]
        for src, dst in moves:
            self.cache.move_row(src, dst)
        if self.seen is not None and moves:
            src, dst = (upload(list(x), torch.long, self.device) for x in zip(*moves))
            self.seen[dst] = self.seen[src]
        self.rows = [self.rows[j] for j in order]
