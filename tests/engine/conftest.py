"""Shared fixtures: the toy model that writes every grammar (``parathink.testing.toy``), built once; a scripted
parallel_r1 response for the tests of what the engine does with a model's tokens (tests/scripted_lm.py)."""

from __future__ import annotations

import pytest
import torch
from scripted_lm import Trace

from parathink.formats.layouts import TagIds
from parathink.testing.toy import toy_model


@pytest.fixture(scope="session")
def toy():
    torch.set_num_threads(1)
    return toy_model()


@pytest.fixture(scope="session")
def one_block(toy) -> Trace:
    """A parallel_r1 response in the toy's tokens: one block of two paths of unequal lengths (the model's words and
    ``</Path>``, the engine's ``<Path>``, ``</Parallel>`` and ``<Summary>``), a summary, an answer, EOS."""
    tok = toy[1]
    ids = TagIds.from_tokenizer(tok, "parallel_r1").ids
    return (Trace(tok).model(" so<Parallel>").forced([ids["<Path>"]]).model(" add 1</Path>").forced([ids["<Path>"]])
            .model(" sub 2 3</Path>").forced([ids["</Parallel>"], ids["<Summary>"]]).model(" so 5</Summary> answer 5")
            .eos())
