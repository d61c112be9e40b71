"""Progress bars: counted in table rows, ending at their total, one per model, quiet on import and off-screen.

Bars are observed through tqdm itself: the fixture records every real bar's ``n``, ``total`` and description
when it closes. Nothing here is timed.
"""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
import types
from collections import OrderedDict
from pathlib import Path

import pytest
import torch
import tqdm.std
from torch import nn

import iotable
from iotable import Domain, TableNetwork, decompose, precompute
from iotable._util import progress as _progress
from iotable.nn import Quantize
from iotable.tabulate.passes import _classes, _Packed, _passes

from .conftest import dyadic_
from .optional import require
from .test_enumerate import MaskedBlock, overlapping_fan_in

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def bars(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int, str]]:
    """``(n, total, description)`` of every bar, recorded as it closes."""
    closed: list[tuple[int, int, str]] = []
    close = tqdm.std.tqdm.close

    def recording_close(self: tqdm.std.tqdm) -> None:
        if not self.disable:  # closing twice (close, then __del__) counts once
            closed.append((self.n, self.total, self.desc))
        close(self)

    monkeypatch.setattr(tqdm.std.tqdm, "close", recording_close)
    return closed


def summary_rows(net: TableNetwork) -> int:
    """The row count the network's summary reports."""
    return int(re.search(r"^\d+ tables, (\d+) rows$", net.summary(), flags=re.MULTILINE).group(1))


def layer_rows(summary: str) -> int:
    """The row count a layer's summary reports."""
    return int(re.search(r", (\d+) row\(s\),", summary).group(1))


def mlp() -> nn.Sequential:
    """Three sparse layers through the linear fast path, one of them a large table (4 inputs x 4 bits)."""
    layers: OrderedDict[str, nn.Module] = OrderedDict()
    widths = [(8, 6, 3), (6, 5, 4), (5, 3, 2)]
    for k, (n_in, n_out, fan) in enumerate(widths):
        linear = nn.Linear(n_in, n_out)
        fan_in = [sorted({(o + j) % n_in for j in range(fan)}) for o in range(n_out)]
        layers[f"fc{k}"] = decompose(dyadic_(linear, seed=k), fan_in=fan_in)
        with torch.no_grad():
            mask = torch.zeros(n_out, n_in)
            for o, reads in enumerate(fan_in):
                mask[o, reads] = 1
            linear.weight.mul_(mask)
        layers[f"q{k}"] = Quantize(4 if k == 0 else 2, scale=0.25)
    return nn.Sequential(layers)


def test_a_model_has_one_bar_that_ends_at_the_summary_rows(bars: list) -> None:
    """A whole model shows one bar, whose final count equals its total equals the rows in the summary, in rows."""
    net = precompute(mlp(), input_domain=Domain.uniform(2), progress=True)
    assert len(bars) == 1
    n, total, desc = bars[0]
    assert n == total == summary_rows(net) == sum(t.rows for t in net.tables)
    assert desc == "fc2"  # the bar names the layer it is building


def test_the_black_box_counts_rows_in_packed_and_coloured_passes(bars: list) -> None:
    """Black-box layers, enumerated in packed passes (overlapping fan-ins) or coloured ones (tiled slots), end at the summary's rows."""
    n_in = 8
    fan_in = overlapping_fan_in(n_in, 6, 5, seed=6)
    block = decompose(MaskedBlock(n_in, fan_in), fan_in=fan_in, output_domain=Domain.uniform(2, scale=0.5))
    conv = dyadic_(nn.Conv1d(4, 4, 3, groups=4))
    cases = [
        (block, Domain.uniform(2), torch.zeros(1, n_in)),
        (conv, Domain.uniform(2, signed=True), torch.zeros(1, 4, 9)),
    ]
    for module, domain, example in cases:
        bars.clear()
        layer = precompute(module, input_domain=domain, example_input=example, progress=True, memory_budget=2**16)
        assert layer.method == "black box"
        passes = _passes(layer.plan, _classes(layer.plan), capacity=2**16, itemsize=1)
        assert any(isinstance(p, _Packed) for p in passes) == (module is block)
        assert bars == [(layer.plan.total_rows, layer.plan.total_rows, layer.name)]
        assert layer_rows(layer.summary()) == layer.plan.total_rows


@pytest.mark.parametrize("memory_budget", [2**28, 2**14], ids=["blocks", "row-segments"])
def test_the_fast_path_counts_rows_in_blocks_and_segments(bars: list, memory_budget: int) -> None:
    """The fast path counts every unit's rows, whether it builds whole blocks or streams large tables in segments."""
    net = precompute(mlp(), input_domain=Domain.uniform(2), progress=True, memory_budget=memory_budget)
    assert {layer.method for layer in net.layers.values()} == {"linear fast path"}
    assert net["fc1"].plan.units[0].rows == 2**16  # 4 inputs x 4 bits: over the small budget, built in segments
    assert len(bars) == 1 and bars[0][:2] == (summary_rows(net), summary_rows(net))


def test_cached_tables_count_too(bars: list, tmp_path: Path) -> None:
    """A rerun that loads every table from cache_dir still ends its bar at the summary's rows."""
    for _ in range(2):
        net = precompute(mlp(), input_domain=Domain.uniform(2), progress=True, cache_dir=tmp_path, reuse=False)
    assert [layer.method for layer in net.layers.values()] == ["cache"] * 3
    assert len(bars) == 2 and bars[0][:2] == bars[1][:2] == (summary_rows(net), summary_rows(net))


def test_enumerate_tables_has_a_bar_of_its_own(bars: list) -> None:
    """enumerate_tables, called on a plan directly, shows one bar over that layer's rows."""
    conv = dyadic_(nn.Conv1d(2, 2, 3, groups=2))
    layer = iotable.plan(conv, input_domain=Domain.uniform(2), example_input=torch.zeros(1, 2, 5))
    iotable.tabulate.enumerate.enumerate_tables(conv, layer, progress=True)
    assert bars == [(layer.total_rows, layer.total_rows, layer.name)]


def test_no_bar_off_screen_or_when_disabled(bars: list) -> None:
    """With progress=None off a terminal and outside a notebook, or with progress=False, no bar is made."""
    for progress in (None, False):
        precompute(mlp(), input_domain=Domain.uniform(2), progress=progress)
    assert bars == []


def fake_notebook(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make this process look like a Jupyter kernel: an IPython whose shell has a kernel."""
    shell = types.SimpleNamespace(kernel=object())
    monkeypatch.setitem(sys.modules, "IPython", types.SimpleNamespace(get_ipython=lambda: shell))


def test_notebook_detection(monkeypatch: pytest.MonkeyPatch) -> None:
    """A process is a notebook when IPython's shell has a kernel; a terminal IPython or no IPython is not."""
    monkeypatch.delitem(sys.modules, "IPython", raising=False)
    assert not _progress.in_notebook()
    monkeypatch.setitem(sys.modules, "IPython", types.SimpleNamespace(get_ipython=lambda: types.SimpleNamespace()))
    assert not _progress.in_notebook()
    fake_notebook(monkeypatch)
    assert _progress.in_notebook()


def test_a_notebook_without_ipywidgets_gets_a_text_bar_on_stdout(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], bars: list
) -> None:
    """In a notebook without widgets the default shows long work as a text bar on stdout, delayed, and nothing on stderr."""
    fake_notebook(monkeypatch)
    monkeypatch.setattr(_progress, "_widget_bar", lambda: None)
    with _progress.progress_bar(total=2 * _progress._AUTO_MIN_ROWS, desc="fc1", enabled=None) as progress:
        assert progress.bar is not None and progress.bar.delay == _progress._AUTO_DELAY
        progress.update(2 * _progress._AUTO_MIN_ROWS)
    with _progress.progress_bar(total=_progress._AUTO_MIN_ROWS - 1, desc="small", enabled=None) as progress:
        assert progress is _progress.QUIET  # short work: no bar at all
    with _progress.progress_bar(total=10, desc="asked", enabled=True) as progress:
        progress.update(10)
    out = capsys.readouterr()
    assert out.err == "" and "asked:   0%" in out.out
    assert bars == [(2 * _progress._AUTO_MIN_ROWS,) * 2 + ("fc1",), (10, 10, "asked")]


def test_a_notebook_with_ipywidgets_gets_the_widget_bar(monkeypatch: pytest.MonkeyPatch) -> None:
    """In a notebook with ipywidgets, the bar is tqdm's notebook widget."""
    require("ipywidgets", install='pip install -e ".[notebook]"')
    from tqdm.notebook import tqdm as widget  # imported with the real IPython, as in a kernel

    fake_notebook(monkeypatch)
    assert _progress._widget_bar() is widget


def run_python(code: str) -> subprocess.CompletedProcess[str]:
    """``python -c code`` in a fresh interpreter from the repository root."""
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        check=False,
    )


def test_import_prints_nothing() -> None:
    """``import iotable`` in a fresh interpreter writes nothing to stdout or stderr and imports no progress bar flavour."""
    result = run_python("""
        import sys
        import iotable
        print(sorted(m for m in sys.modules if m in ("tqdm.auto", "tqdm.notebook", "tqdm.autonotebook")))
    """)
    assert result.returncode == 0, result.stderr
    assert result.stderr == "" and result.stdout == "[]\n"


def test_a_notebook_kernel_without_ipywidgets_prints_no_warning() -> None:
    """In a process that looks like a notebook kernel and has no ipywidgets, importing and precomputing warn about nothing."""
    result = run_python("""
        import sys, types, warnings
        warnings.simplefilter("default")
        shell = types.SimpleNamespace(kernel=object())
        sys.modules["IPython"] = types.SimpleNamespace(get_ipython=lambda: shell)
        sys.modules["ipywidgets"] = None  # not installed
        import torch
        import iotable
        conv = torch.nn.Conv1d(2, 2, 3, groups=2)
        iotable.precompute(conv, input_domain=iotable.Domain.uniform(2), example_input=torch.zeros(1, 2, 5), progress=True)
    """)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    assert "Conv1d:   0%" in result.stdout  # the text bar, on stdout
