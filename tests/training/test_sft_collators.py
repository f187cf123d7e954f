"""SFT pieces without training: trace encoding (overlong drop/truncate counted), response-only labels,
the structured collator's 4-D mask and restarted positions, and the global-batch plan."""

from __future__ import annotations

import pytest
import torch

from parathink.data.synthetic import corpus
from parathink.formats.layouts import TagIds
from parathink.formats.tags import TAGS
from parathink.modeling.tokenizer import train_tokenizer
from parathink.training.sft import (
    IGNORE,
    CausalCollator,
    StructuredCollator,
    encode_traces,
    global_batch_plan,
    path_replay_trace,
    vote_replay_trace,
)

TRACE = "<Parallel><Path>3 + 4 = 7</Path><Path>4 + 3 = 7</Path></Parallel><Summary>7</Summary>\n\\boxed{7}"


@pytest.fixture(scope="module")
def tok():
    t = train_tokenizer(corpus(100, seed=4))
    t.add_special_tokens({"additional_special_tokens": list(TAGS["parallel_r1"])})
    return t


def records(n=3):
    return [{"id": str(i), "problem": f"Tom has {i + 3} cards. He gets 4 more. How many cards?", "response": TRACE}
            for i in range(n)]


def test_encode_counts_overlong(tok):
    full, stats = encode_traces(records(), tok, 512)
    assert stats.kept == 3 and stats.dropped == 0
    width = len(full[0]["input_ids"])
    _, dropped = encode_traces(records(), tok, width - 1, "drop")
    assert dropped.dropped == 3 and dropped.kept == 0
    cut, truncated = encode_traces(records(), tok, width - 1, "truncate")
    assert truncated.truncated == 3 and all(len(e["input_ids"]) == width - 1 for e in cut)
    with pytest.raises(ValueError, match="lacks a string 'problem' or 'response'"):
        encode_traces([{"id": "x", "problem": "p"}], tok, 10)


def test_causal_labels_cover_response_only(tok):
    feats, _ = encode_traces(records(2), tok, 512)
    batch = CausalCollator(tok.pad_token_id)(feats)
    for i, f in enumerate(feats):
        labels = batch["labels"][i]
        assert (labels[: f["n_prompt"]] == IGNORE).all()
        assert labels[f["n_prompt"]: len(f["input_ids"])].tolist() == f["input_ids"][f["n_prompt"]:]
    assert int(batch["n_tokens"]) == sum(len(f["input_ids"]) for f in feats)


def test_structured_batch_restarts_paths(tok):
    feats, _ = encode_traces(records(2), tok, 512)
    feats[1]["input_ids"] = feats[1]["input_ids"][:-3]  # a shorter row, so the batch has padding
    batch = StructuredCollator(tok.pad_token_id, TagIds.from_tokenizer(tok, "parallel_r1"))(feats)
    mask, pos = batch["attention_mask"], batch["position_ids"]  # [B, 1, L, L], [B, L]
    assert mask.shape[:2] == (2, 1) and mask.dtype == torch.float32
    ids = batch["input_ids"][0].tolist()
    opens = [i for i, t in enumerate(ids) if t == tok.convert_tokens_to_ids("<Path>")]
    assert pos[0, opens[0]] == pos[0, opens[1]]  # both paths start at p + 1
    assert mask[0, 0, opens[1], opens[0]] < 0  # path 2 cannot see path 1
    n1 = len(feats[1]["input_ids"])
    assert (batch["labels"][1, n1:] == IGNORE).all()
    assert mask[1, 0, n1, n1] == 0  # padding rows attend to themselves only


def test_path_replay_trains_the_solution_alone_inside_an_opened_block(tok):
    """The solution is the first path of an opened block; tags and the (absent) eos carry no loss."""
    solution = "3 + 4 = 7\n\\boxed{7}"
    trace, spans = path_replay_trace(records(1)[0], solution, "parallel_r1")
    assert trace["response"] == "<Parallel><Path>\n" + solution + "\n</Path>" and trace["partial"]
    (feat,), stats = encode_traces([trace], tok, 512, mask_spans=[spans])
    assert feat["input_ids"][-1] == tok.convert_tokens_to_ids("</Path>")  # no eos after the path
    batch = StructuredCollator(tok.pad_token_id, TagIds.from_tokenizer(tok, "parallel_r1"))([feat])
    trained = [int(t) for t in batch["labels"][0] if t != IGNORE]
    assert tok.decode(trained).strip() == solution
    assert stats.masked_tokens == 3  # <Parallel>, <Path>, </Path>
    npr, _ = path_replay_trace(records(1)[0], solution, "npr", k=2)  # any grammar: NPR's guideline lists 2 plans
    assert npr["response"].endswith("</guideline><step>1:\n" + solution + "\n</step>")


def test_vote_replay_trains_the_summary_and_answer_alone(tok):
    """Two right paths and a slipped one: the paths and their tags are masked, the vote summary is trained."""
    right, slip = "3 + 4 = 7\n\\boxed{7}", "3 + 4 = 8\n\\boxed{8}"
    trace, spans = vote_replay_trace(records(1)[0], [slip, right, right], "parallel_r1")
    assert trace["response"].endswith("</Path></Parallel><Summary>\nMost give 7.\n</Summary>\n\\boxed{7}")
    assert not trace.get("partial")
    (feat,), _ = encode_traces([trace], tok, 512, mask_spans=[spans])
    batch = StructuredCollator(tok.pad_token_id, TagIds.from_tokenizer(tok, "parallel_r1"))([feat])
    trained = [int(t) for t in batch["labels"][0] if t != IGNORE]
    assert tok.decode(trained[:-1]).replace(" ", "") == "<Summary>\nMostgive7.\n</Summary>\n\\boxed{7}".replace(" ", "")
    assert trained[-1] == tok.eos_token_id
    with pytest.raises(ValueError, match="no majority"):
        vote_replay_trace(records(1)[0], [right, slip], "parallel_r1")
    npr, _ = vote_replay_trace(records(1)[0], [right, right, slip], "npr")
    assert npr["response"].endswith("</step><takeaway>\nMost give 7.\n</takeaway>\n\\boxed{7}")


def test_global_batch_plan():
    assert global_batch_plan(128, 4, 8) == 4
    with pytest.raises(ValueError, match="not a multiple"):
        global_batch_plan(30, 4, 1)
