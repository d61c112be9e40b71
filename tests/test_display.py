"""Looking at results: short reprs, notebook HTML views, and the graph's picture (DOT, SVG through Graphviz)."""

from __future__ import annotations

import importlib.util
import math
import re
import sys
from collections import OrderedDict
from html.parser import HTMLParser
from pathlib import Path

import pytest
import torch
from benchmarks import workloads
from torch import nn

import iotable
from iotable import Domain, IOTableError, TableNetwork
from iotable.errors import GraphError, GraphvizNotInstalledError
from iotable.graph.diagram import Diagram
from iotable.graph.graph import Edge, Graph, Node, NodeKind
from iotable.graph.kind import BUILTIN_KINDS, definition
from iotable.nn import Quantize
from iotable.synth import table_lut_estimate

from .optional import graphviz_available, require, require_graphviz

REPR_LIMIT = 200


@pytest.fixture(scope="module")
def jsc_l() -> TableNetwork:
    """The LogicNets JSC-L configuration (layers 32-64-192-192-16-5, fan-in 3-5 x 3-4 bits) as a table network."""
    config = workloads.MLP_CONFIGS["jsc-l"]
    model = workloads.build_mlp(config)
    domain = workloads.input_domain_of(config)
    return iotable.precompute(model, input_domain=domain, example_input=torch.zeros(1, config.inputs))


def cnn() -> tuple[nn.Module, torch.Tensor]:
    """A small CNN with padding, a strided window, a depthwise layer, a pool and a float head on the host."""
    torch.manual_seed(0)
    model = nn.Sequential(
        OrderedDict(
            q_in=Quantize(2, signed=True, scale=0.5),
            conv1=nn.Conv2d(1, 4, 3, stride=2, padding=1),
            bn1=nn.BatchNorm2d(4),
            relu1=nn.ReLU(),
            q1=Quantize(2, scale=0.5),
            dw=nn.Conv2d(4, 4, 3, padding=1, groups=4),
            q2=Quantize(2, scale=0.5),
            pool=nn.MaxPool2d(2),
            flat=nn.Flatten(),
            fc=nn.Linear(16, 10),
        )
    ).eval()
    return model, model.q_in(torch.randn(16, 1, 8, 8))


@pytest.fixture(scope="module")
def cnn_net() -> tuple[nn.Module, TableNetwork, torch.Tensor]:
    model, x = cnn()
    net = iotable.precompute(model, input_domain=model.q_in.domain, example_input=x, host=["fc"])
    return model, net, x


def every_repr(net: TableNetwork) -> list[str]:
    objects: list[object] = [net, net.graph, *net.graph.nodes, *net.graph.edges]
    for layer in net.layers.values():
        objects += [layer, layer.plan, layer[0], layer[len(layer) - 1]]
    return [repr(o) for o in objects]


class StrictHTML(HTMLParser):
    """Parses HTML, checks that every element is closed in order, and collects the cells of each table row."""

    VOID = frozenset({"br", "hr", "img", "meta", "link", "input", "col", "area", "base", "wbr", "source"})

    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[str] = []
        self.rows: list[list[str]] = []
        self.cell: list[str] | None = None
        self.tags: list[str] = []
        self.feed(text)
        self.close()
        assert not self.stack, f"unclosed elements: {self.stack}"

    def handle_starttag(self, tag: str, attrs: list) -> None:
        self.tags.append(tag)
        if tag in self.VOID:
            return
        self.stack.append(tag)
        if tag == "tr":
            self.rows.append([])
        elif tag in ("td", "th"):
            self.cell = []

    def handle_endtag(self, tag: str) -> None:
        assert self.stack and self.stack[-1] == tag, f"</{tag}> closes {self.stack[-1:]}"
        self.stack.pop()
        if tag in ("td", "th") and self.cell is not None:
            self.rows[-1].append("".join(self.cell))
            self.cell = None

    def handle_data(self, data: str) -> None:
        if self.cell is not None:
            self.cell.append(data)


# -- reprs ------------------------------------------------------------------------------------------------------


def test_reprs_stay_short_on_a_jsc_l_sized_network(jsc_l: TableNetwork) -> None:
    """Every repr of a JSC-L-sized network (network, graph, nodes, edges, layers, plans, tables) is one line of at most 200 characters."""
    texts = every_repr(jsc_l)
    assert len(texts) > 30
    for text in texts:
        assert "\n" not in text and len(text) <= REPR_LIMIT, text


def test_reprs_name_the_thing_its_size_and_kind(jsc_l: TableNetwork) -> None:
    """The reprs say what the object is and how big: counts of layers, tables, rows, nodes, units and bits."""
    rows = sum(t.rows for t in jsc_l.tables)
    assert rows == workloads.MLP_CONFIGS["jsc-l"].total_rows == 2_195_456
    assert repr(jsc_l) == (
        "TableNetwork(6 table layers, 501 tables, 2,195,456 rows; 8 graph nodes; input (16,) -> output (5,))"
    )
    assert repr(jsc_l.graph) == "Graph(8 nodes, 7 edges: 1 input, 1 output, 6 table)"
    assert repr(jsc_l.graph["fc2"]) == "Node('fc2', table, shape (192,), 192 units, 786,432 rows)"
    assert repr(jsc_l.graph.edges_into("fc1")[0]) == "Edge('fc0'[0] -> 'fc1'[0], shape (32,), 3 bit)"
    assert repr(jsc_l["fc0"]) == "LayerTables('fc0', 32 tables, fan-in 3, 12 bit, 131,072 rows, linear fast path)"
    assert repr(jsc_l["fc5"].plan) == "LayerPlan('fc5', 5 units, fan-in 5, 15 bit, 163,840 rows, layout NC)"
    assert repr(jsc_l["fc0"][0]).startswith("IOTable(unit 0 of 'fc0', 4096 rows dense, 3 inputs x 4 bit(s)")


def test_reprs_of_windows_and_hosts_say_so(cnn_net: tuple[nn.Module, TableNetwork, torch.Tensor]) -> None:
    """A window's repr gives its buffer depth and stride, a convolution plan its kernel, a network its host nodes."""
    _, net, _ = cnn_net
    assert repr(net).startswith("TableNetwork(2 table layers, ") and "1 host node;" in repr(net)  # q_in: the input
    assert repr(net.graph["conv1:window"]).endswith("shape (4, 4, 9), buffer 23, stride (2, 2))")
    assert repr(net["dw"].plan).endswith("layout NCHW, kernel (3, 3))")


def test_long_names_keep_reprs_short() -> None:
    """Module names of hundreds of characters are cut in every repr, which stays within 200 characters."""
    long_a, long_b = "a" * 300, "b" * 300
    model = nn.Sequential(
        OrderedDict([(long_a, nn.Linear(3, 4)), ("q1", Quantize(2)), (long_b, nn.Linear(4, 2)), ("q2", Quantize(1))])
    )
    net = iotable.precompute(model, input_domain=Domain.uniform(1))
    assert long_a in net.layers and long_b in net.layers
    for text in every_repr(net):
        assert "\n" not in text and len(text) <= REPR_LIMIT, text
    edge = repr(net.graph.edges_into(long_b)[0])
    assert "'aaaaaaaaaa" in edge and "...'" in edge and "'bbbbbbbbbb" in edge


def test_partial_tables_show_rows_kept(cnn_net: tuple[nn.Module, TableNetwork, torch.Tensor]) -> None:
    """After restrict, the network's and each layer's repr give the rows kept of the rows in all."""
    _, net, x = cnn_net
    restricted = net.restrict(iotable.observe(net, x))
    kept = sum(t.rows for t in restricted.tables)
    full = sum(layer.plan.total_rows for layer in net.layers.values())
    assert f"{kept:,} of {full:,} rows kept" in repr(restricted)
    assert " rows kept, " in repr(restricted["dw"])


# -- HTML views ----------------------------------------------------------------------------------------------------


def test_network_html_parses_and_has_a_row_per_node(
    cnn_net: tuple[nn.Module, TableNetwork, torch.Tensor], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A network's HTML view parses, lists every graph node with its kind, and gives each table's rows, method, near
    ties, LUT estimate and pipeline register bits."""
    monkeypatch.setitem(sys.modules, "graphviz", None)  # the table alone, whatever is installed
    _, net, _ = cnn_net
    page = StrictHTML(net._repr_html_())
    header, *rows = page.rows
    assert header == [
        "kind",
        "name",
        "shape",
        "units",
        "fan-in",
        "bits",
        "rows",
        "buffer",
        "stride",
        "method",
        "near ties",
        "LUT6 (estimate)",
        "register bits",
    ]
    assert [(r[0], r[1]) for r in rows] == [(n.kind.value, n.name) for n in net.graph.nodes]
    by_name = {r[1]: dict(zip(header, r)) for r in rows}
    dw = net["dw"]
    assert by_name["dw"]["rows"] == f"{dw.plan.total_rows:,}"
    assert by_name["dw"]["method"] == dw.method == "conv fast path"
    assert by_name["dw"]["near ties"] == str(dw.near_ties)
    estimate = sum(table_lut_estimate(t) for t in dw.tables)
    assert by_name["dw"]["LUT6 (estimate)"] == f"{estimate:,}" == f"{dw.plan.lut_estimate():,}"
    node = net.graph["dw"]
    assert by_name["dw"]["register bits"] == f"{math.prod(node.shape) * node.domain.bits:,}"
    assert by_name["conv1:window"]["buffer"] == "23" and by_name["conv1:window"]["stride"] == "(2, 2)"
    assert "svg" not in page.tags


def test_network_html_without_graphviz_is_the_table_alone(
    cnn_net: tuple[nn.Module, TableNetwork, torch.Tensor], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without Graphviz (no package, or no dot program) the view is the table and the notes, with no picture and no error."""
    _, net, _ = cnn_net
    monkeypatch.setitem(sys.modules, "graphviz", None)
    html = net._repr_html_()
    assert "<table>" in html and "<svg" not in html
    assert "host nodes (run with torch, not tabulated): fc" in html
    if importlib.util.find_spec("graphviz") is not None:
        monkeypatch.delitem(sys.modules, "graphviz")
        monkeypatch.setenv("PATH", "")
        html = net._repr_html_()
        assert "<table>" in html and "<svg" not in html


def test_network_html_shows_the_picture_with_graphviz(cnn_net: tuple[nn.Module, TableNetwork, torch.Tensor]) -> None:
    """With Graphviz the view ends, after the table and its notes, with the graph's picture as inline SVG, one node per graph node."""
    require_graphviz()
    _, net, _ = cnn_net
    html = net._repr_html_()
    page = StrictHTML(html)
    assert page.tags.count("svg") == 1
    assert html.index("<table>") < html.index("host nodes (run with torch") < html.index("<svg")
    titles = re.findall(r'<g id="node\d+" class="node">\s*<title>(.*?)</title>', html)
    assert titles == [n.name for n in net.graph.nodes]


def test_graph_layer_and_report_views_parse(
    cnn_net: tuple[nn.Module, TableNetwork, torch.Tensor], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The graph, a layer and a verify report each have an HTML view that parses and holds their rows."""
    monkeypatch.setitem(sys.modules, "graphviz", None)
    model, net, x = cnn_net
    graph = StrictHTML(net.graph._repr_html_())
    assert [r[1] for r in graph.rows[1:]] == [n.name for n in net.graph.nodes]
    assert "method" not in graph.rows[0]  # a graph alone does not know how its tables were built
    layer = StrictHTML(net["dw"]._repr_html_())
    estimate = f"{net['dw'].plan.lut_estimate():,}"
    assert layer.rows[1][:2] == ["table", "dw"]
    assert layer.rows[1][-3:] == ["conv fast path", str(net["dw"].near_ties), estimate]
    assert layer.rows[2] == ["unit", "in channels", "out channels", "fan-in", "bits", "rows"]
    assert layer.rows[3] == ["0", "0", "0", "9", "18", "262,144"]
    report = StrictHTML(iotable.verify(model, net, x)._repr_html_())
    assert report.rows == [["samples", "agree bit for bit", "differ", "agreement"], ["16", "16", "0", "100.00%"]]


def test_report_view_names_the_first_mismatch(cnn_net: tuple[nn.Module, TableNetwork, torch.Tensor]) -> None:
    """A failed verification's view says MISMATCH and lists where the first sample differs."""
    model, net, x = cnn_net
    with torch.no_grad():
        model.dw.bias[1] += 10.0
    try:
        report = iotable.verify(model, net, x)
    finally:
        with torch.no_grad():
            model.dw.bias[1] -= 10.0
    page = StrictHTML(report._repr_html_())
    assert "MISMATCH" in report._repr_html_()
    details = dict(tuple(r) for r in page.rows[3:] if len(r) == 2)
    assert details["node"] == "dw" and details["unit"] == "1"


def test_layer_view_lists_at_most_64_units() -> None:
    """A layer of 100 units lists its first 64 and says how many more there are."""
    layer = iotable.precompute(nn.Conv1d(100, 100, 1, groups=100), input_domain=Domain.uniform(1))
    page = StrictHTML(layer._repr_html_())
    assert len(page.rows) == 2 + 1 + 64
    assert "... and 36 more units" in layer._repr_html_()


def test_html_escapes_names(monkeypatch: pytest.MonkeyPatch) -> None:
    """Names with markup in them are escaped in the HTML view and in the picture's SVG."""
    evil = '<script>alert("x")</script>&'
    graph = Graph(
        [
            Node(evil, NodeKind.INPUT, (2,), None, Domain.uniform(1)),
            Node("out", NodeKind.OUTPUT, (2,), None, Domain.uniform(1)),
        ],
        [Edge(evil, 0, "out", 0, (2,), None, Domain.uniform(1))],
    )
    monkeypatch.setitem(sys.modules, "graphviz", None)
    html = graph._repr_html_()
    assert "<script>" not in html and "&lt;script&gt;" in html
    assert StrictHTML(html).rows[1][1] == evil
    if graphviz_available():
        monkeypatch.delitem(sys.modules, "graphviz")
        svg_html = graph._repr_html_()
        assert "<svg" in svg_html and "<script>" not in svg_html


# -- the picture -----------------------------------------------------------------------------------------------------


def test_dot_shapes_kinds_and_labels_edges(cnn_net: tuple[nn.Module, TableNetwork, torch.Tensor]) -> None:
    """DOT gives each kind its shape, sets host nodes apart, and labels edges with shape, bits and window buffers."""
    _, net, _ = cnn_net
    dot = net.graph.to_dot()
    lines = {line.split(" [", 1)[0].strip(): line for line in dot.splitlines() if " [" in line}
    assert "shape=box3d" in lines['"dw"'] and "4 units, fan-in 9, 18 bit\\n1048576 rows" in lines['"dw"']
    assert "shape=parallelogram" in lines['"conv1:window"'] and "kernel 3x3, stride 2x2" in lines['"conv1:window"']
    assert "shape=component" in lines['"fc"'] and "host (torch)" in lines['"fc"'] and "dashed" in lines['"fc"']
    assert "shape=trapezium" in lines['"pool"'] and "shape=invhouse" in lines['"input"']
    assert lines['"conv1:pad" -> "conv1:window"'].endswith('[label="1x10x10, 2 bit\\nbuffer 23, stride 2x2"];')
    assert lines['"fc" -> "output"'].endswith('[label="10, float"];')
    assert len({definition(k).dot_shape for k in BUILTIN_KINDS}) == len(BUILTIN_KINDS)  # shapes tell kinds apart


def test_dot_escapes_quotes_and_backslashes() -> None:
    """A name holding a quote or a backslash is escaped in DOT, and Graphviz labels the node with the same name."""
    name = 'a"b\\c'
    graph = Graph(
        [
            Node(name, NodeKind.INPUT, (2,), None, Domain.uniform(1)),
            Node("out", NodeKind.OUTPUT, (2,), None, Domain.uniform(1)),
        ],
        [Edge(name, 0, "out", 0, (2,), None, Domain.uniform(1))],
    )
    assert '"a\\"b\\\\c" -> "out"' in graph.to_dot()
    if graphviz_available():
        assert ">a&quot;b\\c</text>" in graph.to_svg()  # the label, as Graphviz read it


def test_draw_gives_a_diagram_that_saves(cnn_net: tuple[nn.Module, TableNetwork, torch.Tensor], tmp_path: Path) -> None:
    """``net.draw()`` returns a Diagram that a notebook shows as SVG and that saves as .svg or .dot."""
    require_graphviz()
    _, net, _ = cnn_net
    diagram = net.draw()
    assert isinstance(diagram, Diagram) and diagram._repr_svg_() == diagram.svg == net.graph.to_svg()
    assert diagram.dot == net.graph.to_dot() and diagram.svg.startswith("<svg")
    assert repr(diagram).startswith("Diagram(graph picture: ") and len(repr(diagram)) <= REPR_LIMIT
    assert diagram.save(tmp_path / "net.svg").read_text(encoding="utf-8") == diagram.svg
    assert diagram.save(tmp_path / "net.dot").read_text(encoding="utf-8") == diagram.dot
    with pytest.raises(GraphError, match=r"cannot tell the format of .*net\.png.*\*\.svg, \*\.dot or \*\.gv"):
        diagram.save(tmp_path / "net.png")
    with pytest.raises(GraphError, match=r"folder of .* does not exist; create it first"):
        diagram.save(tmp_path / "missing" / "net.svg")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["net.dot", "net.svg"]


def test_without_the_package_drawing_names_the_extra(
    cnn_net: tuple[nn.Module, TableNetwork, torch.Tensor], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without the graphviz package, to_svg and draw raise GraphvizNotInstalledError naming iotable[notebook]."""
    _, net, _ = cnn_net
    monkeypatch.setitem(sys.modules, "graphviz", None)
    for attempt in (net.graph.to_svg, net.draw):
        with pytest.raises(
            GraphvizNotInstalledError, match=r"Python package 'graphviz'.*pip install \"iotable\[notebook\]\""
        ):
            attempt()
    assert issubclass(GraphvizNotInstalledError, IOTableError) and issubclass(GraphvizNotInstalledError, ImportError)


def test_without_dot_drawing_names_the_debian_package(
    cnn_net: tuple[nn.Module, TableNetwork, torch.Tensor], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Without Graphviz's dot program on the PATH, to_svg raises GraphvizNotInstalledError naming apt-get install graphviz."""
    require("graphviz", install='pip install -e ".[notebook]"')
    _, net, _ = cnn_net
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(GraphvizNotInstalledError, match=r"'dot' program.*apt-get install graphviz"):
        net.graph.to_svg()
