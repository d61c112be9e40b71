"""The package's structure, read from the source (not by importing it): no import cycles among its modules, no
module over about 600 lines, no private name imported across sub-packages, and the core never importing the
cost or hardware layers."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

SOURCE = Path(__file__).resolve().parent.parent / "src" / "iotable"

#: The longest a module may be: past it, a module holds more than one concept.
MAX_LINES = 620

#: The sub-packages of the core (trace and plan, tabulate, graph and node kinds, runtime, network, bundle):
#: none of them imports the layers above it.
CORE = ("_util", "front", "tabulate", "graph", "nodekinds", "runtime", "network", "bundle")
#: The layers above the core: cost (LUT mapping) and hardware.
ABOVE_CORE = ("synth", "hdl")


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


def _unit(name: str) -> str:
    """What a module belongs to: its sub-package (``graph`` for ``graph.nodes``), or itself at the top."""
    return name.split(".")[0]


def _cross_imports() -> list[tuple[str, str, str]]:
    """``(module, imported module, imported name)`` for every ``from X import name`` whose X lies in another
    sub-package than the importing module's (inside functions too, ``TYPE_CHECKING`` ones too)."""
    found = []
    for path in SOURCE.rglob("*.py"):
        name = _module_name(path)
        here = name.split(".") if name else []
        if path.name != "__init__.py":
            here = here[:-1]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.ImportFrom) or not node.level:
                continue
            base = here[: len(here) - (node.level - 1)] if node.level > 1 else here
            target = ".".join([*base, *([node.module] if node.module else [])])
            for alias in node.names:
                full = f"{target}.{alias.name}".strip(".")
                module = full if (SOURCE / (full.replace(".", "/") + ".py")).exists() else target
                if name and _unit(module or alias.name) != _unit(name):
                    found.append((name, module, alias.name))
    return found


def test_no_module_is_longer_than_the_limit() -> None:
    """Every module of the package has at most MAX_LINES lines."""
    lengths = {_module_name(p): len(p.read_text(encoding="utf-8").splitlines()) for p in SOURCE.rglob("*.py")}
    assert {name: n for name, n in lengths.items() if n > MAX_LINES} == {}


def test_no_private_name_crosses_a_sub_package() -> None:
    """An import from another sub-package names neither a private name nor a private module (``_util``, the
    helpers every stage shares, and ``_version`` excepted)."""
    shared = {"_util", "_version", "__version__"}
    private = [
        (name, module, imported)
        for name, module, imported in _cross_imports()
        if (imported.startswith("_") and imported not in shared)
        or any(part.startswith("_") and part not in shared for part in module.split("."))
    ]
    assert private == []


def test_the_cross_import_finder_finds_private_names() -> None:
    """The finder reports a private name imported from another sub-package, and not one from its own."""
    found = _cross_imports()
    assert all(_unit(module or name) != _unit(name) for name, module, _ in found if module)
    assert any(module == "graph.nodes" for _, module, _ in found)  # the graph records are used across the package


def test_the_core_does_not_import_cost_or_hardware() -> None:
    """No module of the core imports iotable.synth or iotable.hdl, not even inside a function."""
    graph = import_graph()
    wrong = {
        name: sorted(m for m in imported if _unit(m) in ABOVE_CORE)
        for name, imported in graph.items()
        if _unit(name) in CORE and any(_unit(m) in ABOVE_CORE for m in imported)
    }
    assert wrong == {}


#: What each part of the package may import (besides itself), the layering docs/architecture.md describes: the
#: shared modules at the bottom, then the front end, tabulation and the graph, the node kinds and the runtime,
#: the network and the bundle, and above the core the cost and hardware layers, the command line and the
#: package's own ``__init__`` (the public facade, which re-exports every layer).
SHARED = {
    "_util",
    "_version",
    "errors",
    "domain",
    "bits",
    "table",
    "lutcount",
    "subexpressions",
    "lutnet",
    "nn",
    "brevitas",
    "torchao",
    "packages",
}
#: The front-end-neutral vocabulary of layers and units, which every part may use and no front end owns.
NEUTRAL = {"layout", "units", "layerplan"}
#: The parts that stand without a front end: a second front end (or none) builds on them unchanged.
FRONT_FREE = ("graph", "runtime", "bundle", "hdl", "synth", "nodekinds", "onnxin")
MAY_IMPORT = {
    "errors": set(),
    "_version": set(),
    "_util": {"errors"},
    "domain": {"errors"},
    "bits": {"domain"},
    "lutcount": {"errors"},
    "subexpressions": {"lutcount"},
    "table": {"_util", "domain", "errors"},
    "lutnet": {"bits", "errors", "table"},
    "brevitas": {"_util", "domain", "errors"},
    "torchao": {"domain", "errors"},
    "packages": {"errors"},
    "nn": {"brevitas", "domain", "torchao"},
    "layout": {"_util", "errors"},
    "units": {"domain", "errors", "layout"},
    "layerplan": {"_util", "bits", "domain", "layout", "lutcount", "units"},
    "pla": SHARED,
    "front": SHARED | NEUTRAL,
    "kinds": SHARED | NEUTRAL | {"front"},
    "tabulate": SHARED | NEUTRAL | {"front", "graph"},
    "graph": SHARED | NEUTRAL,
    "runtime": SHARED | NEUTRAL | {"graph"},
    "nodekinds": SHARED | NEUTRAL | {"graph", "runtime"},
    "network": SHARED | NEUTRAL | {"front", "tabulate", "graph", "nodekinds", "runtime"},
    "bundle": SHARED | NEUTRAL | {"tabulate", "graph", "runtime", "network"},
    "synth": SHARED | NEUTRAL | {"graph", "nodekinds", "network"},
    "hdl": SHARED | NEUTRAL | {"graph", "network", "synth"},
    "onnxin": SHARED | NEUTRAL | {"graph", "nodekinds", "runtime", "tabulate", "network"},
    "onnxout": SHARED | NEUTRAL | {"graph", "runtime", "network"},
    "sweep": SHARED | NEUTRAL | {"front", "graph", "network", "bundle", "synth", "hdl"},
    "cli": SHARED | {"bundle", "network", "pla", "synth", "hdl", "onnxout", "sweep"},
    "__main__": {"cli"},
}


def _layer_violations(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """``(module, imported module)`` for every import MAY_IMPORT does not allow."""
    return sorted(
        (name, imported)
        for name, imports in graph.items()
        if name
        for imported in imports
        if _unit(imported) != _unit(name) and _unit(imported) not in MAY_IMPORT.get(_unit(name), set())
    )


def test_every_part_imports_only_the_layers_below_it() -> None:
    """Each sub-package and top-level module imports only what MAY_IMPORT (docs/architecture.md) allows."""
    graph = import_graph()
    parts = {_unit(name) for name in graph if name}
    assert parts <= set(MAY_IMPORT), f"add {sorted(parts - set(MAY_IMPORT))} to MAY_IMPORT and the docs"
    assert _layer_violations(graph) == []


def _front_imports(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """``(module, imported module)`` for every module of the FRONT_FREE parts that imports the torch front end."""
    return sorted(
        (name, imported)
        for name, imports in graph.items()
        if _unit(name) in FRONT_FREE
        for imported in imports
        if _unit(imported) == "front"
    )


def test_the_graph_and_what_reads_it_import_no_front_end() -> None:
    """No module of graph, runtime, bundle, hdl, synth, nodekinds or the QONNX front end imports iotable.front."""
    assert _front_imports(import_graph()) == []


def test_a_front_end_import_is_found() -> None:
    """A graph or bundle module importing the torch front end is reported; the network doing so is not."""
    graph = {
        "graph.nodes": {"front.plan", "units"},
        "bundle._layercodec": {"front.spec"},
        "network.builder": {"front.plan"},
    }
    assert _front_imports(graph) == [("bundle._layercodec", "front.spec"), ("graph.nodes", "front.plan")]


#: Names that moved out of the torch front end: their neutral home, and the front-end modules that still give them.
MOVED = {
    "units": {"Unit": ("front.plan", "front.layerplan"), "Geometry": ("front.plan", "front.layerplan"),
              "DEFAULT_MAX_ROWS": ("front.plan",), "Spec": ("front.spec", "front.metadata")},
    "layout": {"Layout": ("front.spec", "front.layout"), "PaddingMode": ("front.spec", "front.layout")},
    "layerplan": {"LayerPlan": ("front.plan", "front.layerplan"), "frame_strides": ("front.layerplan",)},
}  # fmt: skip


def test_moved_names_still_import_from_the_front_end() -> None:
    """Each name the layer vocabulary took from the torch front end is the same object under its old import paths,
    so user code keeps working."""
    for home, names in MOVED.items():
        neutral = importlib.import_module(f"iotable.{home}")
        for name, old_homes in names.items():
            for old in old_homes:
                assert getattr(importlib.import_module(f"iotable.{old}"), name) is getattr(neutral, name), (old, name)


#: The most ``NodeKind.<name>`` uses allowed outside :mod:`iotable.nodekinds` (and :mod:`iotable.graph.kind`,
#: which defines the class): built-in kinds are described by their registered definitions, not named.
MOST_KIND_NAMES = 10
_KIND_NAME = re.compile(r"NodeKind\.\w")


def _kind_names(sources: dict[str, str]) -> list[str]:
    """``module:line`` of every ``NodeKind.<name>`` outside the kinds' own package and the class's module."""
    return [
        f"{name}:{number}"
        for name, text in sorted(sources.items())
        if not (name == "nodekinds" or name.startswith("nodekinds.") or name == "graph.kind")
        for number, line in enumerate(text.splitlines(), 1)
        for _ in _KIND_NAME.findall(line)
    ]


def test_built_in_kinds_are_seldom_named_outside_their_package() -> None:
    """At most MOST_KIND_NAMES ``NodeKind.<name>`` uses (code, comments and docstrings) lie outside nodekinds."""
    sources = {_module_name(p): p.read_text(encoding="utf-8") for p in SOURCE.rglob("*.py")}
    found = _kind_names(sources)
    assert len(found) <= MOST_KIND_NAMES, (
        f"{len(found)} NodeKind.<name> uses outside iotable.nodekinds (at most {MOST_KIND_NAMES}): {found}; "
        "ask the kind's definition (node.kind.tabulated, definition(node.kind)...) instead of naming the kind"
    )


def test_a_kind_named_outside_its_package_is_counted() -> None:
    """Branches on NodeKind.TABLE in the runtime are counted; the same text in nodekinds or graph.kind is not."""
    branch = "if node.kind is NodeKind.TABLE or node.kind is NodeKind.WINDOW:\n    pass\n"
    sources = {"runtime.runtime": branch, "nodekinds.table": branch, "graph.kind": branch, "hdl.writer": "x = 1\n"}
    assert _kind_names(sources) == ["runtime.runtime:1", "runtime.runtime:1"]


def test_a_layer_importing_upwards_is_found() -> None:
    """The runtime importing the network, or the graph importing hardware, is reported; the reverse is not."""
    graph = {"runtime.runtime": {"network.network", "graph.graph"}, "network.network": {"runtime.runtime"}}
    assert _layer_violations(graph) == [("runtime.runtime", "network.network")]
    assert _layer_violations({"graph.graph": {"hdl.netlist"}}) == [("graph.graph", "hdl.netlist")]
