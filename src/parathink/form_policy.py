"""What a trigger form may override: ``hydra_conf/form_allowlist.yaml``, checked by ``parathink plan --form ...``.

Whoever may trigger a DAG is not whoever deploys it: the form's overrides reach the Airflow worker (``parathink
plan`` imports the stage modules a config names) and the pods (image, secrets, service account). So the overrides
after ``--form`` are checked twice, before anything is imported:

1. by key: each override's key is one of the allowlist's ``groups`` (a file of that config group is chosen) or
   matches an ``allow`` glob and no ``deny`` glob; its value is no interpolation (``${oc.env:...}`` would read the
   worker's environment, its credentials among them);
2. by effect: the config is composed without and with the form's value overrides and every leaf that differs must
   be allowed as well, so that ``teacher.vllm={model: ...}`` cannot set through a mapping what ``teacher.vllm.model``
   may not set by key.

Operators widen the list through the deployment (``PARATHINK_FORM_ALLOW``, comma-separated globs that also lift a
``deny``), never through the form. ``parathink plan`` without ``--form``, ``run`` and ``stage`` are not limited.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

import yaml

from parathink.errors import ConfigError

FILE = "form_allowlist.yaml"
WIDEN_ENV = "PARATHINK_FORM_ALLOW"


@dataclass(frozen=True)
class Allowlist:
    groups: tuple[str, ...]
    allow: tuple[str, ...]
    deny: tuple[str, ...]
    widened: tuple[str, ...] = ()  # the deployment's own globs: they win over deny

    def permits(self, key: str) -> bool:
        """A glob that matches the key or a key above it (``force`` covers ``force.0``) decides."""
        parts = key.split(".")
        keys = [".".join(parts[:i]) for i in range(1, len(parts) + 1)]

        def hit(globs: tuple[str, ...]) -> bool:
            return any(fnmatchcase(k, g) for k in keys for g in globs)

        return hit(self.widened) or (hit(self.allow) and not hit(self.deny))


def load(config_dir: Path | None = None) -> Allowlist:
    """The allowlist of ``config_dir`` (default: the one parathink composes from), widened by the environment."""
    from parathink.config import config_dir as default_dir

    path = (config_dir or default_dir()) / FILE
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as err:
        raise ConfigError(f"{path}: cannot read the trigger form's allowlist ({err.strerror})") from None
    if not isinstance(doc, dict) or set(doc) != {"groups", "allow", "deny"}:
        raise ConfigError(f"{path}: must have exactly the keys groups, allow and deny")
    widened = [g.strip() for g in os.environ.get(WIDEN_ENV, "").split(",") if g.strip()]
    return Allowlist(*(tuple(str(g) for g in doc[k] or ()) for k in ("groups", "allow", "deny")), tuple(widened))


def _key(override: str) -> str:
    return override.split("=", 1)[0].lstrip("+~")


def _leaves(node: Any, prefix: str = "") -> dict[str, Any]:
    """{dotted path: value} of every leaf (list items by index), interpolations unresolved."""
    if isinstance(node, dict):
        items = node.items()
    elif isinstance(node, list):
        items = enumerate(node)
    else:
        return {prefix: node}
    out: dict[str, Any] = {}  # an empty mapping or list has no leaf: what is added to it shows as new leaves
    for k, v in items:
        out.update(_leaves(v, f"{prefix}.{k}" if prefix else str(k)))
    return out


def _refuse(override: str, what: str) -> ConfigError:
    return ConfigError(f"form override {override!r}: {what}, which the trigger form may not set (hydra_conf/{FILE}, "
                       f"docs/airflow.md; an operator widens the list with {WIDEN_ENV})")


def check_keys(form: Sequence[str], allowlist: Allowlist) -> None:
    """Step 1: every override by its key and value, before anything is composed."""
    for o in form:
        if "=" not in o:
            raise ConfigError(f"form override {o!r}: not key=value")
        key, value = _key(o), o.split("=", 1)[1]
        if "${" in value:
            raise ConfigError(f"form override {o!r}: interpolations (${{...}}) are not accepted from the form; they "
                              "read the worker's environment")
        if key not in allowlist.groups and not allowlist.permits(key):
            raise _refuse(o, f"it sets {key}")


def check(trusted: Sequence[str], form: Sequence[str], allowlist: Allowlist) -> None:
    """Refuse (ConfigError, one line naming the override and key) what ``form`` may not change on top of
    ``trusted`` (the DAG's own arguments: experiment, run_dir, seed, stages)."""
    from omegaconf import OmegaConf

    from parathink.config import compose

    check_keys(form, allowlist)
    groups = [o for o in form if _key(o) in allowlist.groups]
    values = [o for o in form if o not in groups]
    if not values:
        return
    before = _leaves(OmegaConf.to_container(compose([*trusted, *groups]), resolve=False))
    after = _leaves(OmegaConf.to_container(compose([*trusted, *groups, *values]), resolve=False))
    for path in sorted(set(before) | set(after)):
        if before.get(path, KeyError) != after.get(path, KeyError) and not allowlist.permits(path):
            culprit = next((o for o in values if path.startswith(_key(o))), values[0])
            raise _refuse(culprit, f"it changes {path}")
