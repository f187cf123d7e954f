"""A toy model that writes NPR blocks with as many plans as its prompt asks for (``"plans 4:"``), and ParaThinker
thoughts, so the engine really forks 2, 4 and 8 branches under the layout training uses.

The texts mean nothing (words and numbers); the structure is what the tests need. ~0.1M parameters, 600 steps on one
thread (a minute on a quiet 2-core machine).
"""

from __future__ import annotations

import random

import torch

WORDS = ["add", "sub", "so", "then", "value", "is", "check", "answer"]
PLAN_COUNTS = (1, 2, 4, 8)


def _text(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) if rng.random() < 0.5 else str(rng.randint(0, 99))
                    for _ in range(rng.randint(1, 4)))


def npr_prompt(k: int) -> str:
    return f"plans {k}:"


def npr_trace(k: int, rng: random.Random) -> str:
    """A response in NPR's engine form: ``k`` plans, ``k`` labelled steps, a takeaway, an answer. Plan i reads
    "i: of k", so closing the guideline is a comparison of two digits, not counting (a 2-layer toy cannot count)."""
    plans = "".join(f"<plan>{i}: of {k}</plan>" for i in range(1, k + 1))
    steps = "".join(f"<step>{i}: {_text(rng)}</step>" for i in range(1, k + 1))
    return f"<guideline>{plans}</guideline>{steps}<takeaway>{_text(rng)}</takeaway>{_text(rng)}"


def thinker_trace(k: int, rng: random.Random) -> str:
    thoughts = "".join(f"<think{i}>{_text(rng)}</think{i}>" for i in range(1, k + 1))
    return f"{thoughts}<summary>{_text(rng)}</summary>"


def plan_model(steps: int = 600, seed: int = 0):
    """(model, tokenizer): the engine tests' toy architecture (fp32 Qwen3, hidden 64, 2 layers, sdpa, every tag one
    token), taught both shapes under the structured layout the engine samples with (taught causally, a later step
    or thought would start from a context it never saw)."""
    from parathink.engine.toy import toy_model
    from parathink.formats.layouts import TagIds, build_batch_layout
    from parathink.modeling import structured_inputs

    model, tok = toy_model(steps=0, seed=seed)  # untrained: the toy's tokenizer and architecture only
    rng = random.Random(seed)

    def doc(prompt: str, response: str) -> list[int]:
        return tok.encode(prompt, add_special_tokens=False) + tok.encode(response, add_special_tokens=False) + \
            [tok.eos_token_id]

    docs = {"npr": [doc(npr_prompt(k), npr_trace(k, rng)) for k in PLAN_COUNTS for _ in range(60)],
            "parathinker": [doc("thoughts:", thinker_trace(rng.randint(2, 8), rng)) for _ in range(240)]}
    tags = {g: TagIds.from_tokenizer(tok, g) for g in docs}
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    model.train()
    for step in range(steps):
        grammar = "npr" if step % 2 else "parathinker"
        batch = rng.sample(docs[grammar], 16)
        layout = build_batch_layout(batch, tags[grammar])
        ids = torch.full(layout.position_ids.shape, tok.pad_token_id)
        labels = torch.full_like(ids, -100)
        for j, d in enumerate(batch):
            ids[j, :len(d)] = labels[j, :len(d)] = torch.tensor(d)
        model(input_ids=ids, labels=labels, **structured_inputs(layout)).loss.backward()
        opt.step()
        opt.zero_grad()
    return model.eval(), tok


class ScriptedResponse(torch.nn.Module):
    """``model`` with the first response tokens of one prompt fixed by a table: the logits at input position
    ``prompt_len - 1 + j`` get +``margin`` on ``script[j]``, and every later position gets -``margin`` on each token
    of ``banned``. A margin of 30 makes the scripted token all but certain (the rest share < 1e-10 of the mass)
    while log-probs stay small enough for fp32 to compare them to 1e-4. The shift depends on the position ids alone, so the engine's decode and the training forward
    (``recompute_logprobs``) see the same logits, and the log-prob consistency check still means what it says.

    Why: a test of the engine's forking must not depend on what a briefly trained toy happened to learn, which
    differs between CPU families (torch picks other kernels on AVX2, AVX-512 and the default build). With the
    guideline scripted, the plans are the test's, and only the engine decides the branches. Use it with
    ``Engine(..., backend="hf")``: the fast runner reads the weights directly and would bypass this forward.
    """

    def __init__(self, model, prompt_len: int, script: list[int], banned: tuple[int, ...] = (), margin: float = 30.0):
        super().__init__()
        self.inner, self.prompt_len, self.margin = model, prompt_len, margin
        self.register_buffer("script", torch.tensor(script, dtype=torch.long), persistent=False)
        self.register_buffer("banned", torch.tensor(banned, dtype=torch.long), persistent=False)

    @property
    def config(self):
        return self.inner.config

    @property
    def generation_config(self):
        return self.inner.generation_config

    def get_output_embeddings(self):
        return self.inner.get_output_embeddings()

    def forward(self, *, position_ids: torch.Tensor, **kwargs):
        out = self.inner(position_ids=position_ids, **kwargs)
        j = position_ids - (self.prompt_len - 1)  # [B, L]: the response index each position's logits predict
        scripted = (j >= 0) & (j < len(self.script))
        want = torch.nn.functional.one_hot(self.script[j.clamp(0, len(self.script) - 1)], out.logits.shape[-1])
        shift = torch.where(scripted[..., None], want.to(out.logits.dtype) * self.margin, 0.0)  # [B, L, V]
        if len(self.banned):
            after = (j >= len(self.script))[..., None]
            ban = torch.zeros(out.logits.shape[-1], dtype=out.logits.dtype, device=out.logits.device)
            ban[self.banned] = -self.margin
            shift = shift + torch.where(after, ban, 0.0)
        out.logits = out.logits + shift
        return out


def scripted_planner(model, tok, k: int) -> tuple[ScriptedResponse, list[int]]:
    """(the planner scripted to open one NPR guideline with ``k`` plans and close it, prompt ids). After it
    ``<guideline>`` and ``</guideline>`` (the token NPR forks after) are banned, so the response forks exactly once,
    whatever the toy writes in its steps and after them."""
    prompt = tok.encode(npr_prompt(k), add_special_tokens=False)
    plans = "".join(f"<plan>{i}: of {k}</plan>" for i in range(1, k + 1))
    script = tok.encode(f"<guideline>{plans}</guideline>", add_special_tokens=False)
    banned = tuple(tok.convert_tokens_to_ids(t) for t in ("<guideline>", "</guideline>"))
    return ScriptedResponse(model, len(prompt), script, banned), prompt
