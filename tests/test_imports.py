"""The package's import graph: no cycle, and no module reaching into another's private names.

The graph is read from the source with ``ast`` (every ``import`` and ``from ... import``, inside functions too: an
import deferred into a function to dodge a cycle is still a cycle). Private means a name or a module whose last part
starts with ``_``: ``from parathink.x import _name``, ``x._name`` on an imported module, or a ``_module`` imported
from outside its package.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"

# Known exceptions: none. (A new one would be listed here with its reason; the test fails when one is gone, so
# that it is struck off.)
KNOWN: set[tuple[str, str, str]] = set()


def modules() -> dict[str, tuple[Path, bool]]:
    """Dotted name -> (file, is a package)."""
    out = {}
    for path in (SRC / "parathink").rglob("*.py"):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        out[".".join(parts[:-1] if is_package else parts)] = (path, is_package)
    return out


def _owner(name: str, known: dict) -> str | None:
    """The module that ``name`` (a module, or an attribute of one) lives in."""
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def _private(dotted: str) -> bool:
    return any(p.startswith("_") and not p.startswith("__") for p in dotted.split("."))


def imports_of(module: str, path: Path, is_package: bool, known: dict) -> list[str]:
    """Every parathink name the file imports (``parathink.x.y``), and the private attributes it reads off imported
    modules (``parathink.x._z``)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = module if is_package else module.rpartition(".")[0]
    found, aliases = [], {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("parathink"):
                    found.append(a.name)
                    aliases[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([node.module] if node.module else []))
            if base.startswith("parathink"):
                for a in node.names:
                    found.append(f"{base}.{a.name}")
                    if f"{base}.{a.name}" in known:
                        aliases[a.asname or a.name] = f"{base}.{a.name}"
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases:
            if node.attr.startswith("_") and not node.attr.startswith("__"):
                found.append(f"{aliases[node.value.id]}.{node.attr}")
    return found


def violations() -> set[tuple[str, str, str]]:
    known = modules()
    edges: dict[str, set[str]] = {m: set() for m in known}
    bad = set()
    for module, (path, is_package) in known.items():
        for dotted in imports_of(module, path, is_package, known):
            target = _owner(dotted, known)
            if target is None or target == module:
                continue
            edges[module].add(target)
            outside = not module.startswith(target.rpartition(".")[0] + ".")
            private_name = dotted not in known and _private(dotted.rpartition(".")[2])
            private_module = _private(target) and outside
            if private_name or private_module:
                bad.add(("private", module, dotted if private_name else target))
    for component in cycles(edges):
        for a in component:
            for b in component:
                if a < b and (b in edges[a] or a in edges[b]):
                    bad.add(("cycle", a, b))
    return bad


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def test_no_import_cycle_and_no_private_name_across_modules():
    found = violations()
    assert found - KNOWN == set(), "new import cycles or private names used across modules"
    assert KNOWN - found == set(), "fixed: strike these off KNOWN"


def test_the_check_sees_a_cycle_and_a_private_name(tmp_path, monkeypatch):
    """The check itself on a made-up package: a deferred import that closes a cycle, a private name, a private
    module used from another package."""
    pkg = tmp_path / "parathink"
    (pkg / "a").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "a" / "__init__.py").write_text("")
    (pkg / "a" / "_impl.py").write_text("X = 1\n")
    (pkg / "one.py").write_text("from parathink import two\n")
    (pkg / "two.py").write_text("def f():\n    from parathink.one import _helper\n")
    (pkg / "three.py").write_text("from parathink.a._impl import X\nimport parathink.one as o\ny = o._hidden\n")
    monkeypatch.setattr(sys.modules[__name__], "SRC", tmp_path)
    assert violations() == {("cycle", "parathink.one", "parathink.two"),
                            ("private", "parathink.two", "parathink.one._helper"),
                            ("private", "parathink.three", "parathink.a._impl"),
                            ("private", "parathink.three", "parathink.one._hidden")}


def test_planning_the_whole_curriculum_imports_no_torch():
    """`parathink plan` validates every stage (sft and the RL stages among them) without torch, as the
    orchestrator image must (tests/deploy/test_images.py runs it where torch is not installed at all)."""
    code = ("import sys, json; from parathink.stages.runner import main_plan; "
            "assert main_plan(['experiment=tiny']) == 0; "
            "print(json.dumps(sorted(m for m in ('torch', 'transformers', 'accelerate') if m in sys.modules)))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip().splitlines()[-1] == "[]"
