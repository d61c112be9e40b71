"""The table cache keys class-level attributes and the plain globals a method reads by value, every time."""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

from iotable import Domain, precompute
from iotable.errors import CacheError
from iotable.front import cachekey
from iotable.nn import Quantize

U2 = Domain.uniform(2, scale=0.5)
EXAMPLE = torch.zeros(1, 3)

#: Read by ``Global.forward`` as a module-level global (edited by the tests, then restored).
GLOBAL_GAIN = {"k": 1.0}
GLOBAL_SCALE = torch.tensor([1.0, 1.0, 1.0])


def classes() -> dict[str, type[nn.Module]]:
    """Fresh classes (edits to one test's class never reach another's) whose gain lives at class level."""

    class Weighted(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = nn.Parameter(torch.tensor([1.0, 1.0, 1.0]))

    class Conf(Weighted):
        CONF = {"k": 1.0}  # noqa: RUF012 - the class-level data under test

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x * self.w * self.CONF["k"]

    class Tensor(Weighted):
        T = torch.tensor([0.7, -0.4, 0.3])

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x * self.T

    class Array(Weighted):
        ARR = np.array([0.7, -0.4, 0.3], dtype=np.float32)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x * torch.from_numpy(self.ARR)

    class Global(Weighted):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x * self.w * GLOBAL_GAIN["k"] * GLOBAL_SCALE

    return {"Conf": Conf, "Tensor": Tensor, "Array": Array, "Global": Global}


def _set_conf(cls: Any) -> None:
    cls.CONF["k"] = -1.0


def _set_tensor(cls: Any) -> None:
    cls.T = torch.tensor([-0.7, 0.4, 0.3])


def _set_array(cls: Any) -> None:
    cls.ARR[0] = -0.7


def _set_global(cls: Any) -> None:
    GLOBAL_GAIN["k"] = -1.0


def _set_global_tensor(cls: Any) -> None:
    GLOBAL_SCALE[1] = -1.0


EDITS = {
    "class-dict-item": ("Conf", _set_conf),
    "class-tensor-reassigned": ("Tensor", _set_tensor),
    "class-array-in-place": ("Array", _set_array),
    "global-dict-item": ("Global", _set_global),
    "global-tensor-in-place": ("Global", _set_global_tensor),
}


@pytest.fixture
def restored_globals() -> Any:
    """The module's globals as they were, whatever a test does to them."""
    gain, scale = dict(GLOBAL_GAIN), GLOBAL_SCALE.clone()
    yield
    GLOBAL_GAIN.update(gain)
    GLOBAL_SCALE.copy_(scale)


def model(cls: type[nn.Module]) -> nn.Sequential:
    """Quantized inputs, the class's module, a quantizer: one table layer ("1", the module itself)."""
    return nn.Sequential(Quantize(2, scale=0.5), cls(), Quantize(3, scale=0.25)).eval()


@pytest.mark.parametrize("edit", list(EDITS))
def test_a_class_or_global_edited_in_the_same_process_gives_the_new_tables(tmp_path, restored_globals, edit):
    """A class attribute or a global a method reads, edited after a first precompute, gives the edited model's
    tables from the next one (the same process, the same cache_dir)."""
    name, change = EDITS[edit]
    cls = classes()[name]
    net = model(cls)
    first = precompute(net, input_domain=U2, example_input=EXAMPLE, cache_dir=tmp_path)
    assert first.layers["1"].cached == ()
    change(cls)
    second = precompute(net, input_domain=U2, example_input=EXAMPLE, cache_dir=tmp_path)
    fresh = precompute(net, input_domain=U2, example_input=EXAMPLE)  # every row, from the edited module
    assert second.layers["1"].cached == () and second.tables == fresh.tables
    assert first.tables != fresh.tables  # the edit changes rows: a stale table would be caught


@pytest.mark.parametrize("name", ["Conf", "Tensor", "Array", "Global"])
def test_an_unchanged_class_keeps_hitting_the_cache(tmp_path, name):
    """The contrast: with nothing edited, every table of every later precompute comes from the cache."""
    net = model(classes()[name])
    first = precompute(net, input_domain=U2, example_input=EXAMPLE, cache_dir=tmp_path)
    hits = [precompute(net, input_domain=U2, example_input=EXAMPLE, cache_dir=tmp_path).layers["1"] for _ in range(3)]
    assert [len(layer.cached) for layer in hits] == [len(first.layers["1"].tables)] * 3
    assert all(layer.method == "cache" for layer in hits)


def test_a_class_attribute_that_cannot_be_keyed_is_refused_by_name(tmp_path):
    """A class-level lock is refused with the class, the attribute and the fix; without it the class is keyed."""
    cls = classes()["Conf"]
    cls.LOCK = threading.Lock()  # type: ignore[attr-defined]
    with pytest.raises(CacheError) as caught:
        precompute(model(cls), input_domain=U2, example_input=EXAMPLE, cache_dir=tmp_path)
    message = str(caught.value)
    for word in ("Conf", "attribute LOCK", "lock", "pass no cache_dir"):
        assert word in message, message
    del cls.LOCK  # type: ignore[attr-defined]
    assert precompute(model(cls), input_domain=U2, example_input=EXAMPLE, cache_dir=tmp_path).layers["1"].cached == ()


def test_a_class_key_is_computed_anew_but_the_code_of_methods_once(monkeypatch):
    """Two keys of one module read the class afresh; the bytes of a method's code are computed once."""
    cls = classes()["Conf"]
    layer = cls()
    calls: list[object] = []
    real = cachekey._code_bytes
    monkeypatch.setattr(cachekey, "_code_bytes", lambda code: calls.append(code) or real(code))
    before = cachekey.module_key(layer, layer="x")
    seen = len(calls)
    cls.CONF["k"] = 2.0
    assert cachekey.module_key(layer, layer="x") != before
    assert len(calls) == seen  # no code object keyed twice
    cls.CONF["k"] = 1.0
    assert cachekey.module_key(layer, layer="x") == before
