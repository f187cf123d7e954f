"""ParaThinker's per-path vectors: zero-init = the plain model; once trained they move only path tokens'
keys/values; saved with the checkpoint and re-installed by load_model."""

from __future__ import annotations

import torch

from parathink.formats.layouts import TagIds, build_layout
from parathink.modeling import install_path_vectors, load_model, save_model, structured_inputs


def _sequence(tok):
    t = tok.convert_tokens_to_ids
    ids = tok("Problem: Tom has 4 cards.\nSolution:\n", add_special_tokens=False)["input_ids"]
    for k, p in enumerate(("4 + 1 = 5", "4 + 2 = 6"), 1):
        ids += [t(f"<think{k}>")] + tok(p, add_special_tokens=False)["input_ids"] + [t(f"</think{k}>")]
    ids += [t("<summary>")] + tok("5 or 6", add_special_tokens=False)["input_ids"] + [t("</summary>")]
    return ids


def test_zero_init_is_the_plain_model_and_vectors_act_on_paths(tagged_tokenizer, make_model, tmp_path):
    tok = tagged_tokenizer
    model = make_model(tok, scale=0.2)
    ids = _sequence(tok)
    lay = build_layout(ids, TagIds.from_tokenizer(tok, "parathinker"))
    inputs = structured_inputs(lay, path_ids=True)
    x = torch.tensor([ids])
    with torch.no_grad():
        plain = model(input_ids=x, **{k: v for k, v in inputs.items() if k != "path_ids"}).logits
        install_path_vectors(model, 4)
        zero = model(input_ids=x, **inputs).logits
        torch.testing.assert_close(zero, plain, atol=0, rtol=0)
        for name, p in model.named_parameters():
            if "path_vectors" in name:
                p.normal_(0, 0.5)
        moved = model(input_ids=x, **inputs).logits
    first_path = int((lay.path_ids > 0).nonzero()[0])
    assert torch.equal(moved[0, :first_path], plain[0, :first_path])  # prefix: no path vector reaches it
    assert (moved[0, first_path:] - plain[0, first_path:]).abs().max() > 1e-3
    save_model(model, tok, tmp_path / "m")
    loaded, _ = load_model(tmp_path / "m")
    with torch.no_grad():
        again = loaded(input_ids=x, **inputs).logits
    torch.testing.assert_close(again, moved)
