"""Structured attention through the model's own attention (docs/design.md, Layouts; issue 4 "isolation test").

prefix + block of 3 paths + summary: each path's logits equal those of prefix + that path alone at the same
positions (fp32, <= 1e-4), and the summary's logits move when any path changes. Both sdpa and eager.
"""

from __future__ import annotations

import pytest
import torch

from parathink.formats.layouts import TagIds, build_layout
from parathink.modeling import structured_inputs, to_4d_mask

PREFIX = "Problem: Mia has 12 apples. She buys 5 more. She gives away 3. How many apples does Mia have now?\nSolution:\n"
PATHS = ["12 + 5 = 17\n17 - 3 = 14", "5 - 3 = 2\n12 + 2 = 14", "12 - 3 = 9\n9 + 5 = 14\nso 14"]
SUMMARY = "All paths give 14."


def _ids(tok, text):
    return tok(text, add_special_tokens=False)["input_ids"]


def build_sequence(tok, paths):
    """Token ids of the whole sequence and, per path, the index range of its tokens (<Path> .. </Path>)."""
    t = tok.convert_tokens_to_ids
    ids = _ids(tok, PREFIX) + [t("<Parallel>")]
    spans = []
    for p in paths:
        start = len(ids)
        ids += [t("<Path>")] + _ids(tok, p) + [t("</Path>")]
        spans.append((start, len(ids)))
    ids += [t("</Parallel>"), t("<Summary>")] + _ids(tok, SUMMARY) + [t("</Summary>")]
    return ids, spans


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_each_path_sees_only_prefix(make_model, tagged_tokenizer, attn):
    tok = tagged_tokenizer
    model = make_model(tok, attn=attn, scale=0.2)
    tags = TagIds.from_tokenizer(tok, "parallel_r1")
    ids, spans = build_sequence(tok, PATHS)
    layout = build_layout(ids, tags)
    with torch.no_grad():
        full = model(input_ids=torch.tensor([ids]), **structured_inputs(layout)).logits[0]  # [L, V]
        causal = model(input_ids=torch.tensor([ids])).logits[0]
    n_prefix = spans[0][0]  # prefix + <Parallel>
    for k, (a, b) in enumerate(spans):
        alone = ids[:n_prefix] + ids[a:b]
        pos = torch.cat([layout.position_ids[:n_prefix], layout.position_ids[a:b]])[None]
        with torch.no_grad():
            ref = model(input_ids=torch.tensor([alone]), position_ids=pos).logits[0, n_prefix:]
        diff = (full[a:b] - ref).abs().max().item()
        assert diff <= 1e-4, f"path {k}: max abs diff {diff:.2e}"
        if k > 0:  # the check has teeth: plain causal attention lets later paths see earlier ones
            assert (causal[a:b] - ref).abs().max().item() > 1e-2


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_summary_sees_every_path(make_model, tagged_tokenizer, attn):
    tok = tagged_tokenizer
    model = make_model(tok, attn=attn, scale=0.2)
    tags = TagIds.from_tokenizer(tok, "parallel_r1")
    ids, spans = build_sequence(tok, PATHS)
    summary_start = spans[-1][1] + 1  # after </Parallel>

    def summary_logits(seq):
        with torch.no_grad():
            return model(input_ids=torch.tensor([seq]), **structured_inputs(build_layout(seq, tags))).logits[0, summary_start:]

    base = summary_logits(ids)
    for k in range(len(PATHS)):
        changed = list(PATHS)
        changed[k] = changed[k].replace("14", "15")  # same token count: positions after the block unchanged
        ids2, _ = build_sequence(tok, changed)
        assert len(ids2) == len(ids)
        assert (summary_logits(ids2) - base).abs().max().item() > 1e-3, f"summary ignores path {k}"


def test_to_4d_mask_is_additive_and_rejects_empty_rows():
    m = torch.tensor([[True, False], [True, True]])
    out = to_4d_mask(m, torch.float32)
    assert out.shape == (1, 1, 2, 2)
    assert out[0, 0, 0, 0] == 0 and out[0, 0, 0, 1] == torch.finfo(torch.float32).min
    with pytest.raises(ValueError, match="allows no key"):
        to_4d_mask(torch.tensor([[False, False], [True, True]]))
    with pytest.raises(TypeError):
        to_4d_mask(m.float())
