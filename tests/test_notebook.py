"""The example notebook runs headless in a Jupyter kernel (nbclient) and shows what it promises."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from .optional import graphviz_available, require, require_graphviz
from .test_display import StrictHTML

NOTEBOOK = Path(__file__).resolve().parent.parent / "examples" / "quickstart.ipynb"


@pytest.fixture(scope="module")
def executed() -> Any:
    """The quickstart notebook after a run in a fresh kernel, from the examples folder as Jupyter would."""
    for module in ("nbclient", "nbformat", "ipykernel"):
        require(module, install='pip install -e ".[test]"')
    import nbformat
    from nbclient import NotebookClient

    notebook = nbformat.read(NOTEBOOK, as_version=4)
    # One extra cell, in memory only, says which interpreter ran the kernel.
    notebook.cells.append(nbformat.v4.new_code_cell("import sys; print(sys.executable)"))
    client = NotebookClient(
        notebook,
        timeout=600,
        startup_timeout=120,
        kernel_name="python3",
        resources={"metadata": {"path": str(NOTEBOOK.parent)}},
    )
    client.execute()
    return notebook


def outputs_of(notebook: Any, start: str) -> list[Any]:
    """The outputs of the one code cell whose source starts with ``start``."""
    (cell,) = [c for c in notebook.cells if c.cell_type == "code" and c.source.startswith(start)]
    return cell.outputs


def test_committed_notebook_has_no_outputs() -> None:
    """The notebook in the repository is stripped: no outputs and no execution counts."""
    notebook = json.loads(NOTEBOOK.read_text(encoding="utf-8"))
    code = [c for c in notebook["cells"] if c["cell_type"] == "code"]
    assert len(code) >= 5
    assert all(c["outputs"] == [] and c["execution_count"] is None for c in code)


def test_notebook_runs_in_this_interpreter_without_warnings(executed: Any) -> None:
    """Every cell runs in a kernel of this interpreter, and nothing is written to stderr (no warnings, no bars)."""
    streams = [o for c in executed.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "stream"]
    assert [o.text for o in streams if o.name == "stderr"] == []
    # the last cell's stdout, whole: a kernel may send a print in more than one stream message
    last = executed.cells[-1]
    printed = "".join(o.text for o in last.outputs if o.output_type == "stream" and o.name == "stdout")
    assert os.path.samefile(printed.strip(), sys.executable)


def test_network_cell_shows_the_html_table(executed: Any) -> None:
    """The cell that precomputes shows the network as an HTML table with a row per layer, and its repr as text."""
    (result,) = [o for o in outputs_of(executed, "net = iotable.precompute") if o.output_type == "execute_result"]
    assert result.data["text/plain"].startswith("TableNetwork(2 table layers, 74 tables, 303,104 rows;")
    page = StrictHTML(result.data["text/html"])
    assert [row[:2] for row in page.rows[1:]] == [
        ["input", "input"],
        ["table", "fc1"],
        ["table", "fc_out"],
        ["output", "output"],
    ]
    header = page.rows[0]
    assert page.rows[2][header.index("method")] == "linear fast path"
    assert int(page.rows[2][header.index("LUT6 (estimate)")].replace(",", "")) > 0  # from the plan


def test_network_cell_shows_the_picture(executed: Any) -> None:
    """With Graphviz installed, the network's HTML ends with the graph as inline SVG."""
    require_graphviz()
    (result,) = [o for o in outputs_of(executed, "net = iotable.precompute") if o.output_type == "execute_result"]
    html = result.data["text/html"]
    assert html.count("<svg") == 1 and "<title>fc_out</title>" in html


def test_other_cells_show_text_layer_and_report(executed: Any) -> None:
    """The text summary, one layer's HTML view and the verify report (every test digit agrees) are all there."""
    text = "".join(o.text for o in outputs_of(executed, "print(repr(net))"))
    assert "kind    name    shape" in text and "74 tables, 303104 rows" in text
    (layer,) = outputs_of(executed, 'net["fc_out"]')
    assert "LayerTables(&#x27;fc_out&#x27;, 10 tables" in layer.data["text/html"]
    report = [o for o in outputs_of(executed, "print(f") if o.output_type == "execute_result"]
    assert "VerifyReport: OK, 360/360 samples agree bit for bit" in report[0].data["text/html"]
    saved = "".join(o.text for o in outputs_of(executed, "import pathlib"))
    assert saved.startswith("digits.bundle -> TableNetwork(2 table layers")
    if graphviz_available():
        assert "<svg" not in layer.data["text/html"]  # a layer alone has no graph to draw
