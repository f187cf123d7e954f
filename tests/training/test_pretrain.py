"""Base pretraining pieces: schedule, collation (loss on the response only), and a resumable short run."""

from __future__ import annotations

import pytest
import torch
from omegaconf import OmegaConf

from parathink.config.base import BaseConfig
from parathink.data.synthetic import corpus, generate
from parathink.modeling import build_tiny_model
from parathink.modeling.tokenizer import train_tokenizer
from parathink.training.pretrain import IGNORE, collate, cosine_lr, encode, pack, pretrain


def test_cosine_warms_up_then_decays_to_the_floor_by_steps_or_time():
    lrs = [cosine_lr(s, 100, 1.0, 10, 0.1) for s in range(101)]
    assert lrs[0] == pytest.approx(0.1) and lrs[9] == pytest.approx(1.0)
    assert all(a >= b for a, b in zip(lrs[9:], lrs[10:]))
    assert lrs[100] == pytest.approx(0.1)
    assert cosine_lr(20, 100, 1.0, 10, 0.1, time_frac=1.0) == pytest.approx(0.1)  # time budget spent


@pytest.fixture(scope="module")
def tok():
    return train_tokenizer(corpus(200, seed=9))


def test_collate_masks_prompt_and_padding(tok):
    ex = encode(generate("easy", "train", 3, seed=1), tok)
    batch = collate(ex, tok.pad_token_id, "response")
    for i, e in enumerate(ex):
        labels = batch["labels"][i]
        assert (labels[: e.n_prompt] == IGNORE).all()
        assert labels[e.n_prompt: len(e.ids)].tolist() == e.ids[e.n_prompt:]
        assert (labels[len(e.ids):] == IGNORE).all()
        assert e.ids[-1] == tok.eos_token_id
    assert (collate(ex, tok.pad_token_id, "all")["labels"][0, : ex[0].n_prompt] != IGNORE).all()


def test_pack_gives_each_example_its_own_logits_and_the_same_loss(tok):
    """Packed rows (block-diagonal mask, restarted positions) must equal padded rows, token for token."""
    model = build_tiny_model(OmegaConf.load("hydra_conf/model/tiny.yaml"), tok).eval()
    ex = encode(generate("easy", "train", 5, seed=2) + generate("hard", "train", 5, seed=2), tok)
    packed, padded = pack(ex, tok.pad_token_id, capacity=200), collate(ex, tok.pad_token_id)
    assert packed["input_ids"].shape[0] < len(ex)  # several examples share a row
    with torch.no_grad():
        lp, lc = model(**packed), model(**padded)
    assert lp.loss.item() == pytest.approx(lc.loss.item(), abs=1e-5)
    # find each example in the packed rows and compare its logits with its padded row
    found = 0
    for i, e in enumerate(ex):
        for r in range(packed["input_ids"].shape[0]):
            row = packed["input_ids"][r].tolist()
            starts = [o for o in range(len(row) - len(e.ids) + 1) if row[o:o + len(e.ids)] == e.ids
                      and packed["position_ids"][r, o] == 0]
            if starts:
                o = starts[0]
                diff = (lp.logits[r, o:o + len(e.ids)] - lc.logits[i, :len(e.ids)]).abs().max().item()
                assert diff <= 1e-4, (i, diff)
                found += 1
                break
    assert found == len(ex)
    # a capacity below the longest example widens to it instead of failing
    assert pack(ex, tok.pad_token_id, capacity=1)["input_ids"].shape[1] == max(len(e.ids) for e in ex)


def test_pretrain_learns_and_resumes(tok, tmp_path):
    torch.set_num_threads(1)
    mcfg = OmegaConf.load("hydra_conf/model/tiny.yaml")
    cfg = BaseConfig(train_size=256, batch_size=8, max_steps=6, eval_every=3, eval_n=4, checkpoint_every=3,
                     max_new_tokens=8, warmup_steps=1, target_greedy_easy=1.1)
    model = build_tiny_model(mcfg, tok)
    first = pretrain(model, tok, cfg, work_dir=tmp_path, seed=0)
    assert first["steps"] == 6 and first["final_loss"] < 5.5
    state = torch.load(tmp_path / "pretrain_state.pt", weights_only=True)  # plain data: no code runs on load
    assert state["step"] == 6 and state["stop"] == "max_steps"
    fresh = build_tiny_model(mcfg, tok)
    again = pretrain(fresh, tok, cfg, work_dir=tmp_path, seed=0)  # rerun after the end: restores, trains no more
    assert again["steps"] == 6
    assert all(torch.equal(a, b) for a, b in zip(fresh.state_dict().values(), model.state_dict().values()))


class _Payload:
    """Unpickling this runs code: what anyone who can write the scratch folder could plant there."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (open, (str(self.marker), "w"))


def test_resume_runs_no_code_from_the_checkpoint(tok, tmp_path, capsys):
    torch.set_num_threads(1)
    mcfg = OmegaConf.load("hydra_conf/model/tiny.yaml")
    cfg = BaseConfig(train_size=64, batch_size=4, max_steps=2, eval_every=2, eval_n=2, checkpoint_every=1,
                     max_new_tokens=4, warmup_steps=1, target_greedy_easy=1.1)
    marker = tmp_path / "code-ran"
    torch.save({"step": 1, "evil": _Payload(marker)}, tmp_path / "pretrain_state.pt")
    out = pretrain(build_tiny_model(mcfg, tok), tok, cfg, work_dir=tmp_path, seed=0)
    assert not marker.exists() and out["steps"] == 2  # refused, and trained from the start
    assert "pretrain_state.pt" in capsys.readouterr().err
