"""A tiny Qwen3 taught (in a few seconds) to write all three grammars, so the engine really forks.

Prompts start with "P" (parallel_r1), "N" (npr) or "T" (parathinker); the model then writes short random
digit strings in that grammar's shape. What it writes need not be correct, only structured.
"""

from __future__ import annotations

import random

import pytest
import torch
from transformers import Qwen3Config, Qwen3ForCausalLM

from parathink.formats.tags import TAGS
from parathink.modeling.tokenizer import train_tokenizer

WORDS = ["add", "sub", "so", "then", "value", "is", "check", "answer"]


def _text(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) if rng.random() < 0.5 else str(rng.randint(0, 99)) for _ in range(rng.randint(1, 5)))


def trace(kind: str, rng: random.Random) -> str:
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


@pytest.fixture(scope="session")
def tiny():
    """(model, tokenizer): fp32, sdpa, taught the three shapes for ~150 steps."""
    torch.manual_seed(0)
    rng = random.Random(0)
    tok = train_tokenizer([_text(rng) for _ in range(300)] + [f"{k} question {i}:" for k in "PNT" for i in range(50)])
    tok.add_special_tokens({"additional_special_tokens": [t for g in TAGS.values() for t in g]})
    cfg = Qwen3Config(vocab_size=len(tok), hidden_size=64, intermediate_size=192, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=16, tie_word_embeddings=True,
                      max_position_embeddings=512, pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id)
    cfg._attn_implementation = "sdpa"
    model = Qwen3ForCausalLM(cfg)
    docs = []
    for i in range(600):
        kind = "PNT"[i % 3]
        docs.append(tok.encode(f"{kind} question {i % 50}:", add_special_tokens=False)
                    + tok.encode(trace(kind, rng), add_special_tokens=False) + [tok.eos_token_id])
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    model.train()
    for step in range(150):
        batch = [docs[(step * 16 + j) % len(docs)] for j in range(16)]
        n = max(map(len, batch))
        ids = torch.full((16, n), tok.pad_token_id)
        labels = torch.full((16, n), -100)
        for j, d in enumerate(batch):
            ids[j, :len(d)] = torch.tensor(d)
            labels[j, :len(d)] = torch.tensor(d)
        loss = model(input_ids=ids, labels=labels).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
    model.eval()
    return model, tok


def prompt(tok, kind: str, i: int) -> list[int]:
    return tok.encode(f"{kind} question {i}:", add_special_tokens=False)
