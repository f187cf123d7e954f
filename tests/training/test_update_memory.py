"""The update's memory savers change memory only: chunked log-probs equal the whole [B, T, V] computation (values and
gradients, 1e-5), gradient checkpointing gives the same gradients, token-bounded micro-batches keep every row once."""

from __future__ import annotations

import pytest
import torch

from parathink.engine import recompute_logprobs
from parathink.formats.layouts import TagIds, build_batch_layout
from parathink.modeling.attention import structured_inputs
from parathink.testing.toy import prompt_ids, toy_model, trace
from parathink.training.checkpointing import enable_checkpointing
from parathink.training.rl import micro_batches

TOL = 1e-5


@pytest.fixture(scope="module")
def sampled():
    """The toy model and six parallel_r1 traces of its own shape (forks, paths, summaries), as the engine's samples
    would carry them; written, not sampled, so that the test does not depend on what the engine draws."""
    import random
    from types import SimpleNamespace

    torch.set_num_threads(1)
    model, tok = toy_model()
    engine = SimpleNamespace(mode="structured", tags=TagIds.from_tokenizer(tok, "parallel_r1"), pad=tok.pad_token_id)
    rng = random.Random(0)
    samples = [SimpleNamespace(prompt_ids=prompt_ids(tok, "parallel_r1", i),
                               response_ids=tok.encode(trace("P", rng), add_special_tokens=False)) for i in range(6)]
    assert all(engine.tags.block_open & set(s.response_ids) for s in samples)  # the structured layout is exercised
    return model, engine, samples


def whole_logprobs(model, engine, samples):
    """The computation chunking and the device-built masks replace: the full [B, L, V] logits under the dense
    host-built additive mask of the layout (the causal one too), gathered and log-softmaxed whole."""
    seqs = [list(s.prompt_ids) + list(s.response_ids) for s in samples]
    layout = build_batch_layout(seqs, engine.tags if engine.mode == "structured" else None)
    ids = torch.full((len(seqs), layout.position_ids.shape[1]), engine.pad, dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, :len(s)] = torch.tensor(s)
    logits = model(input_ids=ids, **structured_inputs(layout)).logits.float()  # [B, L, V]
    width = max(len(s.response_ids) for s in samples)
    out = torch.zeros(len(samples), width)
    for i, s in enumerate(samples):
        n, p = len(s.response_ids), len(s.prompt_ids)
        logp = torch.log_softmax(logits[i, p - 1:p - 1 + n], -1)
        out[i, :n] = logp.gather(-1, torch.tensor(s.response_ids)[:, None]).squeeze(-1)
    return out


def _grads(model, loss):
    model.zero_grad(set_to_none=True)
    loss.backward()
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("mode,chunk", [("structured", 1), ("structured", 7), ("structured", 10_000),
                                        ("causal", 7)])
def test_chunked_logprobs_equal_the_whole_computation(sampled, mode, chunk):
    """Values and gradients of the update's log-probs (chunked lm_head; SDPA's causal path for the causal grammar,
    the device-built mask for the structured one) against the whole logits under the old dense host mask; the rows
    have different lengths, so right padding is exercised."""
    from types import SimpleNamespace

    model, engine, samples = sampled
    engine = SimpleNamespace(mode=mode, tags=engine.tags, pad=engine.pad)
    assert len({len(s.prompt_ids) + len(s.response_ids) for s in samples}) > 1  # padded rows
    assert any(s.response_ids for s in samples)
    whole = whole_logprobs(model, engine, samples)
    chunked, _ = recompute_logprobs(model, engine, samples, chunk_tokens=chunk)
    assert chunked.shape == whole.shape
    assert (chunked - whole).abs().max().item() <= TOL
    weights = torch.linspace(0.5, 1.5, whole.numel()).reshape(whole.shape)  # a loss that weighs every token
    g_whole = _grads(model, (whole_logprobs(model, engine, samples) * weights).sum())
    g_chunk = _grads(model, (recompute_logprobs(model, engine, samples, chunk_tokens=chunk)[0] * weights).sum())
    assert g_whole.keys() == g_chunk.keys() and g_whole
    for name in g_whole:
        assert torch.allclose(g_chunk[name], g_whole[name], atol=TOL, rtol=1e-4), name


def test_structured_mask_built_on_the_device_equals_the_layouts(sampled):
    """structured_batch_inputs gives exactly what the host-built layout gave (mask, positions, path ids), padding
    rows included."""
    from parathink.modeling.attention import structured_batch_inputs, to_4d_mask

    _model, engine, samples = sampled
    seqs = [list(s.prompt_ids) + list(s.response_ids) for s in samples]
    layout = build_batch_layout(seqs, engine.tags)
    ours = structured_batch_inputs(seqs, engine.tags, torch.device("cpu"), torch.bfloat16, path_ids=True)
    assert torch.equal(ours["attention_mask"], to_4d_mask(layout.attention_mask, torch.bfloat16))
    assert torch.equal(ours["position_ids"], layout.position_ids)
    assert torch.equal(ours["path_ids"], layout.path_ids)
    assert not layout.attention_mask.tril().all()  # paths hide from each other: more than a causal mask


def test_causal_rollouts_take_sdpas_causal_path(sampled, monkeypatch):
    """The causal grammar hands SDPA no mask and is_causal=True (its flash kernel's path on a GPU): no [L, L]
    tensor is built, on the host or the device."""
    from types import SimpleNamespace

    model, engine, samples = sampled
    calls = []
    sdpa = torch.nn.functional.scaled_dot_product_attention

    def spy(*args, **kw):
        calls.append((kw.get("attn_mask"), kw.get("is_causal")))
        return sdpa(*args, **kw)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", spy)
    with torch.no_grad():
        recompute_logprobs(model, SimpleNamespace(mode="causal", tags=engine.tags, pad=engine.pad), samples)
        assert calls and all(mask is None and causal for mask, causal in calls)
        calls.clear()
        recompute_logprobs(model, engine, samples)  # structured: a 4-D mask, not is_causal
        assert calls and all(mask is not None and mask.dim() == 4 and not causal for mask, causal in calls)


def test_chunked_entropy_equals_the_whole_computation(sampled):
    model, engine, samples = sampled
    with torch.no_grad():
        _, small = recompute_logprobs(model, engine, samples, with_entropy=True, chunk_tokens=5)
        _, large = recompute_logprobs(model, engine, samples, with_entropy=True, chunk_tokens=10_000)
    assert (small - large).abs().max().item() <= TOL and small.abs().sum() > 0


def test_gradient_checkpointing_gives_the_same_gradients(sampled):
    import copy

    model, engine, samples = sampled
    plain = copy.deepcopy(model).train()
    ckpt = copy.deepcopy(model).train()
    enable_checkpointing(ckpt)
    assert ckpt.model.gradient_checkpointing
    g_plain = _grads(plain, recompute_logprobs(plain, engine, samples)[0].sum())
    g_ckpt = _grads(ckpt, recompute_logprobs(ckpt, engine, samples)[0].sum())
    assert g_plain.keys() == g_ckpt.keys() and g_plain
    for name in g_plain:
        assert torch.allclose(g_ckpt[name], g_plain[name], atol=1e-6, rtol=1e-5), name


def test_micro_batches_bound_rows_and_padded_tokens():
    lengths = [10, 10, 20, 30, 40, 100, 300]
    index = list(range(len(lengths)))
    assert micro_batches(index, lengths, 3) == [[0, 1, 2], [3, 4, 5], [6]]
    by_tokens = micro_batches(index, lengths, 8, tokens=100)
    assert by_tokens == [[0, 1, 2], [3, 4], [5], [6]]  # 3 x 20 = 60, 2 x 40 = 80; 300 > 100 goes alone
    assert sorted(i for b in by_tokens for i in b) == index
    assert all(len(b) == 1 or len(b) * max(lengths[i] for i in b) <= 100 for b in by_tokens)


def test_sft_chunked_loss_equals_the_models_own_loss(sampled, tmp_path):
    """SFTTrainer's chunked loss against transformers' (whole logits), mean and accumulated normalisations."""
    from transformers import Trainer, TrainingArguments

    from parathink.training.sft import IGNORE, SFTTrainer

    model, engine, samples = sampled
    model = model.train()
    seqs = [list(s.prompt_ids) + list(s.response_ids) for s in samples[:4]]
    width = max(map(len, seqs))
    ids = torch.full((len(seqs), width), engine.pad, dtype=torch.long)
    labels = torch.full((len(seqs), width), IGNORE, dtype=torch.long)
    attn = torch.zeros((len(seqs), width), dtype=torch.long)
    for i, (s, seq) in enumerate(zip(samples, seqs)):
        ids[i, :len(seq)], attn[i, :len(seq)] = torch.tensor(seq), 1
        labels[i, len(s.prompt_ids):len(seq)] = torch.tensor(s.response_ids)  # the response carries the loss
    batch = {"input_ids": ids, "labels": labels, "attention_mask": attn}
    trainer = SFTTrainer(model=model, args=TrainingArguments(output_dir=str(tmp_path), use_cpu=True, report_to=[]))
    trainer.chunk_tokens = 5
    for items in (None, torch.tensor(97)):
        ours = trainer.compute_loss(model, dict(batch), num_items_in_batch=items)
        g_ours = _grads(model, ours)
        theirs = Trainer.compute_loss(trainer, model, dict(batch), num_items_in_batch=items)
        g_theirs = _grads(model, theirs)
        assert abs(ours.item() - theirs.item()) <= TOL, items
        for name in g_theirs:
            assert torch.allclose(g_ours[name], g_theirs[name], atol=TOL, rtol=1e-4), name
