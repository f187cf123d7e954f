"""ParaThinker's thought labels: SFT relabels each block's thoughts at random (ParaThinker §3), and the layout gives a
thought the path id of its label, so the per-path vector a thought trains with is the one the engine gives that
label; two thoughts stay apart in the mask whatever their labels."""

import random

import torch

from parathink.formats.layouts import TagIds, build_layout
from parathink.formats.tags import MAX_PARATHINKER_PATHS, TAGS
from parathink.training.sft import relabel_thoughts

IDS = {t: 2000 + i for i, t in enumerate(TAGS["parathinker"])}
TAGS_PT = TagIds.from_mapping("parathinker", IDS)
LABELS = {IDS[f"<think{n}>"]: (n, 1) for n in range(1, MAX_PARATHINKER_PATHS + 1)}
LABELS.update({IDS[f"</think{n}>"]: (n, 0) for n in range(1, MAX_PARATHINKER_PATHS + 1)})


def thoughts(labels, words=3, prompt=(1, 2)) -> list[int]:
    ids = list(prompt)
    for n in labels:
        ids += [IDS[f"<think{n}>"]] + [10 + n] * words + [IDS[f"</think{n}>"]]
    return ids + [IDS["<summary>"], 5, IDS["</summary>"]]


def test_path_ids_follow_the_labels_positions_and_mask_do_not():
    plain, relabelled = build_layout(thoughts([1, 2, 3]), TAGS_PT), build_layout(thoughts([7, 2, 5]), TAGS_PT)
    assert torch.equal(plain.position_ids, relabelled.position_ids)
    assert torch.equal(plain.attention_mask, relabelled.attention_mask)
    assert sorted(set(relabelled.path_ids.tolist()) - {0}) == [2, 5, 7]
    assert relabelled.path_ids[2:7].tolist() == [7] * 5  # <think7>, its words and </think7>
    # Two thoughts with one label (a malformed sequence) still do not see each other; the summary sees both.
    twice = build_layout(thoughts([3, 3]), TAGS_PT).attention_mask  # thought 1: tokens 2-6, thought 2: 7-11
    assert not twice[7:12, 2:7].any() and twice[12, 2:12].all()


def test_relabelling_draws_distinct_labels_per_block_and_keeps_everything_else():
    rng = random.Random(0)
    ids = thoughts([1, 2, 3]) + thoughts([1, 2], prompt=(4,))
    seen = set()
    for _ in range(200):
        out = relabel_thoughts(ids, LABELS, 8, rng)
        assert len(out) == len(ids)
        assert [t for t in out if t not in LABELS] == [t for t in ids if t not in LABELS]
        opened = [LABELS[t][0] for t in out if t in LABELS and LABELS[t][1]]
        closed = [LABELS[t][0] for t in out if t in LABELS and not LABELS[t][1]]
        assert opened == closed  # each thought closes with its own new label
        first, second = opened[:3], opened[3:]
        assert len(set(first)) == 3 and len(set(second)) == 2 and max(opened) <= 8
        seen.update(opened)
    assert seen == set(range(1, 9))  # every label (and so every path vector) gets trained


def test_relabelling_leaves_labels_above_the_range_alone():
    out = relabel_thoughts(thoughts([1, 2, 3]), LABELS, 2, random.Random(0))
    opened = [LABELS[t][0] for t in out if t in LABELS and LABELS[t][1]]
    assert sorted(opened[:2]) == [1, 2] and opened[2] == 3
