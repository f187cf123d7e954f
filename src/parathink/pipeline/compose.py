"""Finding and composing parathink's Hydra config (no torch: orchestrators and ``parathink plan`` use it).

The configs are edited in the checkout's ``hydra_conf/``; a built wheel carries a copy of that folder as
``parathink/hydra_conf`` (``setup.py`` copies it at build time), so an installed ``parathink`` composes the
same configs outside the checkout (in the trainer image, in a KFP component). ``PARATHINK_CONFIG_DIR`` points
at another folder of the same shape.

Each stage section with a typed config starts from that class (Hydra's structured configs as schema): its YAML
names ``/schema/<name>`` first in its defaults list, the class holds every option's default and its
documentation, and Hydra refuses a misspelt key or a value of the wrong type while composing. The schemas are
registered when this module is imported, so that any Hydra compose of ``hydra_conf`` finds them. Hydra lets
``+key=value`` add a key anywhere and types no group without a schema, so :func:`compose` then checks the whole
composition against ``parathink.pipeline.schema`` (every section, every group: unknown keys, types, bounds), and
either way the error is one line naming the full key.
"""

from __future__ import annotations

import os

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import ConfigAttributeError, ConfigKeyError, ConfigTypeError, ValidationError

from parathink.config.base import BaseConfig
from parathink.config.eval import EvalConfig
from parathink.config.filter import FilterStageConfig
from parathink.config.paths import CHECKOUT, PACKAGED, config_dir, resolve_config_path  # noqa: F401 (re-exported)
from parathink.config.promote import PromoteConfig
from parathink.config.rl import RLConfig
from parathink.config.sft import SFTConfig
from parathink.config.teacher import TeacherConfig
from parathink.errors import ConfigError
from parathink.pipeline.schema import check as check_schema
from parathink.pipeline.schema import unknown_key, writable, wrong_value

# Hydra's config group "schema": hydra_conf/stage/{rl,base,teacher,filter,sft,eval,promote}.yaml and
# tracking/sqlite.yaml (promote) start from these.
SCHEMAS = {"rl": RLConfig, "base": BaseConfig, "teacher": TeacherConfig, "filter": FilterStageConfig,
           "promote": PromoteConfig, "sft": SFTConfig, "eval": EvalConfig}


def register_schemas() -> None:
    from hydra.core.config_store import ConfigStore

    store = ConfigStore.instance()
    for name, cls in SCHEMAS.items():
        node = OmegaConf.structured(cls)
        writable(node)  # a frozen dataclass makes a read-only node; the YAML and the overrides must write to it
        store.store(group="schema", name=name, node=node)


register_schemas()


def _one_line(err: Exception) -> str:
    """Hydra's composition errors span lines; the CLI prints one that names the key, in the words of
    ``parathink.pipeline.schema`` (the same line as for a key that ``+`` added)."""
    msg = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    cause = err.__cause__
    key = getattr(cause, "full_key", None)
    if key and isinstance(cause, (ConfigAttributeError, ConfigKeyError)):
        return unknown_key(key)
    if key and isinstance(cause, (ValidationError, ConfigTypeError)):
        if msg.startswith("Error merging override ~"):
            return f"{key}: a setting its section's schema declares cannot be removed ('~'); give it a value"
        return wrong_value(key, getattr(cause, "value", None))
    return msg


def compose(overrides: list[str]) -> DictConfig:
    """The root config with ``overrides``; raises ConfigError with a one-line message."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from parathink.config import deployment

    GlobalHydra.instance().clear()
    # the deployment's settings from its environment (config.deployment), before the caller's: those win
    given = [*deployment.overrides(os.environ, list(overrides)), *overrides]
    try:
        with initialize_config_dir(version_base=None, config_dir=str(config_dir())):
            cfg = hydra_compose(config_name="config", overrides=given)
    except (HydraException, OmegaConfBaseException) as err:
        raise ConfigError(f"config: {_one_line(err)}") from err
    check_schema(cfg)  # what '+' added, what no YAML typed, bounds: one rule for every section (config_schema)
    return cfg
