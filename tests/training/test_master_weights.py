"""fp32 master weights for bf16 parameters (parathink.training.master_weights): an update below bf16's rounding step
is kept, a resumed optimiser continues from the masters, and a published model carries them unrounded."""

from __future__ import annotations

import pytest
import torch

from parathink.training.master_weights import MasterAdamW, full_precision_state, needs_masters, to_half_keeping_masters


def _tiny_qwen3(dtype=torch.float32):
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(0)
    config = Qwen3Config(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, head_dim=16, tie_word_embeddings=True,
                         max_position_embeddings=64)
    config._attn_implementation = "sdpa"
    return Qwen3ForCausalLM(config).to(dtype)


def _loss(model, seed: int = 0) -> torch.Tensor:
    ids = torch.randint(0, 64, (2, 12), generator=torch.Generator().manual_seed(seed))
    return model(input_ids=ids, labels=ids).loss


def _changed(a: torch.nn.Module, b: dict[str, torch.Tensor]) -> float:
    """Share of the weights of ``a`` (as fp32) that differ from ``b``'s."""
    moved = total = 0
    for name, p in a.named_parameters():
        moved += int((p.detach().float() != b[name].float()).sum())
        total += p.numel()
    return moved / total


def test_plain_adamw_on_bf16_rounds_a_small_update_away_and_masters_keep_it():
    """The defect the masters fix, measured both ways on the same model and gradients."""
    plain = _tiny_qwen3(torch.bfloat16)
    start = {k: v.detach().clone() for k, v in plain.named_parameters()}
    opt = torch.optim.AdamW(plain.parameters(), lr=1e-6)
    for s in range(2):
        _loss(plain, s).backward()
        opt.step()
        opt.zero_grad()
    assert _changed(plain, start) < 0.05  # almost every step lost to rounding

    fp32 = _tiny_qwen3(torch.float32)
    model = fp32
    masters = to_half_keeping_masters(model, torch.bfloat16)
    assert needs_masters(model) and all(p.dtype == torch.bfloat16 for p in model.parameters())
    opt = MasterAdamW(model.parameters(), masters, lr=1e-6)
    first = {k: v.detach().clone() for k, v in full_precision_state(model, opt).items()}
    for s in range(2):
        _loss(model, s).backward()
        opt.step()
        opt.zero_grad()
    after = full_precision_state(model, opt)
    moved = sum(int((after[k] != first[k]).sum()) for k in first if k in dict(model.named_parameters()))
    assert moved / sum(p.numel() for p in model.parameters()) >= 0.9
    for p, m in zip(opt.model_params, opt.masters):
        assert m.dtype == torch.float32
        assert torch.equal(p, m.to(torch.bfloat16))  # the model holds the masters rounded
        assert p.grad is None and m.grad is None


def test_resumed_master_optimiser_continues_exactly():
    def run(steps, state=None):
        model = _tiny_qwen3()
        masters = to_half_keeping_masters(model, torch.bfloat16)
        opt = MasterAdamW(model.parameters(), masters, lr=1e-3)
        if state is not None:
            opt.load_state_dict(state)
        for s in steps:
            _loss(model, s).backward()
            opt.step()
            opt.zero_grad()
        return model, opt

    _, whole = run([0, 1, 2])
    _, first = run([0, 1])
    saved = first.state_dict()
    _, resumed = run([2], state=saved)
    for a, b in zip(whole.masters, resumed.masters):
        assert torch.equal(a, b)


def test_load_state_dict_refuses_a_plain_optimisers_state():
    model = _tiny_qwen3()
    plain = torch.optim.AdamW(model.parameters(), lr=1e-3)
    opt = MasterAdamW(list(model.parameters()), lr=1e-3)
    with pytest.raises(ValueError, match="no master weights"):
        opt.load_state_dict(plain.state_dict())


def test_published_model_carries_the_masters(tmp_path):
    from transformers import AutoModelForCausalLM

    from parathink.modeling.factory import save_model
    from parathink.modeling.tokenizer import train_tokenizer

    model = _tiny_qwen3()
    masters = to_half_keeping_masters(model, torch.bfloat16)
    opt = MasterAdamW(model.parameters(), masters, lr=1e-6)
    _loss(model).backward()
    opt.step()
    state = full_precision_state(model, opt)
    assert all(v.dtype == torch.float32 for v in state.values() if v.is_floating_point())
    tok = train_tokenizer(["one two three four five six"] * 4)
    out = save_model(model, tok, tmp_path / "m", state_dict=state)
    back = AutoModelForCausalLM.from_pretrained(str(out))  # dtype from the config: what was written
    assert next(back.parameters()).dtype == torch.float32
    for name, p in back.named_parameters():
        assert torch.equal(p.detach(), state[name]), name
    # a plain optimiser keeps no masters: the model is published as it is
    assert full_precision_state(model, torch.optim.AdamW(model.parameters())) is None
