"""Plain causal sampling with transformers ``generate``, for the base stage's accuracy checks.

Structured (parallel) sampling belongs to ``parathink.engine``; this helper is for sequential models and
for quick in-training checks, where a plain KV-cached ``generate`` is exact.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from parathink.data.prompts import build_prompt
from parathink.grading import grade


@torch.no_grad()
def generate_responses(model, tokenizer, prompts: Sequence[str], *, temperature: float = 0.0,
                       max_new_tokens: int = 128, batch_size: int = 256, seed: int = 0) -> list[str]:
    """One response per prompt; temperature 0 is greedy."""
    was_training = model.training
    model.eval()
    side = tokenizer.padding_side
    tokenizer.padding_side = "left"  # generation continues every row from its last real token
    gen = torch.Generator().manual_seed(seed)
    out: list[str] = []
    try:
        for i in range(0, len(prompts), batch_size):
            enc = tokenizer(list(prompts[i:i + batch_size]), return_tensors="pt", padding=True,
                            add_special_tokens=False).to(model.device)
            torch.manual_seed(int(torch.randint(0, 2**31 - 1, (1,), generator=gen)))
            kw = (dict(do_sample=True, temperature=temperature, top_k=0, top_p=1.0) if temperature > 0
                  else dict(do_sample=False))
            ids = model.generate(**enc, max_new_tokens=max_new_tokens, pad_token_id=tokenizer.pad_token_id,
                                 eos_token_id=tokenizer.eos_token_id, **kw)
            out += tokenizer.batch_decode(ids[:, enc["input_ids"].shape[1]:], skip_special_tokens=False)
    finally:
        tokenizer.padding_side = side
        model.train(was_training)
    return [_strip(r, tokenizer) for r in out]


def _strip(text: str, tokenizer) -> str:
    """Cut at the first end-of-sequence and drop padding."""
    eos = tokenizer.eos_token
    if eos and eos in text:
        text = text[: text.index(eos)]
    pad = tokenizer.pad_token
    return text.replace(pad, "") if pad else text


def accuracy(model, tokenizer, records: Sequence[dict], **kw) -> tuple[float, list[str]]:
    """Fraction of ``records`` (with ``problem`` and ``answer``) answered correctly, and the responses."""
    prompts = [build_prompt(r["problem"], tokenizer) for r in records]
    responses = generate_responses(model, tokenizer, prompts, **kw)
    correct = [grade(resp, r["answer"])[1] for resp, r in zip(responses, records)]
    return sum(correct) / max(1, len(correct)), responses
