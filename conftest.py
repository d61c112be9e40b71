"""The doctests of the package's modules (pytest collects them from src/iotable): the names their examples use
without importing them, and the modules whose examples need an optional tool."""

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


@pytest.fixture(autouse=True)
def _doctest_names(doctest_namespace: dict) -> None:
    doctest_namespace.update({"torch": torch, "np": __import__("numpy"), "iotable": iotable})
    doctest_namespace.update({name: getattr(iotable, name) for name in iotable.__all__})
