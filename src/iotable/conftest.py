"""Names the docstring examples use without importing them."""

import pytest
import torch

import iotable


@pytest.fixture(autouse=True)
def _doctest_names(doctest_namespace: dict) -> None:
    doctest_namespace.update({"torch": torch, "np": __import__("numpy"), "iotable": iotable})
    doctest_namespace.update({name: getattr(iotable, name) for name in iotable.__all__})
