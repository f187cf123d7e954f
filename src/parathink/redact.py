"""What may be recorded of a config: no credentials, no values read from the environment.

Everything parathink records about a run (a stage manifest's ``config``, MLflow params, the JSONL tracker, run.json,
the one-line errors) goes through here:

- the user:password part of a URL becomes ``***`` (``http://***@host/v1``);
- a key that names a secret becomes ``***`` whatever its value: one whose last word is key, token, secret, password,
  passwd or credential(s) (``api_key``, ``auth_token``, ``clientSecret``); words elsewhere in the name do not count,
  so ``token_budget``, ``max_new_tokens`` and ``num_key_value_heads`` are kept, and ``api_key_env`` (it names an
  environment variable, not a secret) too;
- ``${oc.env:VAR}`` is recorded as written: the value is read at run time, used, and never stored.
"""

from __future__ import annotations

import re
from typing import Any

from omegaconf import DictConfig, OmegaConf

REDACTED = "***"
_SECRET_WORDS = {"key", "token", "secret", "password", "passwd", "credential", "credentials", "apikey"}
_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.\-]*://)[^/@\s]+@")
_ENV = re.compile(r"(?<!\\)\$\{oc\.env:")


def is_secret_key(name: Any) -> bool:
    words = re.split(r"[_\-.\s]+", re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", str(name)).lower())
    return words[-1] in _SECRET_WORDS


def redact_text(text: str) -> str:
    """``text`` with the userinfo of every URL in it replaced."""
    return _USERINFO.sub(rf"\g<scheme>{REDACTED}@", text)


def redact(obj: Any) -> Any:
    """A copy of a plain (JSON-like) structure with secret-named keys and URL userinfo redacted."""
    if isinstance(obj, dict):
        return {k: REDACTED if is_secret_key(k) and v is not None else redact(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [redact(v) for v in obj]
    if isinstance(obj, str):
        return redact_text(obj)
    return obj


def _env_as_written(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: _env_as_written(v) for k, v in node.items()}
    if isinstance(node, list):
        return [_env_as_written(v) for v in node]
    if isinstance(node, str):
        return _ENV.sub(r"\\${oc.env:", node)  # escaped: resolves to the text "${oc.env:...}", not the value
    return node


def recordable(cfg: DictConfig) -> DictConfig:
    """``cfg`` with every ``${oc.env:...}`` kept as its text; other interpolations still resolve."""
    return OmegaConf.create(_env_as_written(OmegaConf.to_container(cfg, resolve=False)))


def recorded_config(cfg: DictConfig) -> dict:
    """The whole config as it may be recorded (MLflow params of the run)."""
    return redact(OmegaConf.to_container(recordable(cfg), resolve=True))
