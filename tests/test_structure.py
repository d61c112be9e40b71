"""The package's structure: no import cycles among its modules (read from the source, not by importing it)."""

from __future__ import annotations

import ast
from pathlib import Path

SOURCE = Path(__file__).resolve().parent.parent / "src" / "iotable"


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _module_name(path: Path) -> str:
    """A source file's dotted name below ``iotable`` (``graph.nodes``; ``graph`` for its ``__init__``; ``""``
    for the package itself)."""
    parts = list(path.relative_to(SOURCE).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _with_packages(name: str) -> set[str]:
    """A module and the sub-packages above it that importing it runs (``a.b.c``: ``a.b.c``, ``a.b``, ``a``);
    the root package, whose ``__init__`` only re-exports, is not counted."""
    parts = name.split(".")
    return {".".join(parts[: k + 1]) for k in range(len(parts))}


def _imports(tree: ast.AST, modules: set[str], name: str = "", package: bool = False) -> set[str]:
    """The package modules a module's source imports, at any depth (inside functions too), except under
    ``if TYPE_CHECKING:``; importing a module counts the ``__init__`` of every sub-package above it but those
    that hold the importing module."""
    here = name.split(".") if name else []
    if not package:
        here = here[:-1]
    found: set[str] = set()
    stack = list(ast.iter_child_nodes(tree))
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            stack.extend(node.orelse)
            continue
        targets: list[str] = []
        if isinstance(node, ast.ImportFrom) and node.level:
            base = here[: len(here) - (node.level - 1)] if node.level > 1 else here
            targets.append(".".join([*base, *([node.module] if node.module else [])]))
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "iotable":
            targets.append(node.module.partition(".")[2])
        elif isinstance(node, ast.Import):
            targets.extend(a.name.partition(".")[2] for a in node.names if a.name.startswith("iotable."))
        if isinstance(node, ast.ImportFrom) and targets:
            # ``from pkg import mod`` imports the module ``pkg.mod``
            targets.extend(f"{targets[0]}.{a.name}".strip(".") for a in node.names)
        for target in targets:
            if target in modules:
                found.update(_with_packages(target) if target else {target})
        stack.extend(ast.iter_child_nodes(node))
    # the packages that hold the module itself are being imported already when its imports run
    return {m for m in found & modules if not (m == "" or (name + ".").startswith(m + "."))}


def import_graph() -> dict[str, set[str]]:
    """Each module of the package (dotted, below ``iotable``) and the package modules it imports."""
    paths = {_module_name(p): p for p in SOURCE.rglob("*.py")}
    modules = set(paths)
    return {
        name: _imports(ast.parse(p.read_text(encoding="utf-8")), modules, name, p.name == "__init__.py") - {name}
        for name, p in paths.items()
    }


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def test_the_cycle_finder_finds_cycles() -> None:
    """A two-module cycle and a three-module one are found; a chain is not a cycle."""
    graph = {"a": {"b"}, "b": {"a"}, "c": {"d"}, "d": {"e"}, "e": {"c"}, "f": {"a"}}
    assert cycles(graph) == [["a", "b"], ["c", "d", "e"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_imports_inside_functions_count_and_type_checking_ones_do_not() -> None:
    """An import inside a function is an import; one under ``if TYPE_CHECKING:`` is not."""
    source = (
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .b import X\n"
        "def f():\n    from .c import Y\n    return Y\n"
    )
    assert _imports(ast.parse(source), {"b", "c"}) == {"c"}


def test_importing_a_module_counts_the_packages_above_it() -> None:
    """``from ..graph.nodes import X`` in ``hdl.netlist`` imports ``graph.nodes`` and the ``graph`` package, not its own."""
    source = "from ..graph.nodes import X\nfrom . import table\n"
    modules = {"graph", "graph.nodes", "hdl", "hdl.netlist", "hdl.table"}
    assert _imports(ast.parse(source), modules, "hdl.netlist") == {"graph", "graph.nodes", "hdl.table"}


def test_no_import_cycles() -> None:
    """No module imports, directly or through others, a module that imports it."""
    graph = import_graph()
    assert {"graph.graph", "runtime", "network.network", "graph.interpret", "front.trace", "hdl"} <= set(
        graph
    )  # the source was found
    assert cycles(graph) == []
