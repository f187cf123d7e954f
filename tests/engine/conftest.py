"""Shared fixtures: the toy model that writes every grammar (``parathink.engine.toy``), built once."""

from __future__ import annotations

import pytest
import torch

from parathink.engine.toy import toy_model


@pytest.fixture(scope="session")
def toy():
    torch.set_num_threads(1)
    return toy_model()
