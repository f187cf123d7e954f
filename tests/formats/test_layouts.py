"""Layouts checked cell by cell against expectations built from a sequence's specification.

The expected positions, path ids and mask are derived from how the test assembles each sequence (which
token belongs to which path of which block), not from scanning token ids as ``build_layout`` does.
"""

import pytest
import torch

from parathink.formats.layouts import (
    REGION_OTHER,
    REGION_PATH,
    REGION_SUMMARY,
    TagIds,
    build_batch_layout,
    build_layout,
)
from parathink.formats.tags import TAGS

IDS = {t: 1000 + i for i, t in enumerate(TAGS["parallel_r1"])}
TAGS_R1 = TagIds.from_mapping("parallel_r1", IDS)
PAR, PAR_C, PATH, PATH_C, SUM, SUM_C = (IDS[t] for t in TAGS["parallel_r1"])
WS = 7  # a whitespace token between paths


class Builder:
    """Assembles a sequence and records, per token, the expected position, block, path and region."""

    def __init__(self):
        self.ids, self.pos, self.blk, self.pid, self.region = [], [], [], [], []
        self.next_pos = 0
        self.n_blocks = 0

    def _add(self, tok, pos, blk=-1, pid=0, region=REGION_OTHER):
        self.ids.append(tok), self.pos.append(pos), self.blk.append(blk), self.pid.append(pid)
        self.region.append(region)

    def text(self, n):
        for _ in range(n):
            self._add(1 + len(self.ids) % 50, self.next_pos)
            self.next_pos += 1
        return self

    def block(self, path_lens, summary_len=2, gap=0):
        b = self.n_blocks
        self.n_blocks += 1
        self._add(PAR, self.next_pos)
        p = self.next_pos  # <Parallel> is the last token before the first path
        longest = 0
        for k, n in enumerate(path_lens):
            tokens = [PATH] + [50 + k] * n + [PATH_C] + ([WS] * gap if k < len(path_lens) - 1 else [])
            for j, tok in enumerate(tokens):
                self._add(tok, p + 1 + j, b, k + 1, REGION_PATH)
            longest = max(longest, len(tokens))
        self._add(PAR_C, p + longest + 1)
        self.next_pos = p + longest + 2
        for tok in [SUM] + [60] * summary_len + [SUM_C]:
            self._add(tok, self.next_pos, region=REGION_SUMMARY)
            self.next_pos += 1
        return self

    def expected_mask(self):
        n = len(self.ids)
        m = torch.zeros(n, n, dtype=torch.bool)
        for i in range(n):
            for j in range(i + 1):
                other_path = (self.blk[i] == self.blk[j] != -1) and self.pid[i] != self.pid[j]
                m[i, j] = not other_path
        return m


def check(b: Builder):
    lay = build_layout(b.ids, TAGS_R1, "parallel_r1")
    assert lay.position_ids.tolist() == b.pos
    assert lay.path_ids.tolist() == b.pid
    assert lay.region.tolist() == b.region
    expected = b.expected_mask()
    mismatch = (lay.attention_mask != expected).nonzero().tolist()
    assert not mismatch, f"mask cells differ at {mismatch[:10]}"
    return lay


@pytest.mark.parametrize("k", [2, 3, 5])
def test_one_block(k):
    check(Builder().text(4).block([3 + i for i in range(k)]).text(3))


@pytest.mark.parametrize("k", [2, 3, 5])
def test_several_blocks_and_gaps(k):
    b = Builder().text(2).block([2] * k, gap=1).text(3).block(list(range(1, k + 1))[::-1], gap=2).text(1)
    b.block([4, 1][:2] + [2] * (k - 2))
    check(b)


def test_hand_computed_example():
    # prefix(2) <Parallel> <Path> a b </Path> ws <Path> c </Path> </Parallel> <Summary> d </Summary> e
    seq = [1, 2, PAR, PATH, 5, 6, PATH_C, WS, PATH, 7, PATH_C, PAR_C, SUM, 8, SUM_C, 3]
    lay = build_layout(seq, TAGS_R1)
    assert lay.position_ids.tolist() == [0, 1, 2, 3, 4, 5, 6, 7, 3, 4, 5, 8, 9, 10, 11, 12]
    assert lay.path_ids.tolist() == [0, 0, 0, 1, 1, 1, 1, 1, 2, 2, 2, 0, 0, 0, 0, 0]
    m = lay.attention_mask
    assert not m[8, 3:8].any() and m[8, :3].all()  # path 2's opener sees the prefix, not path 1
    assert not m[5, 8:].any()  # causal
    assert m[11, :12].all() and m[13, :14].all()  # the closer and the summary see everything before


def test_npr_and_parathinker_roles():
    ids = {t: 2000 + i for i, t in enumerate(TAGS["npr"])}
    g, gc, pl, plc, s, sc, tk, tkc = (ids[t] for t in TAGS["npr"])
    seq = [1, g, pl, 9, plc, pl, 9, plc, gc, s, 4, 4, sc, s, 5, sc, tk, 6, tkc]
    lay = build_layout(seq, TagIds.from_mapping("npr", ids), "npr")
    p = 8  # </guideline>
    assert lay.position_ids.tolist() == list(range(9)) + [p + 1, p + 2, p + 3, p + 4, p + 1, p + 2, p + 3,
                                                          p + 5, p + 6, p + 7]
    assert lay.region.tolist()[-3:] == [REGION_SUMMARY] * 3

    ids = {t: 3000 + i for i, t in enumerate(TAGS["parathinker"])}
    t1, t1c, t2, t2c = ids["<think1>"], ids["</think1>"], ids["<think2>"], ids["</think2>"]
    seq = [1, 2, t1, 5, t1c, t2, 6, 6, t2c, ids["<summary>"], 7, ids["</summary>"]]
    lay = build_layout(seq, TagIds.from_mapping("parathinker", ids))
    assert lay.position_ids.tolist() == [0, 1, 2, 3, 4, 2, 3, 4, 5, 6, 7, 8]
    assert lay.path_ids.tolist() == [0, 0, 1, 1, 1, 2, 2, 2, 2, 0, 0, 0]


def test_batch_pads_right_and_keeps_rows_independent():
    a = Builder().text(3).block([2, 3]).ids
    b = Builder().text(2).ids
    batch = build_batch_layout([a, b], TAGS_R1, "parallel_r1")
    single = build_layout(a, TAGS_R1)
    assert torch.equal(batch.attention_mask[0], single.attention_mask)
    assert torch.equal(batch.position_ids[0], single.position_ids)
    assert batch.padding[1].tolist() == [False, False] + [True] * (len(a) - 2)
    pad_rows = batch.attention_mask[1, 2:]
    assert torch.equal(pad_rows, torch.eye(len(a), dtype=torch.bool)[2:])  # padding sees only itself
    assert not batch.attention_mask[1, :2, 2:].any()


def test_tag_lookup_errors_name_the_tag():
    class Tok:
        unk_token_id = 0

        def convert_tokens_to_ids(self, t):
            return 0 if t == "<Summary>" else 5

    with pytest.raises(ValueError, match="<Summary>"):
        TagIds.from_tokenizer(Tok(), "parallel_r1")


def test_truncated_sequence_does_not_raise():
    seq = [1, PAR, PATH, 5, PATH_C, PATH, 6]
    lay = build_layout(seq, TAGS_R1)
    assert lay.position_ids.tolist() == [0, 1, 2, 3, 4, 2, 3]
