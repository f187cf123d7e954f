"""The decode loop under a KV budget: continuous admission, preemption and recompute over a ``PagedCache``.

Every step first reserves the blocks it will take (``demand``): one for each row whose blocks are full, k - 1
copies of the prefix for each fork, the whole merged row for each block whose last path closes. When the free
blocks do not cover it, the newest sequence in flight is preempted, all its rows and parked paths at once, until
they do. Why the newest and why whole: the oldest sequences hold the most KV and are nearest to finishing, so
preempting the newest throws away the least work, and the oldest one always advances (the call cannot livelock);
a sequence's paths share their prefix and wait for each other at the merge, so preempting one path would free
little and stall its siblings anyway.

A preempted sequence keeps its host state (tokens, log-probs, its rows' pending tokens, forced tags, budget) and
loses only its KV. It waits, oldest first, ahead of every prompt not yet admitted, and comes back when its rows
and their next step fit: one prefill over its serialized tokens (prompt, response so far, and each path of an
open block) with the structured layout's mask and positions, from which its rows (prefix + own path) and parked
paths are copied. Its next token is then drawn from the same counter-based uniform as it would have been
(``sampling``), so preemption changes what runs when, not what is sampled.

``SamplingConfig.batch_size`` caps the streams in flight, as without a budget (a forked stream has a row per open
path, so up to batch_size x num_paths rows); blocks, not rows, decide whether one more fits. Admission keeps one
spare block per row in flight, so a stream admitted now is not the one preempted at the next block boundary.
"""

from __future__ import annotations

import torch

from parathink.engine.kv_budget import BLOCK_TOKENS, blocks_for, min_kv_blocks, min_kv_cache_bytes, rows_per_sequence
from parathink.errors import ConfigError
from parathink.formats.layouts import build_layout


class BudgetScheduler:
    """The budgeted half of ``core._Run`` (which holds the rows, the cache and the step)."""

    def _check_budget(self, budget: int, blocks: int, max_len: int) -> None:
        """One sequence alone must always fit (``kv_budget.min_kv_blocks``)."""
        rows = rows_per_sequence(self.e.num_paths, self.structured)
        need = min_kv_blocks(max_len, self.e.num_paths, self.structured)
        if blocks - 1 < need:
            raise ConfigError(
                f"engine kv_cache_bytes={budget:,} holds {max(blocks - 1, 0) * BLOCK_TOKENS:,} tokens of KV "
                f"({self.token_bytes:,} bytes each) but one sequence needs up to {need * BLOCK_TOKENS:,} "
                f"(a row of {max_len:,} = the longest prompt + max_new_tokens + 1"
                f"{f', in up to {rows} rows' if rows > 1 else ''}): set kv_cache_bytes >= "
                f"{min_kv_cache_bytes(max_len, self.token_bytes, self.e.num_paths, self.structured):,} "
                "or lower max_new_tokens")

    # ----------------------------------------------------------------------------------------------- loop

    def _run_paged(self, pending) -> None:
        per_seq = self.e.num_paths if (self.structured and self.g.opener is None) else 1  # ParaThinker forks at once
        while pending or self.rows or self.waiting:
            spare = self._make_room()
            spare = self._recompute_waiting(spare)
            n_old = len(self.rows)
            logits = [self._decode(n_old)] if n_old else []
            if pending and not self.waiting:
                group = self._admissible(pending, per_seq, spare)
                if group:
                    logits.append(self._admit(group))
            if not logits:
                raise RuntimeError("engine: a preempted sequence does not fit an empty cache (engine bug)")
            self.max_rows = max(self.max_rows, len(self.rows))
            self._step(torch.cat(logits) if len(logits) > 1 else logits[0])
        if self.cache.used:
            raise RuntimeError(f"engine: {self.cache.used} KV blocks still held after the call (engine bug)")

    # ----------------------------------------------------------------------------------------------- room

    def _demand(self, rows) -> int:
        """Blocks the next step takes for ``rows``, given as (row, entries, blocks held)."""
        need, closing = 0, {}
        for r, n, held in rows:
            need += n >= held * BLOCK_TOKENS  # its next entry opens a block
            if r.fork > 1:
                # the paths share the prefix's full blocks and copy its partly filled last one, opener included
                need += (r.fork - 1) * ((n + 1) % BLOCK_TOKENS != 0)
            if r.closing:
                closing[id(r.seq)] = (r.seq, closing.get(id(r.seq), (None, 0))[1] + 1)
        for s, count in closing.values():
            b = s.block
            if b.done + count == len(b.paths):  # the block's last path closes: the merged row takes every path
                need += blocks_for(b.prefix_len + sum(len(p.tokens) for p in b.paths))
        return need

    def _live(self) -> list[tuple]:
        return [(r, self.cache.lens[i], len(self.cache.blocks[i])) for i, r in enumerate(self.rows)]

    def _make_room(self) -> int:
        """Preempt the newest sequences until the step's demand fits; the blocks to spare after it."""
        while True:
            spare = len(self.cache.free) - self._demand(self._live())
            if spare >= 0:
                return spare
            seqs = {id(r.seq): r.seq for r in self.rows}
            if len(seqs) == 1:
                raise RuntimeError("engine: one sequence outgrew the KV budget (engine bug: _check_budget allows it)")
            self._preempt(max(seqs.values(), key=lambda s: s.order))

    def _preempt(self, s) -> None:
        """Free every block of ``s`` (rows and parked paths); it waits to be recomputed."""
        for p in s.block.paths if s.block is not None else []:
            if p.parked is not None:
                self.cache.drop(p.parked)
                p.parked = None
        self._compact([i for i, r in enumerate(self.rows) if r.seq is s])
        self.waiting.append(s)
        self.waiting = type(self.waiting)(sorted(self.waiting, key=lambda w: w.order))
        self.preemptions += 1
        self.preempted_in_block += s.block is not None

    def _admissible(self, pending, per_seq: int, spare: int) -> list:
        """The prompts to admit now: while rows and blocks allow (one spare block kept per row in flight)."""
        group, rows, streams = [], len(self.rows), self._streams()
        while pending and (streams < self.s.batch_size or rows == 0):
            cost = blocks_for(len(pending[0].prompt)) * per_seq
            if rows and cost + rows > spare:
                break
            group.append(pending.popleft())
            spare -= cost
            rows, streams = rows + per_seq, streams + 1
        return group

    # ----------------------------------------------------------------------------------------------- recompute

    def _recompute_waiting(self, spare: int) -> int:
        while self.waiting:
            s = self.waiting[0]
            plan = self._plan(s)
            if self.rows and self._streams() >= self.s.batch_size:
                break
            if plan["cost"] > spare:
                if self.rows:
                    break
                raise RuntimeError("engine: a preempted sequence does not fit an empty cache (engine bug)")
            self.waiting.popleft()
            self._recompute(s, plan)
            spare = len(self.cache.free) - self._demand(self._live())
        return spare

    def _plan(self, s) -> dict:
        """What recomputing ``s`` prefills: its serialized tokens (positions, path ids, mask) and where its rows'
        entries lie in them. Each row's last token is not in its cache yet (it is fed by the next step)."""
        rows = sorted(s.rows, key=lambda r: r.path)
        if s.block is None:
            prefix, spans = s.prompt + s.tokens[:-1], []
        else:
            prefix = s.prompt + s.tokens  # the opener is in every path's cache
            live = {r.path for r in rows}
            spans = [(r.path, s.block.paths[r.path].tokens[:-1]) for r in rows]  # the rows' paths first
            spans += [(j, p.tokens) for j, p in enumerate(s.block.paths) if j not in live]  # then the parked ones
        n = len(prefix)
        lens = [n + len(spans[j][1]) if spans else n for j in range(len(rows))]
        # the other rows share the prefix's full blocks with the first (``PagedCache.copy_spans``)
        cost = blocks_for(n + sum(len(t) for _, t in spans)) + sum(blocks_for(m) - n // BLOCK_TOKENS for m in lens[1:])
        cost += sum(blocks_for(len(t)) for _, t in spans[len(rows):])
        cost += self._demand([(r, m, blocks_for(m)) for r, m in zip(rows, lens)])
        return {"rows": rows, "prefix": prefix, "spans": spans, "lens": lens, "cost": cost}

    def _inputs(self, s, plan: dict) -> tuple[list[int], list[int], list[int], torch.Tensor | None]:
        """Tokens, positions, path ids and mask [T, T] (None: causal) of the serialized prefill."""
        prefix, spans = plan["prefix"], plan["spans"]
        n = len(prefix)
        if not self.structured:
            return prefix, list(range(n)), [0] * n, None
        layout = build_layout(prefix, self.e.tags)
        tokens, pos, pid = list(prefix), layout.position_ids.tolist(), layout.path_ids.tolist()
        total = n + sum(len(t) for _, t in spans)
        mask = torch.zeros(total, total, dtype=torch.bool)
        mask[:n, :n] = layout.attention_mask
        at = n
        for j, path in spans:  # path j: positions p+1.., sees the prefix and itself, causally
            m = len(path)
            tokens += path
            pos += list(range(s.block.p + 1, s.block.p + 1 + m))
            pid += [j + 1] * m
            mask[at:at + m, :n] = True
            mask[at:at + m, at:at + m] = torch.ones(m, m, dtype=torch.bool).tril_()
            at += m
        return tokens, pos, pid, mask

    def _recompute(self, s, plan: dict) -> None:
        """One prefill of ``s``'s serialized tokens into its first row, then its other rows and parked paths are
        copied out of it and the first row is cut back to its own entries."""
        tokens, pos, pid, mask = self._inputs(s, plan)
        t, row0 = len(tokens), len(self.rows)
        self.cache.check_rows(row0 + len(plan["rows"]))
        up = [torch.tensor([x], dtype=torch.long, device=self.device) for x in (tokens, pos, pid)]
        last = torch.tensor([t - 1], dtype=torch.long, device=self.device)
        self.cache.begin_prefill(row0, [t], t)
        self.e.runner.prefill(up[0], up[1], row0, self.cache, up[2], last,
                              mask=None if mask is None else mask.to(self.device)[None, None])
        self.cache.prefilled(row0, [t], t)
        n, at, spans = len(plan["prefix"]), len(plan["prefix"]), plan["spans"]
        offsets = []
        for _, path in spans:
            offsets.append(at)
            at += len(path)
        for k in range(1, len(plan["rows"])):  # the other open paths: prefix + own
            self.cache.copy_spans(row0, [(0, n), (offsets[k], offsets[k] + len(spans[k][1]))], row0 + k)
        for k in range(len(plan["rows"]), len(spans)):  # the closed paths, parked again
            j, path = spans[k]
            s.block.paths[j].parked = self.cache.extract(row0, offsets[k], offsets[k] + len(path))
        self.cache.truncate(row0, plan["lens"][0])
        self.rows += plan["rows"]
        self.recomputed += t
        if self.seen is not None:  # the repetition penalty's context, as the rows had it
            base = (s.prompt if s.seen_from is None else []) + s.tokens[s.seen_from or 0:]
            for k, r in enumerate(plan["rows"]):
                self.seen[row0 + k] = False
                own = s.block.paths[r.path].tokens if r.path >= 0 else []
                self.marks += [(row0 + k, x) for x in base + own]
            self._mark_seen()
