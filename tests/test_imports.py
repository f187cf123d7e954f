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


def modules(src: Path | None = None) -> dict[str, tuple[Path, bool]]:
    """Dotted name -> (file, is a package), of the package under ``src`` (SRC when None)."""
    src = src or SRC
    out = {}
    for path in (src / "parathink").rglob("*.py"):
        parts = list(path.relative_to(src).with_suffix("").parts)
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
    code = ("import sys, json; from parathink.pipeline.runner import main_plan; "
            "assert main_plan(['experiment=tiny']) == 0; "
            "print(json.dumps(sorted(m for m in ('torch', 'transformers', 'accelerate') if m in sys.modules)))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip().splitlines()[-1] == "[]"


ROOT = SRC.parent
# Where parathink is imported from: the package, and the scripts and tests that run it.
IMPORTERS = ("src/parathink", "benchmarks", "dags", "components", "tools", "tests")


def top_level_names(path: Path) -> set[str]:
    """The names a module binds at its top level (defs, classes, assignments, imports; inside ``if``/``try`` too),
    and those its ``__all__`` lists (a package that imports them lazily through ``__getattr__``)."""
    names: set[str] = set()

    def bind(target: ast.AST) -> None:
        for node in ast.walk(target):
            if isinstance(node, ast.Name):
                names.add(node.id)

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                for t in node.targets if isinstance(node, ast.Assign) else [node.target]:
                    bind(t)
                    if isinstance(t, ast.Name) and t.id == "__all__" and isinstance(node.value, (ast.List, ast.Tuple)):
                        names.update(e.value for e in node.value.elts if isinstance(e, ast.Constant))
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                names.update((a.asname or a.name).split(".")[0] for a in node.names)
            elif isinstance(node, (ast.If, ast.Try, ast.With, ast.For)):
                for part in ("body", "orelse", "finalbody"):
                    visit(getattr(node, part, []) or [])
                for handler in getattr(node, "handlers", []):
                    visit(handler.body)
    visit(ast.parse(path.read_text(encoding="utf-8")).body)
    return names


def unresolved_imports(root: Path, importers: tuple[str, ...]) -> list[str]:
    """``file:line name`` for every ``from parathink.x import name`` (at any depth of the file, deferred imports
    included) whose module does not exist or binds no ``name``, and every ``import parathink.x`` of no module.
    A deferred import of a renamed function fails only when its code path runs (a GPU check on a device, say)."""
    known = {m: p for m, (p, _) in modules(root / "src").items()}
    bound: dict[str, set[str]] = {}
    bad = []
    for folder in importers:
        for path in sorted((root / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                where = f"{path.relative_to(root)}:{getattr(node, 'lineno', 0)}"
                if isinstance(node, ast.Import):
                    bad += [f"{where} {a.name}" for a in node.names
                            if a.name.startswith("parathink.") and a.name not in known]
                elif isinstance(node, ast.ImportFrom) and not node.level and (
                        node.module == "parathink" or (node.module or "").startswith("parathink.")):
                    if node.module not in known:
                        bad.append(f"{where} {node.module}")
                        continue
                    names = bound.setdefault(node.module, top_level_names(known[node.module]))
                    bad += [f"{where} {node.module}.{a.name}" for a in node.names
                            if a.name != "*" and a.name not in names and f"{node.module}.{a.name}" not in known]
    return bad


def test_every_imported_parathink_name_exists():
    assert unresolved_imports(ROOT, IMPORTERS) == []


def test_the_name_check_sees_a_renamed_function(tmp_path):
    (tmp_path / "src/parathink/training").mkdir(parents=True)
    (tmp_path / "src/parathink/__init__.py").write_text("")
    (tmp_path / "src/parathink/training/__init__.py").write_text("")
    (tmp_path / "src/parathink/training/rl.py").write_text(
        "import torch\nif True:\n    LIMIT = 1\ndef update():\n    pass\nclass Problem:\n    pass\n"
        "__all__ = ['Engine']\n")
    (tmp_path / "benchmarks").mkdir()
    (tmp_path / "benchmarks/check.py").write_text(
        "def rl():\n    from parathink.training.rl import Problem, kv_cache_bytes, update, LIMIT, torch\n"
        "    from parathink.training import rl\n    from parathink.gone import x\n    import parathink.nothing\n"
        "    from parathink_airflow import form\n")
    assert unresolved_imports(tmp_path, ("benchmarks",)) == [
        "benchmarks/check.py:2 parathink.training.rl.kv_cache_bytes", "benchmarks/check.py:4 parathink.gone",
        "benchmarks/check.py:5 parathink.nothing"]


# The layers below the pipeline (docs/design.md, "Where things live"): they may import each other and the config and
# run-directory layers, never the stages or the pipeline that chains them (an import inside a function counts).
LOWER = ("engine", "modeling", "training", "evaluation", "quality", "tracking", "storage", "teacher", "data",
         "rewards", "grading", "formats", "config", "rundir", "placement", "vllm_rollout", "vllm_venv")
UPPER = ("parathink.stages", "parathink.pipeline")


def upward_imports() -> set[tuple[str, str]]:
    """(module, what it imports) for every import from a lower layer up into the stages or the pipeline."""
    known = modules()
    found = set()
    for module, (path, is_package) in known.items():
        if module.split(".")[1:2] and module.split(".")[1] in LOWER:
            for name in imports_of(module, path, is_package, known):
                if any(name == up or name.startswith(up + ".") for up in UPPER):
                    found.add((module, name))
    return found


def test_no_lower_layer_imports_the_stages_or_the_pipeline():
    assert upward_imports() == set()


def test_the_layer_check_sees_an_upward_import(tmp_path, monkeypatch):
    """The check on a made-up package: a training module that imports the runner inside a function."""
    pkg = tmp_path / "parathink"
    for sub in ("training", "pipeline", "stages"):
        (pkg / sub).mkdir(parents=True)
        (pkg / sub / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "pipeline" / "runner.py").write_text("from parathink.training import loop\n")
    (pkg / "training" / "loop.py").write_text("def f():\n    from parathink.pipeline import runner\n")
    (pkg / "stages" / "sft.py").write_text("from parathink.training import loop\n")
    monkeypatch.setattr(sys.modules[__name__], "SRC", tmp_path)
    assert upward_imports() == {("parathink.training.loop", "parathink.pipeline.runner")}
