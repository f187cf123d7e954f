"""The names validation accepts are the ones the torch modules register: the torch-free config modules list them so
that ``parathink plan`` validates without torch (``tests/test_imports.py`` checks it imports none)."""


def test_the_names_validation_accepts_are_the_registered_ones():
    """RLConfig lists the advantage, loss and aggregation names so that validating needs no torch."""
    from parathink.config import rl as settings
    from parathink.training import advantages, losses

    assert set(settings.ADVANTAGES) == set(advantages.ADVANTAGES)
    assert set(settings.POLICY_LOSSES) == set(losses.POLICY_LOSSES)
    assert set(settings.AGGREGATIONS) == set(losses.AGGREGATIONS) == set(losses.NORMALISERS)

