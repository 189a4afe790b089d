"""The layers of gpuwm/DESIGN.md, held: no import cycle, arrows downward
only, public names that are never a submodule's, and the linter clean.

Every import counts — at module level or inside a function, relative or
absolute — and so do the lazy exports of a package's ``_LAZY`` table
(``gpuwm`` and ``gpuwm.spark`` import them on first use).
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: the Spark layer's rooms and the rooms each may import (gpuwm/spark/__init__.py)
ROOMS = {
    "jvm": set(),
    "storage": set(),
    "catalyst": {"jvm"},
    "io": {"storage", "catalyst"},
    "executor": {"io", "storage"},
    "driver": {"executor", "io", "storage", "jvm", "catalyst"},
    "front": {"driver", "executor", "io", "storage", "jvm", "catalyst"},
    "app": {"front"},
}
#: operator modules: one operator (or the aggregates they share) each
OPERATORS = {"gpuwm.sort", "gpuwm.window", "gpuwm.session", "gpuwm.dedup", "gpuwm.over", "gpuwm.join",
             "gpuwm.union", "gpuwm.aggregates"}


def _modules(root: Path) -> dict[str, tuple[Path, bool]]:
    mods = {}
    for p in sorted([*root.glob("gpuwm/**/*.py"), *root.glob("kernels/**/*.py")]):
        parts = list(p.relative_to(root).with_suffix("").parts)
        is_pkg = parts[-1] == "__init__"
        mods[".".join(parts[:-1] if is_pkg else parts)] = (p, is_pkg)
    return mods


def import_graph(root: Path = ROOT) -> dict[str, set[str]]:
    """Module -> the gpuwm and kernels modules it imports (and any other
    top-level package it imports, by its first name)."""
    mods = _modules(root)
    graph: dict[str, set[str]] = {}
    for mod, (path, is_pkg) in mods.items():
        package = mod if is_pkg else mod.rpartition(".")[0]
        out: set[str] = set()
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")
                    base = base[:len(base) - (node.level - 1)]
                    prefix = ".".join(base + ([node.module] if node.module else []))
                else:
                    prefix = node.module
                targets = [f"{prefix}.{a.name}" if f"{prefix}.{a.name}" in mods else prefix for a in node.names]
            elif (isinstance(node, ast.Assign) and is_pkg and any(getattr(t, "id", "") == "_LAZY" for t in node.targets)
                  and isinstance(node.value, ast.Dict)):
                for v in node.value.values:  # "window" (gpuwm) or ".front.translate" (gpuwm.spark)
                    name = v.value.lstrip(".")
                    targets.append(f"{mod}.{name}")
            for t in targets:
                while t not in mods and "." in t and t.split(".")[0] in ("gpuwm", "kernels"):
                    t = t.rpartition(".")[0]  # a name inside a module: the module
                if t in mods:
                    if t != mod:
                        out.add(t)
                else:
                    out.add(t.split(".")[0])
        graph[mod] = out
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in graph:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def room(mod: str) -> str | None:
    parts = mod.split(".")
    return parts[2] if len(parts) > 2 and parts[:2] == ["gpuwm", "spark"] else None


GRAPH = import_graph()


def test_the_graph_sees_every_kind_of_import(tmp_path):
    """The counter finds a cycle made of a function-level relative import
    and a module-level absolute one, and one through a lazy export."""
    pkg = tmp_path / "gpuwm"
    (pkg / "spark").mkdir(parents=True)
    (tmp_path / "kernels").mkdir()
    (pkg / "__init__.py").write_text('_LAZY = {"Thing": "a"}\n')
    (pkg / "a.py").write_text("def f():\n    from .b import g\n")
    (pkg / "b.py").write_text("import gpuwm.c\n")
    (pkg / "c.py").write_text("from gpuwm.a import f\n")
    (pkg / "spark" / "__init__.py").write_text('_LAZY = {"x": ".d"}\n')
    (pkg / "spark" / "d.py").write_text("from gpuwm.spark import x\n")
    g = import_graph(tmp_path)
    assert g["gpuwm"] == {"gpuwm.a"} and g["gpuwm.spark"] == {"gpuwm.spark.d"}
    assert sorted(cycles(g)) == [["gpuwm.a", "gpuwm.b", "gpuwm.c"], ["gpuwm.spark", "gpuwm.spark.d"]]


def test_no_import_cycles():
    assert len(GRAPH) > 60
    assert cycles(GRAPH) == []


def test_kernels_import_no_gpuwm_and_no_spark():
    for mod, deps in GRAPH.items():
        if mod.startswith("kernels"):
            assert not {d for d in deps if d.startswith("gpuwm") or d == "pyspark"}, mod


def test_operators_below_the_spark_layer():
    """gpuwm's operators import nothing of the Spark layer nor pyspark, and
    no operator takes a helper from the watermark filter's module (the
    named inputs' filter, built on it, is the one module that does)."""
    for mod, deps in GRAPH.items():
        if mod.startswith("gpuwm") and room(mod) is None and mod != "gpuwm.spark":
            # (gpuwm.spark and its modules, not a name that begins so: gpuwm.sparkjson)
            assert not {d for d in deps if (d + ".").startswith("gpuwm.spark.") or d == "pyspark"}, mod
    takes_filter = {m for m, deps in GRAPH.items()
                    if "gpuwm.watermark" in deps and not (m + ".").startswith("gpuwm.spark.")}
    assert takes_filter == {"gpuwm", "gpuwm.inputs"}
    for op in OPERATORS:
        assert "gpuwm.watermark" not in GRAPH[op], op


def test_spark_rooms_import_downward_only():
    seen = set()
    for mod, deps in GRAPH.items():
        r = room(mod)
        if r is None:
            continue
        seen.add(r)
        assert r in ROOMS, f"{mod}: a room tests/test_layers.py does not know"
        for d in deps:
            assert d != "gpuwm.spark", f"{mod} imports the public package (import from the room that defines it)"
            other = room(d)
            if other is not None and other != r:
                assert other in ROOMS[r], f"{mod} ({r}) imports {d} ({other}): {r} may import {sorted(ROOMS[r])}"
    assert seen == set(ROOMS)
    # the task side (what runs in Spark's tasks) knows specs, not operators
    for mod, deps in GRAPH.items():
        if room(mod) in ("executor", "io", "storage"):
            assert not deps & OPERATORS, mod


def test_every_room_says_what_it_owns_and_may_import():
    for r in ROOMS:
        if r == "app":
            continue
        doc = ast.get_docstring(ast.parse((ROOT / "gpuwm" / "spark" / r / "__init__.py").read_text()))
        assert doc and "May import" in doc, r
        assert (ROOT / "gpuwm" / "spark" / r / "README.md").exists(), r


def _public(package: str) -> list[str]:
    tree = ast.parse((ROOT / package.replace(".", "/") / "__init__.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "__all__" for t in node.targets):
            return [e.value for e in node.value.elts]
    raise AssertionError(f"{package} has no __all__")


@pytest.mark.parametrize("package", ["gpuwm", "gpuwm.spark"])
def test_no_public_name_is_a_submodule(package):
    names = _public(package)
    subs = {p.stem for p in (ROOT / package.replace(".", "/")).glob("*.py")} | \
        {p.name for p in (ROOT / package.replace(".", "/")).iterdir() if (p / "__init__.py").exists()}
    assert names and not set(names) & subs


_IMPORTS = """
import importlib, itertools, json, sys
package, names, pairs = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3] == "pairs"
orders = itertools.permutations(names, 2) if pairs else [names, names[::-1]]
bad = []
for order in orders:
    for m in [m for m in sys.modules if m == package.split(".")[0] or m.startswith(package.split(".")[0] + ".")]:
        del sys.modules[m]
    got = {}
    for n in order:
        exec(f"from {package} import {n}", got)
    for n in order:
        v = got[n]
        if type(v).__name__ == "module":
            bad.append((list(order), n, repr(v)))
print(json.dumps(bad))
"""


@pytest.mark.parametrize("package,pairs", [("gpuwm.spark", True), ("gpuwm", False)])
def test_documented_names_import_in_any_order(package, pairs):
    """``from gpuwm.spark import explain, accelerate`` gives the function,
    whatever was imported first: every ordered pair of gpuwm.spark's names
    (gpuwm's, forward and backward), each from a fresh import of gpuwm, and
    the issue's order and the names backward in fresh interpreters."""
    names = _public(package)
    out = subprocess.run([sys.executable, "-c", _IMPORTS, package, json.dumps(names), "pairs" if pairs else "all"],
                         capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == []
    for order in (["explain", "accelerate"], names[::-1]) if pairs else ():
        got = subprocess.run([sys.executable, "-c", f"from {package} import {', '.join(order)}; "
                              f"assert all(callable(x) for x in [{', '.join(order)}])"],
                             capture_output=True, text=True, cwd=ROOT, timeout=300)
        assert got.returncode == 0, (order, got.stderr[-500:])


def test_ruff_finds_nothing():
    """The linter (pyproject's ``[tool.ruff]``: pyflakes and import order) over the whole tree."""
    out = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "."], capture_output=True, text=True,
                         cwd=ROOT)
    assert out.returncode == 0, out.stdout + out.stderr


def test_the_spark_layer_keeps_its_modules_and_functions_short():
    """No module of ``gpuwm/spark/`` (nor ``gpuwm/project.py``) over 800
    lines, no function there over 120, no test file over 1,500: a module
    that outgrows them holds more than one idea (the front's issue, #71)."""
    long = []
    for p in [*sorted((ROOT / "gpuwm" / "spark").rglob("*.py")), ROOT / "gpuwm" / "project.py"]:
        text = p.read_text()
        if len(text.splitlines()) > 800:
            long.append(f"{p.relative_to(ROOT)}: {len(text.splitlines())} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno >= 120:
                long.append(f"{p.relative_to(ROOT)}:{node.lineno} {node.name}: {node.end_lineno - node.lineno + 1}")
    long += [f"{p.relative_to(ROOT)}: {n} lines" for p in sorted((ROOT / "tests").glob("*.py"))
             if (n := len(p.read_text().splitlines())) > 1500]
    assert long == []
