"""What a trigger form may override: ``hydra_conf/form_allowlist.yaml``, checked by ``parathink plan --form ...``.

Whoever may trigger a DAG is not whoever deploys it: the form's overrides reach the Airflow worker (``parathink
plan`` imports the stage modules a config names) and the pods (image, secrets, service account, data). So the
overrides after ``--form`` are checked twice, before anything is imported:

1. by syntax, one override at a time, before anything is composed: :func:`pattern` (the form's JSON-schema
   pattern too, built from the same file by ``dags/parathink_airflow/form.py``; a test keeps the two strings
   equal). A config group is chosen by the name of a file in its own folder (``data=gsm8k``: never a path, so no
   ``../``), every other key is a dotted name that an ``allow`` glob matches and no ``deny`` glob does, and no value
   holds a ``$``: OmegaConf interpolations and resolvers (``${oc.env:...}``, ``oc.decode``, ``oc.create``) all start
   with one, and Hydra's escapes (``$\\{oc.env\\:X\\}``) unescape into one, so none of them is spelled without it;
2. by effect: the config is composed without and with the form's overrides and resolved, and every leaf that differs
   (whatever syntax changed it: a mapping, a list, ``+``, ``++``, ``~``, an interpolation of a trusted key) must be
   under an allowed glob or inside the package of a group the form chose by name. Data and eval URIs it changes lie
   under the deployment's data roots (:func:`data_roots`); ``eval.models`` entries it changes name stages.

A refusal is one line naming the override as typed and the key; it never holds a value resolved from the config
(the deployment's environment may be in it). Operators widen the list through the deployment
(``PARATHINK_FORM_ALLOW``, comma-separated globs that also lift a ``deny``), never through the form.
``parathink plan`` without ``--form``, ``run`` and ``stage`` are not limited (a user at a shell owns the machine).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

import yaml

from parathink.errors import ConfigError

FILE = "form_allowlist.yaml"
WIDEN_ENV = "PARATHINK_FORM_ALLOW"
DATA_ROOTS_ENV = "PARATHINK_DATA_ROOTS"
# The pieces of the pattern (dags/parathink_airflow/form.py has the same; ECMAScript and Python's re alike).
KEY = r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z0-9_]+)*"  # dotted names and list indices: no '@' package, no '/' group
VALUE = r"[^$\x00-\x1f\x7f]*"  # no '$' (every interpolation and resolver), no control character
# The end of the string: `$` would also match before a final newline in Python's re.search (how jsonschema applies
# a pattern), not in ECMAScript.
END = r"(?![\s\S])"
# At most this many characters an override and this many overrides a form: Hydra parses a long list slowly (a
# 100 KB value of 20,000 items kept `plan` busy for minutes), and a researcher's override is a line.
MAX_CHARS = 2048
MAX_OVERRIDES = 100
NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_-]*")  # a file of a config group, as the form may choose it
GLOB = re.compile(r"[A-Za-z0-9_.*]+")  # a key glob of the allowlist (fnmatch's '*' spans dots)
# A problem set's location, wherever the spec sits (data.*, *.problems, eval.sets.*, ...); tracking.uri is the
# tracking store's (the tracking group's, not a form's to set).
URI_KEYS = ("uri",)
NOT_DATA = ("tracking",)
URI_PATHS = ("eval.benchmarks",)  # and keys that name one by themselves


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
    path = _config_dir(config_dir) / FILE
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as err:
        raise ConfigError(f"{path}: cannot read the trigger form's allowlist ({err.strerror})") from None
    if not isinstance(doc, dict) or set(doc) != {"groups", "allow", "deny"}:
        raise ConfigError(f"{path}: must have exactly the keys groups, allow and deny")
    widened = [g.strip() for g in os.environ.get(WIDEN_ENV, "").split(",") if g.strip()]
    return Allowlist(*(tuple(str(g) for g in doc[k] or ()) for k in ("groups", "allow", "deny")), tuple(widened))


def _config_dir(config_dir: Path | None) -> Path:
    from parathink.config.paths import config_dir as default_dir

    return config_dir or default_dir()


def config_groups(config_dir: Path | None = None) -> dict[str, tuple[str, ...]]:
    """Every config group of ``config_dir`` (a folder of YAML files) and the names the form may choose in it."""
    root = _config_dir(config_dir)
    out = {}
    for folder in sorted(p for p in root.iterdir() if p.is_dir()):
        names = sorted(p.stem for p in folder.glob("*.yaml") if NAME.fullmatch(p.stem))
        if names:
            out[folder.name] = tuple(names)
    return out


# ---------------------------------------------------------------------------------------------- 1. by syntax


def _glob(glob: str) -> str:
    if not GLOB.fullmatch(glob):
        raise ConfigError(f"form allowlist: {glob!r} is not a key glob (letters, digits, _ . and *)")
    # the glob matches the key or a key above it, as Allowlist.permits
    return glob.replace(".", r"\.").replace("*", "[A-Za-z0-9_.]*") + r"(?:\.[A-Za-z0-9_.]*)?"


def pattern(allowlist: Allowlist, groups: Mapping[str, Sequence[str]]) -> str:
    """One form override as a regular expression (the form's JSON-schema pattern; ECMAScript and Python alike).

    ``groups``: every config group and its files (:func:`config_groups`). A group of the allowlist is chosen by one
    of its names and nothing else; a key that names any other group is refused (choosing a file of it, whatever the
    glob); every other key must be allowed; no value holds a ``$``.
    """
    def either(globs: Sequence[str]) -> str:
        return "|".join(_glob(g) for g in globs) or "(?!)"

    chosen = "|".join(f"{g}=(?:{'|'.join(groups[g])})" for g in allowlist.groups if groups.get(g)) or "(?!)"
    others = "|".join(groups) or "(?!)"

    def key(end: str) -> str:  # an allowed key that names no group, followed by `end`
        keys = f"(?:{either(allowlist.widened)})|(?!(?:{either(allowlist.deny)}){end})(?:{either(allowlist.allow)})"
        return f"(?={KEY}{end})(?!(?:{others}){end})(?:{keys}){end}"

    # key=value with +, ++ or ~ before it; or ~key (Hydra's delete, whatever the value)
    return rf"^(?=[\s\S]{{0,{MAX_CHARS}}}{END})(?:{chosen}|(?:\+\+|\+|~)?{key('=')}{VALUE}|~{key(END)}){END}"


def _why(override: str, allowlist: Allowlist, groups: Mapping[str, Sequence[str]]) -> str:
    """Why ``override`` does not match :func:`pattern`, in words."""
    if len(override) > MAX_CHARS:
        return f"longer than {MAX_CHARS} characters"
    key, eq, value = override.partition("=")
    bare = key.lstrip("+~")
    if not (eq or key.startswith("~")) or re.search(r"[\x00-\x1f\x7f]", override) or not re.fullmatch(KEY, bare):
        return "not a key=value (or ~key) override whose key is a dotted name (letters, digits, _)"
    if "$" in value:
        return ("a value may not hold '$': interpolations and resolvers (${oc.env:...}, in any spelling or escape) "
                "read the worker's environment")
    if bare in allowlist.groups:
        if bare != key or not eq:
            return f"the config group {bare} is chosen as {bare}=NAME, without + or ~"
        return (f"{value!r} is not the name of a file of hydra_conf/{bare}/ (one of "
                f"{', '.join(groups.get(bare, ()))}; a group is chosen by name, never by path)")
    if bare in groups:
        return f"it chooses a file of the config group {bare}, which the trigger form may not choose"
    return f"it sets {bare}"


def check_syntax(form: Sequence[str], allowlist: Allowlist, groups: Mapping[str, Sequence[str]]) -> None:
    """Step 1: every override against :func:`pattern`, before anything is composed."""
    if len(form) > MAX_OVERRIDES:
        raise ConfigError(f"form overrides: {len(form)} of them, more than the {MAX_OVERRIDES} a form may give")
    rule = re.compile(pattern(allowlist, groups))
    for o in form:
        if not isinstance(o, str) or not rule.fullmatch(o):
            raise _refuse(o, _why(str(o), allowlist, groups))


def check_keys(form: Sequence[str], allowlist: Allowlist) -> None:
    """Step 1 with the groups of the default config folder."""
    check_syntax(form, allowlist, config_groups())


def _refuse(override: Any, what: str) -> ConfigError:
    tail = (", which the trigger form may not set" if what.startswith(("it sets", "it changes")) else "")
    return ConfigError(f"form override {override!r}: {what}{tail} (hydra_conf/{FILE}, docs/airflow.md; an operator "
                       f"widens the list with {WIDEN_ENV})")


# ---------------------------------------------------------------------------------------------- 2. by effect


_UNRESOLVABLE = ("unresolvable",)


def _leaves(node: Any, prefix: tuple = ()) -> dict[tuple, tuple]:
    """{path: (type, repr)} of every leaf and container of a composed config, each resolved on its own (a leaf whose
    interpolation fails is one value, not an error). Containers are recorded too: a mapping that became a list, or
    an emptied one, is a change where no leaf shows it."""
    from omegaconf import DictConfig, ListConfig

    if isinstance(node, DictConfig):
        keys: Any = list(node.keys())
    elif isinstance(node, ListConfig):
        keys = range(len(node))
    else:
        return {prefix: (type(node).__name__, repr(node))}
    out: dict[tuple, tuple] = {prefix: (type(node).__name__,)}
    for k in keys:
        try:
            child = node[k]
        except Exception:  # any resolution failure (a missing key, a resolver error) is a value
            out[(*prefix, k)] = _UNRESOLVABLE
            continue
        out.update(_leaves(child, (*prefix, k)))
    return out


def _raw(cfg: Any, path: tuple) -> Any:
    """The unresolved value at ``path`` (an interpolation as its text); None below an interpolation."""
    node = cfg
    try:
        for k in path:
            if node is None or not hasattr(node, "_get_node") or node._is_interpolation():
                return None
            node = node._get_node(k)
    except Exception:  # a key the config does not have
        return None
    return node._value() if node is not None else None


def _value(cfg: Any, path: tuple) -> Any:
    """The resolved value at ``path``; _UNRESOLVABLE when it cannot be resolved."""
    try:
        for k in path:
            cfg = cfg[k]
    except Exception:  # as in _leaves
        return _UNRESOLVABLE
    return cfg


def data_roots(cluster: Mapping[str, Any] | None, env: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """Where a form may point data and eval URIs: ``PARATHINK_DATA_ROOTS`` (comma-separated) when the deployment
    sets it, else the cluster profile's ``data_roots``. A root is a local folder, ``s3://bucket/prefix`` or
    ``hub:ORG``; what lies below it is the deployment's to vouch for."""
    env = os.environ if env is None else env
    if DATA_ROOTS_ENV in env:
        return tuple(r.strip() for r in env[DATA_ROOTS_ENV].split(",") if r.strip())
    return tuple(str(r) for r in (cluster or {}).get("data_roots") or ())


def _split(uri: str) -> tuple[str, list[str]] | None:
    """(scheme, path segments) of a URI or path; None when a segment is '..' (a way out of any root)."""
    if "://" in uri:
        scheme, _, rest = uri.partition("://")
        scheme += "://"
    elif uri.startswith("hub:"):
        scheme, rest = "hub:", uri[len("hub:"):]
    else:
        scheme, rest = ("/" if uri.startswith("/") else ""), uri
    if scheme.endswith("://"):  # an object key: 'a//b' and 'a/./b' are keys of their own, not 'a/b'
        parts = rest.rstrip("/").split("/")
    else:
        parts = [p for p in rest.split("/") if p not in ("", ".")]
    return None if ".." in parts else (scheme, parts)


def under_roots(uri: Any, roots: Sequence[str]) -> bool:
    """Whether ``uri`` (a data or eval URI a form set) is null or lies under one of ``roots``, segment by segment
    (``s3://b/data`` holds ``s3://b/data/x.parquet``, not ``s3://b/data2``); a ``..`` anywhere is outside."""
    if uri is None:
        return True  # the source's own default (its hub id), as the experiment names it
    if not isinstance(uri, str) or not uri:
        return False
    mine = _split(uri)
    for root in roots:
        theirs = _split(root)
        if mine and theirs and mine[0] == theirs[0] and mine[1][:len(theirs[1])] == theirs[1]:
            return True
    return False


def _stage_names(cfg: Any) -> set[str]:
    from parathink.config.eval import MODELS

    names = {*MODELS, *(str(s) for s in cfg.get("stages") or ())}
    names |= {str(k) for k in (cfg.get("stage_modules") or {})}
    return {n for n in names if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", n)}


def _culprit(path: str, form: Sequence[str], allowlist: Allowlist) -> str | None:
    """The override that most plausibly changed ``path``: the longest key above it, a group whose package holds
    it, the only override; None when the form's overrides changed it together (an interpolation of two keys)."""
    best = None
    for o in form:
        key = o.partition("=")[0].lstrip("+~")
        if (path == key or path.startswith(key + ".")) and (best is None or len(key) > len(best[0])):
            best = (key, o)
    if best:
        return best[1]
    return form[0] if len(form) == 1 else None


def _refuse_effect(path: str, form: Sequence[str], allowlist: Allowlist, what: str) -> ConfigError:
    culprit = _culprit(path, form, allowlist)
    if culprit is not None:
        return _refuse(culprit, what)
    return ConfigError(f"form overrides {', '.join(repr(o) for o in form)}: together {what.removeprefix('it ')}"
                       f"{', which the trigger form may not set' if what.startswith('it changes') else ''} "
                       f"(hydra_conf/{FILE}, docs/airflow.md)")


def _scrub(message: str, typed: str, env: Mapping[str, str]) -> str:
    """``message`` without any environment value the user did not type: a config the form's overrides fail to compose
    may hold values a trusted interpolation read from the environment (``tracking.uri`` of ``tracking=server``)."""
    for value in sorted({v for v in env.values() if len(v) >= 4}, key=len, reverse=True):
        if value in message and value not in typed:
            message = message.replace(value, "<from the environment>")
    return message


def check(trusted: Sequence[str], form: Sequence[str], allowlist: Allowlist, *,
          config_dir: Path | None = None, env: Mapping[str, str] | None = None) -> None:
    """Refuse (ConfigError, one line naming the override and the key) what ``form`` may not change on top of
    ``trusted`` (the DAG's own arguments: experiment, run_dir, seed, stages, the deployment's)."""
    from parathink.pipeline.compose import compose

    env = os.environ if env is None else env
    groups = config_groups(config_dir)
    check_syntax(form, allowlist, groups)
    if not form:
        return
    before_cfg = compose(list(trusted))
    try:
        after_cfg = compose([*trusted, *form])
    except ConfigError as err:
        raise ConfigError(_scrub(f"form overrides: {err}", " ".join([*trusted, *form]), env)) from None
    except RecursionError:  # Hydra's parser recurses once per bracket: [[[[...]]]] a few thousand deep
        raise ConfigError("form overrides: a value nested too deeply for Hydra's parser (lists and mappings "
                          "inside each other)") from None
    before, after = _leaves(before_cfg), _leaves(after_cfg)
    chosen = {o.partition("=")[0] for o in form if o.partition("=")[0] in allowlist.groups}
    roots = data_roots(before_cfg.get("cluster"), env)
    stages = _stage_names(before_cfg)
    changed = [p for p in set(before) | set(after) if p and before.get(p) != after.get(p)]
    # A container that was added, removed or retyped with something inside it is judged by what is inside it (each
    # of those paths changed too and is checked below): `+prep.calls=...` adds the mapping `prep` as well, and
    # `prep.*` on the allowlist permits it. An empty one is judged by its own path.
    holders = {p[:i] for p in changed for i in range(1, len(p))}
    for path in sorted(changed, key=lambda p: tuple(map(str, p))):
        if path in holders and len(after.get(path, before.get(path))) == 1:
            continue
        dotted = ".".join(map(str, path))
        by_group = str(path[0]) in chosen  # inside the package of a file the form chose by name
        if not by_group and not allowlist.permits(dotted):
            raise _refuse_effect(dotted, form, allowlist, f"it changes {dotted}")
        raw = _raw(after_cfg, path)
        if not by_group and isinstance(raw, str) and "${" in raw and raw != _raw(before_cfg, path):
            raise _refuse_effect(dotted, form, allowlist, f"it makes {dotted} an interpolation, which the form may "
                                                          f"not write")
        if path in after and ((path[-1] in URI_KEYS and path[0] not in NOT_DATA) or dotted in URI_PATHS) and \
                not under_roots(_value(after_cfg, path), roots):  # _UNRESOLVABLE is under none
            raise _refuse_effect(dotted, form, allowlist, f"it points {dotted} outside the deployment's data roots "
                                                          f"(cluster.data_roots or {DATA_ROOTS_ENV})")
        if len(path) == 3 and path[:2] == ("eval", "models") and path in after and \
                _value(after_cfg, path) not in stages:
            raise _refuse_effect(dotted, form, allowlist, f"{dotted} must name a stage (one of "
                                                          f"{', '.join(sorted(stages))})")
