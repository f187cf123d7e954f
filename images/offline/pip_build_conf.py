"""The host's pip configuration for the RUN steps of an image build, never for a layer of the image.

    python3 images/offline/pip_build_conf.py DIR      (mk/images.mk calls it; prints podman build options)

pip inside a build reaches the package index only with what the host's pip is configured with (extra indexes,
find-links, a CA bundle, a constraints file). This writes that configuration, as `pip config list` shows it (files
and PIP_* variables), to DIR/pip.conf and prints the `--volume` options that mount it at /etc/pip.conf and every
local path it names (file:// indexes, find-links folders, the CA bundle) read-only at the same path. Volumes exist
only while a RUN step runs: nothing of them is committed to a layer, and no index host is written into the
repository. A host with no pip configuration gets an empty pip.conf (pip's defaults: PyPI).
"""

from __future__ import annotations

import ast
import configparser
import os
import shlex
import subprocess
import sys
from pathlib import Path


def host_settings() -> dict[str, dict[str, str]]:
    """`pip config list` as {section: {key: value}}; PIP_* variables (`:env:.key`) count as [global]."""
    out = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True,
                         check=True).stdout
    settings: dict[str, dict[str, str]] = {}
    for line in out.splitlines():
        name, sep, raw = line.partition("=")
        if not sep or "." not in name:
            continue
        section, key = name.rsplit(".", 1)
        section = "global" if section == ":env:" else section
        settings.setdefault(section, {})[key] = ast.literal_eval(raw)
    return settings


def local_paths(settings: dict[str, dict[str, str]]) -> list[Path]:
    """Every existing local path a setting names (file:// URLs included), deepest duplicates dropped."""
    found = set()
    for values in settings.values():
        for value in values.values():
            for word in value.split():
                path = word.removeprefix("file://")
                if path.startswith("/") and os.path.exists(path):
                    # A file:// index's pages may link to files beside it (../../files/...): its parent goes too.
                    found.add(Path(path).resolve().parent if word.startswith("file://") else Path(path).resolve())
    # A path below another one that is mounted anyway needs no mount of its own.
    return sorted(p for p in found if not any(q != p and q in p.parents for q in found))


def main(folder: str) -> None:
    settings = host_settings()
    conf = configparser.ConfigParser()
    for section, values in settings.items():
        conf[section] = values
    target = Path(folder)
    target.mkdir(parents=True, exist_ok=True)
    with open(target / "pip.conf", "w") as f:
        conf.write(f)
    options = [f"--volume={target / 'pip.conf'}:/etc/pip.conf:ro"]
    options += [f"--volume={p}:{p}:ro" for p in local_paths(settings)]
    print(" ".join(shlex.quote(o) for o in options))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: pip_build_conf.py DIR")
    main(sys.argv[1])
