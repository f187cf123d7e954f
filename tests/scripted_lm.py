"""A language model whose samples are fixed by construction, for tests of what the engine does with a model's tokens
(forks, forced tags, masks, budgets, stops) rather than of what a model computes.

``ScriptedLM`` puts all but ~1e-10 of each step's probability on the token a script names for that step. Its logits
depend on the (path id, position) of the token fed and on nothing else: not on the weights of a trained toy, not on
the context, the attention mask or the cache. So:

- what it writes is the same on every CPU: torch runs other kernels on AVX-512, AVX2 and its portable build, but no
  rounding moves a gap of ``margin`` = 30 between two logits, and no seed finds the 1e-10 left outside the script;
- the engine's decode and the training forward (``recompute_logprobs``) give it the same logits exactly where they
  agree on path ids and positions: a token the engine placed at another position or in another path is scored, and
  sampled, after another script entry, and the sample leaves its trace.

What it cannot test is the arithmetic of a real model (attention over the cache, the runners, path vectors): that is
the real tiny models' part (tests/engine/test_consistency.py), whose assertions hold for whatever those models write.

Usage: build the response the test expects with ``Trace`` (what the model writes, mask 1, and what the engine forces,
mask 0), script the model with ``ScriptedLM.writing(tokenizer, [(prompt, trace.ids)], tags)``, run the engine with it
(any ``backend``: it is not a Qwen3, so ``auto`` gives the HF runner) and assert the sample is the trace.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from types import SimpleNamespace

import torch
from transformers.modeling_outputs import CausalLMOutputWithPast

from parathink.formats.layouts import TagIds, build_layout, causal_layout
from parathink.formats.tags import MAX_PARATHINKER_PATHS

MARGIN = 30.0  # every other token gets < 1e-13 of the mass; log-probs stay within fp32's 1e-4 comparisons


def script(traces: Iterable[tuple[Sequence[int], Sequence[int]]], tags: TagIds | None
           ) -> dict[tuple[int, int], int]:
    """{(path id, position): the token written next} that makes a model write each (prompt, response) of ``traces``.

    Token i of a sequence is scored from the logits of token i-1 of the serialized sequence, in the engine (a path's
    opener after the previous path's closer, the block's closer after the last path) as in training, so the entry for
    token i sits at token i-1's path id and position in the layout (``build_layout`` under ``tags``; ``None``: causal).
    Within one sequence no two tokens share a path id and a position; traces that need two tokens at one are refused.
    """
    out: dict[tuple[int, int], int] = {}
    for prompt, response in traces:
        ids = [*prompt, *response]
        lay = causal_layout(len(ids)) if tags is None else build_layout(ids, tags)
        for i in range(len(prompt), len(ids)):
            key = (int(lay.path_ids[i - 1]), int(lay.position_ids[i - 1]))
            if out.setdefault(key, ids[i]) != ids[i]:
                raise ValueError(f"scripted traces disagree after path {key[0]}, position {key[1]}: "
                                 f"{out[key]} or {ids[i]}")
    return out


class ScriptedLM(torch.nn.Module):
    """The model interface the engine and ``recompute_logprobs`` use (``config``, ``parameters()``,
    ``get_output_embeddings()``, ``forward(input_ids, position_ids, path_ids, ...) -> .logits``) over a script.

    logits[b, t] = ``margin`` on ``next_token[path_ids[b, t], position_ids[b, t]]``, 0 elsewhere; an unscripted
    (path id, position) names EOS, so a sequence that leaves its script ends (or, inside a path where the engine bans
    EOS, writes noise the test sees). ``config.parathink_max_paths`` makes both the engine's runner and the training
    forward pass the path ids, as they do for ParaThinker's path vectors; the model has no path vectors.
    """

    def __init__(self, vocab_size: int, eos_token_id: int, entries: dict[tuple[int, int], int], *,
                 max_positions: int = 1024, margin: float = MARGIN):
        super().__init__()
        self.config = SimpleNamespace(vocab_size=vocab_size, max_position_embeddings=max_positions,
                                      eos_token_id=eos_token_id, parathink_max_paths=MAX_PARATHINKER_PATHS,
                                      num_hidden_layers=1, num_attention_heads=1, num_key_value_heads=1, head_dim=1,
                                      hidden_size=1)
        next_token = torch.full((MAX_PARATHINKER_PATHS + 1, max_positions), eos_token_id, dtype=torch.long)
        for (path, pos), token in entries.items():
            next_token[path, pos] = token
        self.register_buffer("next_token", next_token, persistent=False)  # [paths + 1, positions]
        # The head's weight is each token's logit when scripted: a parameter, so the engine finds a device and a
        # dtype and the training forward a graph. Not named lm_head: code that finds one may take the model for a
        # transformer whose hidden states it projects.
        self.head = torch.nn.Linear(1, vocab_size, bias=False)
        torch.nn.init.constant_(self.head.weight, margin)

    @classmethod
    def writing(cls, tokenizer, traces: Iterable[tuple[Sequence[int], Sequence[int]]], tags: TagIds | None = None,
                **kw) -> ScriptedLM:
        """A model that writes each (prompt, response) of ``traces`` under the layout of ``tags`` (None: causal)."""
        return cls(len(tokenizer), tokenizer.eos_token_id, script(traces, tags), **kw)

    def get_output_embeddings(self) -> torch.nn.Linear:
        return self.head

    def forward(self, input_ids: torch.Tensor, position_ids: torch.Tensor | None = None,
                path_ids: torch.Tensor | None = None, **_) -> CausalLMOutputWithPast:
        b, n = input_ids.shape
        if position_ids is None:
            position_ids = torch.arange(n, device=input_ids.device).expand(b, n)
        if path_ids is None:
            path_ids = torch.zeros_like(position_ids)
        chosen = self.next_token[path_ids.expand_as(position_ids), position_ids]  # [B, L]
        one_hot = torch.nn.functional.one_hot(chosen, self.config.vocab_size).to(self.head.weight.dtype)
        return CausalLMOutputWithPast(logits=one_hot * self.head.weight[:, 0])  # [B, L, V]


class Trace:
    """A response built piece by piece, as the engine will have written it: ``model`` pieces are what the model
    samples (loss mask 1), ``forced`` ones what the engine writes itself (mask 0: path openers, block closers)."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.ids: list[int] = []
        self.mask: list[int] = []

    def model(self, text: str) -> Trace:
        return self._add(self.tokenizer.encode(text, add_special_tokens=False), 1)

    def forced(self, ids: Sequence[int]) -> Trace:
        return self._add(list(ids), 0)

    def eos(self) -> Trace:
        return self._add([self.tokenizer.eos_token_id], 1)

    def _add(self, ids: list[int], mask: int) -> Trace:
        self.ids += ids
        self.mask += [mask] * len(ids)
        return self
