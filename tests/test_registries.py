"""The one registry helper behind advantage estimators, policy losses, loss aggregations and reward schemes."""

import pytest

from parathink.errors import ConfigError
from parathink.exits import exit_code
from parathink.registries import Registry, UnknownName
from parathink.rewards import REWARDS
from parathink.training.advantages import ADVANTAGES
from parathink.training.losses import AGGREGATIONS, POLICY_LOSSES


@pytest.mark.parametrize("registry, kind", [(ADVANTAGES, "advantage estimator"), (POLICY_LOSSES, "policy loss"),
                                            (AGGREGATIONS, "loss aggregation"), (REWARDS, "reward scheme")])
def test_every_registry_refuses_unknown_and_duplicate_names_alike(registry, kind):
    first = sorted(registry)[0]
    with pytest.raises(UnknownName) as e:
        registry["nope"]
    assert str(e.value) == f"unknown {kind} 'nope'; known: {', '.join(sorted(registry))}"
    assert isinstance(e.value, KeyError) and isinstance(e.value, ConfigError) and exit_code(e.value) == 2
    before = registry[first]
    with pytest.raises(ValueError, match=f"^{kind} '{first}' registered twice$"):
        registry.register(first)(print)
    assert registry[first] is before


def test_register_returns_the_function():
    reg: Registry = Registry("thing")
    fn = reg.register("a")(len)
    assert fn is len and reg["a"] is len and dict(reg) == {"a": len}
