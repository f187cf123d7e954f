"""A run directory's own folders stay inside it: no symlink leads a write or a delete out of it.

A stage deletes and rewrites its scratch (``.tmp/<stage>``, ``.work/<stage>``), its lock (``.locks/<stage>.lock``) and
its output folder (``<stage>``) on every run. With ``<run_dir>/.tmp`` a symlink to ``/X`` a forced stage deleted
``/X/<stage>`` recursively and wrote its output there; with ``.work/<stage>`` a symlink, the stage's ``_attempt.json``
and checkpoints went wherever it pointed. ``inside`` resolves the path (every symlink on it followed, the part that
does not exist yet taken as written) and refuses, in one line (``BadInput``, exit 2), a path that lands outside the
run directory's own folder, before anything is created, written or removed there. A symlink that stays inside the
run directory is followed as before.

What it does not do: a process that can write the run directory while a stage runs can still swap a folder for a
symlink between the check and the use. The run directory is the stage's own; this guards against a directory that
was prepared badly (or by someone else) before the stage started, not against a concurrent attacker with write access.
"""

from __future__ import annotations

from pathlib import Path

from parathink.errors import BadInput


class OutsideRunDir(BadInput):
    """A run directory's folder or file that resolves (through a symlink) outside the run directory."""


def inside(root: str | Path, path: str | Path) -> Path:
    """``path`` (under ``root``) when, resolved, it stays inside ``root`` resolved; else ``OutsideRunDir``."""
    base = Path(root).resolve()
    target = Path(path)
    resolved = target.resolve()
    if resolved != base and base not in resolved.parents:
        link = _first_link(base, target)
        raise OutsideRunDir(f"{link or target} leads out of the run directory {base} (to {resolved}): refused, "
                            f"nothing is written or removed there; remove the symlink")
    return target


def _first_link(base: Path, path: Path) -> Path | None:
    """The first symlink on ``path`` below ``base`` (what the user has to remove), or None."""
    try:
        rel = path.relative_to(base)
    except ValueError:
        return None
    current = base
    for part in rel.parts:
        current = current / part
        if current.is_symlink():
            return current
    return None
