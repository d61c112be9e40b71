"""The doctests of the package's modules (pytest collects them from src/iotable): the names their examples use
without importing them, and the modules whose examples need an optional tool."""

import importlib
import importlib.util
import shutil

import pytest
import torch

import iotable

# The brevitas integration's examples need brevitas, an optional extra.
collect_ignore = [] if importlib.util.find_spec("brevitas") else ["src/iotable/brevitas.py"]
# The pictures' examples need Graphviz (the notebook extra and the dot program); tests/test_display.py says
# when it is missing, and fails under CI.
if not (importlib.util.find_spec("graphviz") and shutil.which("dot")):
    collect_ignore.append("src/iotable/graph/diagram.py")
# The LUT mapper's examples run ABC (Debian's berkeley-abc); tests/test_synth.py says when it is missing, and
# fails under CI.
if not any(shutil.which(name) for name in ("berkeley-abc", "yosys-abc", "abc")):
    collect_ignore.append("src/iotable/synth/_map.py")
# The ONNX export's example runs onnxruntime, part of the onnx extra.
if not (importlib.util.find_spec("onnx") and importlib.util.find_spec("onnxruntime")):
    collect_ignore.append("src/iotable/onnxout/__init__.py")


# Names the examples use unqualified besides ``iotable.__all__``: every name of these modules, and the few
# names that left the top level for their home module.
_MODULES = ("iotable.errors", "iotable.graph.nodes")
_NAMES = {
    "iotable.domain": ("code_dtype",),
    "iotable.front.plan": ("DEFAULT_MAX_ROWS", "Geometry", "Unit"),
    "iotable.front.spec": ("ELEMENTWISE", "PaddingMode", "has_spec"),
    "iotable.front.trace": ("LeafTracer",),
    "iotable.graph.diagram": ("Diagram",),
    "iotable.graph.interpret": ("GraphInterpreter",),
    "iotable.network.precompute": ("LayerTables", "precompute_layer", "precompute_model"),
    "iotable.pla": ("read_pla", "write_pla"),
    "iotable.synth.estimate": ("LayerEstimate",),
    "iotable.tabulate.enumerate": ("DEFAULT_MEMORY_BUDGET", "enumerate_tables"),
}


def _names() -> dict[str, object]:
    names: dict[str, object] = {"torch": torch, "np": __import__("numpy"), "iotable": iotable}
    for module_name in _MODULES:
        module = importlib.import_module(module_name)
        names.update({name: getattr(module, name) for name in module.__all__})
    for module_name, listed in _NAMES.items():
        module = importlib.import_module(module_name)
        names.update({name: getattr(module, name) for name in listed})
    names.update({name: getattr(iotable, name) for name in iotable.__all__})
    return names


@pytest.fixture(autouse=True)
def _doctest_names(doctest_namespace: dict) -> None:
    doctest_namespace.update(_names())
