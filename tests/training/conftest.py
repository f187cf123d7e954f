"""What the RL loop tests ask for (``pytestmark``): their rewards registered, and removed after so that the registry
stays clean for the other tests; one torch thread, as the subprocesses they launch have."""

import pytest
import torch
from rl_helpers import TEST_REWARDS

from parathink.rewards import REWARDS, register


@pytest.fixture(scope="module")
def rl_test_setup():
    torch.set_num_threads(1)
    added = [name for name, fn in TEST_REWARDS.items() if name not in REWARDS and register(name)(fn)]
    yield
    for name in added:
        REWARDS.pop(name, None)
