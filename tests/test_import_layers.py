"""The package's import graph is layered and has no circles (issue 22).

Every module of ``workbench`` is read with :mod:`ast` (never imported), and every import of a
workbench module counts, inside functions too; only imports under ``if TYPE_CHECKING:`` are left
out, since they never run. A module may import from its own layer or a lower one (:data:`LAYERS`,
written once here, mirrors DESIGN.md's "package as it stands, lower layers first" block), and no two
modules may import each other, directly or round a longer circle.

An edge the test cannot yet forbid is listed in :data:`KNOWN`, with the reason and the issue that
removes it; the test also fails when a listed edge is gone, so the list only shrinks.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

import workbench

PACKAGE = Path(workbench.__file__).parent

LAYERS: tuple[tuple[str, ...], ...] = (
    # leaves: error types, array helpers, atomic writes, run records, devices, the bootstrap,
    # named random streams; `workbench` is the package's own __init__ (its lazy names resolve to
    # their modules)
    ("workbench", "errors", "arrays", "codec", "files", "provenance", "records", "devices"),
    ("stats", "seeds"),
    ("cache", "claims", "criteria"),  # keyed unit caches; claims as data; missed criteria
    # Presentation, right above the leaves: DESIGN's block lists figures/ above geometry, but
    # every layer's results draw (figure()) and show (display) themselves, and figures/ and
    # display/ import only leaves, so they sit here (DESIGN's block should say so).
    ("figures", "display"),
    ("sites", "hooking"),  # hooks/*.toml -> resolved sites; hooks as context managers
    # The one trainer imports only leaves (it trains any torch module), so it sits below models/,
    # whose embedded tiny-lm trains itself through it (DESIGN's block lists train/ with the
    # readouts; docs/architecture.md says why it moved).
    ("train",),
    ("models",),  # load_model, Subject, minilm, tiny-lm
    ("capturing", "store", "inputs", "backends", "textcache"),  # capture(), the stores
    ("geometry", "lens", "probes", "interventions"),  # metrics, readouts, edits
    ("explore",),  # anywidget explorers over lenses, patching and activations
    ("analyses",),  # one package per study
    ("runner",),  # papermill runs, sweeps, replication, backends
    ("cli", "doctor"),  # the `workbench` command, thin over the above
)

KNOWN: dict[tuple[str, str], str] = {}


def _modules() -> dict[str, Path]:
    mods = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        mods[".".join(parts)] = path
    return mods


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


BY_NAME = ("import_module", "__import__")
"""Calls that import a module named by a value (``importlib.import_module(name)``)."""


def _constant_dicts(tree: ast.Module) -> dict[str, list[str]]:
    """Module-level ``NAME = {key: "module", ...}`` dict literals: their string values."""
    found: dict[str, list[str]] = {}
    for node in tree.body:
        target, value = None, None
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign):
            target, value = node.target, node.value
        if isinstance(target, ast.Name) and isinstance(value, ast.Dict):
            strings = [
                v.value
                for v in value.values
                if isinstance(v, ast.Constant) and isinstance(v.value, str)
            ]
            if len(strings) == len(value.values):
                found[target.id] = strings
    return found


def _by_name(call: ast.Call, dicts: dict[str, list[str]]) -> list[str] | None:
    """The modules an import-by-name call can import, or ``None`` when they cannot be known.

    A string literal names one; ``D[key]`` over a module-level dict literal of module names
    names each of its values; an f-string that starts with ``workbench`` (a module of the
    package, picked by a computed name) is unknowable. A plain variable is taken for an optional
    third-party package (``backends.require``), which no layer rule concerns.
    """
    func = call.func
    called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
    if called not in BY_NAME or not call.args:
        return []
    arg = call.args[0]
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        return [arg.value]
    if isinstance(arg, ast.Subscript) and isinstance(arg.value, ast.Name):
        return dicts.get(arg.value.id)
    if isinstance(arg, ast.JoinedStr):
        head = arg.values[0] if arg.values else None
        if isinstance(head, ast.Constant) and str(head.value).startswith("workbench"):
            return None
    return []


class ImportByName(AssertionError):
    """An import of a module whose name the walk cannot know (an f-string, a computed name)."""


def _imports(name: str, path: Path, mods: dict[str, Path]) -> set[str]:
    """The workbench modules ``name`` imports, anywhere outside ``if TYPE_CHECKING:``.

    Imports made by name (``importlib.import_module``) count too; one whose module cannot be
    read off the code raises :class:`ImportByName`.
    """
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()
    tree = ast.parse(path.read_text(), filename=str(path))
    dicts = _constant_dicts(tree)

    def add_from(module: str, names: list[str]) -> None:
        for alias in names:
            sub = f"{module}.{alias}"
            if sub in mods:
                out.add(sub)
            elif module == "workbench" and alias in workbench._LAZY:
                out.add(workbench._LAZY[alias])
            else:
                out.add(module)

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child):
                for stmt in child.orelse:
                    visit_one(stmt)
            else:
                visit_one(child)

    def visit_one(node: ast.AST) -> None:
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.split(".")[0] == "workbench")
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            if module.split(".")[0] == "workbench":
                add_from(module, [a.name for a in node.names])
        elif isinstance(node, ast.Call) and name != "workbench":
            # (the package root's lazy names are attributed to the modules that import them)
            named = _by_name(node, dicts)
            if named is None:
                raise ImportByName(
                    f"{path}:{node.lineno}: a module imported by a name the code does not spell "
                    "out; import it explicitly (or from a dict literal of module names)"
                )
            out.update(m for m in named if m.split(".")[0] == "workbench")
        visit(node)

    visit(tree)
    out.discard(name)
    return out


def _graph() -> dict[str, set[str]]:
    mods = _modules()
    return {name: _imports(name, path, mods) for name, path in mods.items()}


def _layer(module: str) -> int:
    top = module.split(".")[1] if "." in module else module
    for index, names in enumerate(LAYERS):
        if top in names:
            return index
    raise AssertionError(f"{module}: add {top!r} to LAYERS here and to DESIGN.md's layer block")


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    return _graph()


def test_the_walk_sees_function_level_imports_and_skips_type_checking(tmp_path: Path) -> None:
    src = tmp_path / "mod.py"
    src.write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from workbench.runner import run\n"
        "def f():\n    from workbench.errors import InputError\n"
        "    from workbench import load_model\n"
    )
    mods = {"workbench.errors": src, "workbench.x.mod": src}
    assert _imports("workbench.x.mod", src, mods) == {"workbench.errors", "workbench.models"}


def test_the_walk_sees_imports_made_by_name(tmp_path: Path) -> None:
    src = tmp_path / "mod.py"
    src.write_text(
        "import importlib\n"
        "_MODS = {'a': 'workbench.runner', 'b': 'workbench.errors'}\n"
        "def f(name):\n"
        "    importlib.import_module('workbench.models')\n"
        "    return importlib.import_module(_MODS[name])\n"
    )
    mods = {"workbench.x.mod": src}
    assert _imports("workbench.x.mod", src, mods) == {
        "workbench.models",
        "workbench.runner",
        "workbench.errors",
    }
    src.write_text("import importlib\ndef f(n):\n    importlib.import_module(f'workbench.{n}')\n")
    with pytest.raises(ImportByName, match=r"mod\.py:3"):
        _imports("workbench.x.mod", src, mods)


def test_every_module_has_a_layer(graph: dict[str, set[str]]) -> None:
    for module in graph:
        _layer(module)


def test_no_upward_import(graph: dict[str, set[str]]) -> None:
    upward = sorted(
        f"{src} (layer {_layer(src)}) imports {dst} (layer {_layer(dst)})"
        for src, targets in graph.items()
        for dst in targets
        if _layer(dst) > _layer(src) and (src, dst) not in KNOWN
    )
    assert not upward, "upward imports:\n" + "\n".join(upward)


def test_no_import_circle(graph: dict[str, set[str]]) -> None:
    known = defaultdict(set)
    for src, dst in KNOWN:
        known[src].add(dst)
    pruned = {src: targets - known[src] for src, targets in graph.items()}
    circles = _circles(pruned)
    assert not circles, "import circles:\n" + "\n".join(" <-> ".join(c) for c in circles)


def test_known_exceptions_still_exist(graph: dict[str, set[str]]) -> None:
    gone = [f"{src} -> {dst}" for src, dst in KNOWN if dst not in graph.get(src, ())]
    assert not gone, "remove from KNOWN (fixed): " + ", ".join(gone)
