"""The error classes: one base, six groups by what went wrong, each class in exactly one group, documented, and
still derived from the builtin exceptions callers catch."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest
import torch

import iotable
import iotable.errors
from iotable.errors import GROUPS, IOTableError, IOTableWarning

API_MD = Path(__file__).resolve().parent.parent / "docs" / "api.md"

ERRORS = [
    obj
    for name in iotable.errors.__all__
    if inspect.isclass(obj := getattr(iotable.errors, name)) and issubclass(obj, BaseException)
    if obj is not IOTableWarning
]
SPECIFIC = [cls for cls in ERRORS if cls is not IOTableError and cls not in GROUPS]

# The builtin exceptions each class derived from before the groups existed: ``except ValueError`` (and the
# others) written against those classes must keep catching them.
BUILTIN_BASES: dict[str, tuple[type[BaseException], ...]] = {
    "OptionError": (ValueError,),
    "ModelError": (ValueError,),
    "InputError": (ValueError,),
    "CommandError": (ValueError,),
    "HDLError": (ValueError,),
    "SynthError": (ValueError,),
    "ObserveError": (ValueError,),
    "LayerNotFoundError": (KeyError,),
    "SpecError": (ValueError,),
    "SpecMismatchError": (ValueError,),
    "SpecOptionError": (ValueError,),
    "NotDecomposedError": (ValueError, TypeError),
    "TableTooLargeError": (ValueError,),
    "EnumerationError": (RuntimeError,),
    "UnsupportedFakeQuantizeError": (ValueError,),
    "UnsupportedQuantizerError": (ValueError,),
    "GraphError": (ValueError,),
    "NodeExecutionError": (RuntimeError,),
    "DomainError": (ValueError,),
    "TableError": (ValueError,),
    "MissingRowError": (LookupError,),
    "BundleError": (ValueError,),
    "CacheError": (OSError,),
    "PLAError": (ValueError,),
    "ONNXFileError": (ValueError,),
    "BrevitasNotInstalledError": (ImportError,),
    "ONNXNotInstalledError": (ImportError,),
    "GraphvizNotInstalledError": (ImportError,),
    "MatplotlibNotInstalledError": (ImportError,),
    "HDLToolError": (RuntimeError,),
    "SimulatorNotInstalledError": (RuntimeError,),
    "ABCError": (RuntimeError,),
    "ABCNotInstalledError": (RuntimeError,),
    "NetlistMismatchError": (RuntimeError,),
    # groups new with the grouping, which nothing raised before: no builtin base to keep
    "FileError": (),
    "ToolError": (),
    "MismatchError": (),
}


def test_the_module_lists_every_error_class_it_defines() -> None:
    """Every exception class defined in ``iotable.errors`` is in its ``__all__``."""
    defined = {
        name
        for name, obj in vars(iotable.errors).items()
        if inspect.isclass(obj) and issubclass(obj, BaseException) and obj.__module__ == "iotable.errors"
    }
    assert defined <= set(iotable.errors.__all__)


@pytest.mark.parametrize("cls", ERRORS, ids=lambda c: c.__name__)
def test_every_error_is_an_iotable_error(cls: type[BaseException]) -> None:
    """Each error class derives from ``IOTableError``, so ``except IOTableError`` catches everything raised on purpose."""
    assert issubclass(cls, IOTableError)


#: The classes in two groups: a mistake of one group that has always raised a class of another, kept as a
#: subclass of both so that either ``except`` clause catches it.
BRIDGES = {"SpecOptionError": ["OptionError", "ModelError"]}


@pytest.mark.parametrize("cls", SPECIFIC, ids=lambda c: c.__name__)
def test_every_error_belongs_to_exactly_one_group(cls: type[BaseException]) -> None:
    """Each specific error class derives from exactly one of the groups (the bridges from the two they join)."""
    groups = [group.__name__ for group in GROUPS if issubclass(cls, group)]
    assert groups == BRIDGES.get(cls.__name__, groups[:1]) and groups, f"{cls.__name__} is in the groups {groups}"


def test_groups_are_disjoint_and_exported_at_the_top_level() -> None:
    """No group derives from another, each derives from ``IOTableError`` directly, and ``iotable`` exports each."""
    for group in GROUPS:
        assert group.__bases__[0] is IOTableError
        assert [other for other in GROUPS if other is not group and issubclass(group, other)] == []
        assert getattr(iotable, group.__name__) is group
        assert group.__name__ in iotable.__all__


@pytest.mark.parametrize("cls", SPECIFIC + list(GROUPS), ids=lambda c: c.__name__)
def test_every_error_keeps_its_builtin_bases(cls: type[BaseException]) -> None:
    """Each error still derives from the builtin exceptions it derived from before the groups existed."""
    assert cls.__name__ in BUILTIN_BASES, f"{cls.__name__}: add its builtin bases to BUILTIN_BASES"
    for base in BUILTIN_BASES[cls.__name__]:
        assert issubclass(cls, base), f"{cls.__name__} no longer derives from {base.__name__}"


@pytest.mark.parametrize("cls", [*ERRORS, IOTableWarning], ids=lambda c: c.__name__)
def test_every_error_is_documented(cls: type[BaseException]) -> None:
    """Each error class has a docstring of its own and a heading in docs/api.md under ``iotable.errors``."""
    doc = cls.__dict__.get("__doc__")
    assert isinstance(doc, str) and doc.strip(), f"{cls.__name__} has no docstring"
    assert f"#### `iotable.errors.{cls.__name__}`" in API_MD.read_text(encoding="utf-8")


def test_a_group_catches_its_members() -> None:
    """``except ToolError`` catches a missing simulator, and ``except ValueError`` a bad option, as before."""
    with pytest.raises(iotable.ToolError):
        raise iotable.errors.SimulatorNotInstalledError("iverilog is not installed")
    with pytest.raises(ValueError, match="bad k"):
        raise iotable.errors.SynthError("bad k")
    with pytest.raises(iotable.OptionError):
        raise iotable.errors.SynthError("bad k")


def test_a_bad_option_is_an_option_error() -> None:
    """A surprising layout string, a real bad argument, raises an ``OptionError`` that lists the accepted values."""
    with pytest.raises(iotable.OptionError, match="layout"):
        iotable.decompose(layout="sideways")


def _model() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(4, 3), iotable.nn.Quantize(2))


BAD_OPTIONS = {
    "decompose groups": lambda: iotable.decompose(torch.nn.Linear(4, 3), groups=0),
    "decompose fan_in": lambda: iotable.decompose(torch.nn.Linear(4, 3), fan_in=[[0], []]),
    "plan max_rows": lambda: iotable.plan(_model(), input_domain=iotable.Domain.uniform(2), max_rows=0),
    "precompute memory_budget": lambda: iotable.precompute(
        _model(), input_domain=iotable.Domain.uniform(2), memory_budget=0
    ),
    "precompute check": lambda: iotable.precompute(_model(), input_domain=iotable.Domain.uniform(2), check="yes"),
    "layout": lambda: iotable.decompose(torch.nn.Linear(4, 3), layout="sideways"),
    "lut_estimate k": lambda: iotable.synth.lut_estimate(6, 2, k=1),
    "hdl style": lambda: iotable.hdl.export(_NET, "out", style="diagonal"),
    "restrict min_count": lambda: iotable.restrict(_NET, iotable.observe(_NET, torch.zeros(2, 4)), min_count=0),
}
_NET = iotable.precompute(_model().eval(), input_domain=iotable.Domain.uniform(2), example_input=torch.zeros(1, 4))


@pytest.mark.parametrize("call", BAD_OPTIONS.values(), ids=BAD_OPTIONS.keys())
def test_a_bad_option_is_an_option_error_wherever_it_is_caught(call, tmp_path, monkeypatch) -> None:
    """A bad argument raises an ``OptionError`` whichever stage checks it (plan, precompute, cost, hardware,
    observation), and still a ``ValueError``."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(iotable.OptionError) as caught:
        call()
    assert isinstance(caught.value, ValueError)
