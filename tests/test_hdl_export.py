"""Whole networks as Verilog and VHDL: export, the generated benches under iverilog, ghdl and verilator, simulate
against net.run and the model, a tampered table that the bench catches, yosys checks and bad options."""

from __future__ import annotations

import importlib
import json
import re
import sys
from collections import OrderedDict
from pathlib import Path

import pytest
import torch
from torch import nn

import iotable
from iotable import Domain, OptionError
from iotable.cli import main
from iotable.errors import HDLError
from iotable.hdl import Design, check, export, simulate, simulate_files
from iotable.nn import Quantize
from tests.optional import require_program

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
SIMULATORS = {"iverilog": "verilog", "ghdl": "vhdl", "verilator": "verilog"}
D2 = Domain.uniform(2)


def sparse(n_in: int, n_out: int, fan_in: int, seed: int) -> nn.Linear:
    """A Linear whose output k reads ``fan_in`` random inputs (the other weights zero), declared to iotable."""
    generator = torch.Generator().manual_seed(seed)
    layer = nn.Linear(n_in, n_out)
    reads = [sorted(torch.randperm(n_in, generator=generator)[:fan_in].tolist()) for _ in range(n_out)]
    with torch.no_grad():
        mask = torch.zeros(n_out, n_in)
        for k, r in enumerate(reads):
            mask[k, r] = 1.0
        layer.weight.mul_(mask)
    return iotable.decompose(layer, fan_in=reads)


def small_mlp(seed: int = 0) -> nn.Sequential:
    """12 inputs of 2 bits -> 8 -> 6 -> 4 signed 3-bit codes; fan-in 3 (tables of 64 rows)."""
    torch.manual_seed(seed)
    return nn.Sequential(
        OrderedDict(
            fc1=sparse(12, 8, 3, seed), bn1=nn.BatchNorm1d(8), q1=Quantize(2, scale=0.5),
            fc2=sparse(8, 6, 3, seed + 1), q2=Quantize(2, scale=0.5),
            fc3=sparse(6, 4, 3, seed + 2), q3=Quantize(3, signed=True, scale=0.5),
        )
    ).eval()  # fmt: skip


class Residual(nn.Module):
    """a = q1(fc1(x)); q3(q2(fc2(a)) + a): a duplicate, a join and a table of fan-in 2 per element."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.q1 = sparse(6, 4, 3, 5), Quantize(2, signed=True, scale=0.5)
        self.fc2, self.q2 = sparse(4, 4, 2, 6), Quantize(2, signed=True, scale=0.5)
        self.q3 = Quantize(3, signed=True, scale=0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = self.q1(self.fc1(x))
        return self.q3(self.q2(self.fc2(a)) + a)


def values(domain: Domain, shape: tuple[int, ...], seed: int) -> torch.Tensor:
    codes = torch.randint(0, len(domain), shape, generator=torch.Generator().manual_seed(seed))
    return torch.tensor(domain.values, dtype=torch.float32)[codes]


@pytest.fixture(scope="module")
def mlp() -> iotable.TableNetwork:
    return iotable.precompute(small_mlp(), input_domain=D2)


def files_of(design: Design, names: tuple[str, ...]) -> dict[str, str]:
    return {name: (design.directory / name).read_text() for name in names}


def run_bench(design: Design, simulator: str, files: dict[str, str] | None = None):
    require_program(simulator, package=simulator)
    if simulator == "verilator":
        require_program("g++", package="g++")
    files = files or files_of(design, design.sources + design.bench)
    return simulate_files(files, f"{design.top}_tb", simulator=simulator, timeout=300)


# -- the design and its description ------------------------------------------------------------------------


def test_description_of_an_mlp(mlp: iotable.TableNetwork, tmp_path: Path) -> None:
    """The description gives the ports' packing, the latency (one register per table layer) and each layer's resources
    (every unit's with keep_dead=True; by default the live units', the dead ones counted apart)."""
    design = export(mlp, tmp_path, top="mlp", vectors=16, keep_dead=True)
    assert (design.inputs.width, design.inputs.elements, design.inputs.bits) == (24, 12, 2)
    assert (design.outputs.width, design.outputs.elements, design.outputs.bits, design.outputs.node) == (
        12,
        4,
        3,
        "fc3",
    )
    assert design.inputs.field(5) == (11, 10) and design.outputs.field(3) == (11, 9)
    assert design.latency == 3 and design.host == ()
    assert [(r.node, r.units, r.instances, r.registers) for r in design.layers] == [
        ("fc1", 8, 8, 16), ("fc2", 6, 6, 12), ("fc3", 4, 4, 12),
    ]  # fmt: skip
    assert sum(r.distinct for r in design.layers) == len({t.outputs.tobytes() for t in mlp.tables})
    assert all(
        r.tables == r.units
        and r.rows == 64 * r.units
        and r.table_bits == 64 * r.distinct * (2 if r.node != "fc3" else 3)
        for r in design.layers
    )
    assert [r.estimate for r in design.layers] == [
        sum(iotable.synth.table_lut_estimate(t) for t in mlp[name].tables) for name in ("fc1", "fc2", "fc3")
    ]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(design.files)
    record = json.loads((tmp_path / "mlp_design.json").read_text())
    assert record["latency"] == 3 and record["outputs"]["widths"] == [3] * 4
    assert "mlp: verilog design, style unrolled" in design.summary()
    live = export(mlp, tmp_path / "live", top="mlp", vectors=16)
    units = mlp.liveness.units
    assert [(r.node, r.units, r.dead, r.instances) for r in live.layers] == [
        (name, int(units[name].sum()), int((~units[name]).sum()), int(units[name].sum())) for name in units
    ]
    assert sum(r.dead for r in live.layers) > 0 and [r.registers for r in live.layers] == [
        2 * int(units["fc1"].sum()),
        2 * int(units["fc2"].sum()),
        12,
    ]


def test_pipeline_every_k_layers_and_combinational(mlp: iotable.TableNetwork, tmp_path: Path) -> None:
    """pipeline=2 registers the second table layer only; pipeline=0 (or 'none') has no register and no clocked logic."""
    every2 = export(mlp, tmp_path / "k2", pipeline=2, top="mlp", vectors=4)
    live_fc2 = int(mlp.liveness.units["fc2"].sum())  # a unit's code is 2 bits: the register holds the live ones
    assert every2.latency == 1 and [r.registers for r in every2.layers] == [0, 2 * live_fc2, 0]
    none = export(mlp, tmp_path / "k0", pipeline="none", top="mlp", vectors=4)
    assert none.latency == 0 and all(r.registers == 0 for r in none.layers)
    assert "posedge" not in (tmp_path / "k0" / "mlp.v").read_text()


def test_layer_module_wires_units_by_the_index_map(mlp: iotable.TableNetwork, tmp_path: Path) -> None:
    """Each instance of the first layer module reads exactly its unit's inputs, first input most significant; a
    dead unit has no instance."""
    export(mlp, tmp_path, top="mlp", vectors=4, inline_bits=0)
    text = (tmp_path / "mlp.v").read_text()
    index_map = mlp.graph["fc1"].meta.index_map
    live = mlp.liveness.units["fc1"]
    layer0 = text[text.index("module mlp_layer0 ") :].split("endmodule")[0]
    assert all((f" u{unit}_p0 (" in layer0) == live[unit] for unit in range(8)) and not live.all()
    for unit in [u for u in range(8) if live[u]]:
        line = re.search(rf" u{unit}_p0 \(\.address\(([^)]*)\)", text).group(1)
        fields = [int(hi) // 2 for hi, _ in re.findall(r"x\[(\d+):(\d+)\]", line)]
        assert fields == index_map[unit].tolist()


# -- simulation: the benches and simulate() ------------------------------------------------------------------


@pytest.mark.parametrize("pipeline", [1, 2, 0])
@pytest.mark.parametrize("simulator", ["iverilog", "ghdl"])
def test_network_bench_passes(mlp: iotable.TableNetwork, tmp_path: Path, simulator: str, pipeline: int) -> None:
    """The generated bench checks 200 random vectors through the handshake (with stalls) and prints 200/200."""
    design = export(mlp, tmp_path, language=SIMULATORS[simulator], pipeline=pipeline, top="mlp", vectors=200)
    result = run_bench(design, simulator)
    assert result.passed, result.stdout + result.stderr
    assert "200/200 vectors match" in result.stdout


def test_network_bench_passes_under_verilator(mlp: iotable.TableNetwork, tmp_path: Path) -> None:
    """Verilator runs the same Verilog and bench."""
    design = export(mlp, tmp_path, top="mlp", vectors=50)
    result = run_bench(design, "verilator")
    assert result.passed and "50/50 vectors match" in result.stdout, result.stdout + result.stderr


@pytest.mark.parametrize("simulator", ["iverilog", "ghdl"])
def test_every_table_passes_its_exhaustive_bench(mlp: iotable.TableNetwork, tmp_path: Path, simulator: str) -> None:
    """Each distinct table module passes its bench of every row."""
    design = export(
        mlp, tmp_path, language=SIMULATORS[simulator], top="mlp", vectors=4, inline_bits=0, table_benches=True
    )
    require_program(simulator, package=simulator)
    assert design.table_benches
    suffix = ".v" if simulator == "iverilog" else ".vhd"
    for bench in design.table_benches:
        module = bench[: -len("_tb")]
        names = (f"{module}{suffix}", f"{bench}{suffix}", f"{module}_vectors.hex")
        result = simulate_files(files_of(design, names), bench, simulator=simulator, timeout=60)
        assert result.passed and "64/64 vectors match" in result.stdout, result.stdout


@pytest.mark.parametrize("simulator", ["iverilog", "ghdl"])
def test_simulate_equals_net_run(mlp: iotable.TableNetwork, tmp_path: Path, simulator: str) -> None:
    """simulate returns the codes net.run gives, for values and for codes."""
    design = export(mlp, tmp_path, language=SIMULATORS[simulator], top="mlp", vectors=4)
    x = values(D2, (40, 12), 3)
    hardware = simulate(design, x, simulator=simulator)
    assert hardware.shape == (40, 4) and hardware.dtype == torch.int64
    assert torch.equal(hardware, mlp.run(x, return_codes=True))
    assert torch.equal(simulate(design, mlp.encode_input(x)[:5], simulator=simulator, codes=True), hardware[:5])


@pytest.mark.parametrize("simulator", ["iverilog", "ghdl"])
def test_skip_connection_is_delayed_to_its_stage(tmp_path: Path, simulator: str) -> None:
    """A duplicate feeding a later join is read through delay registers, so the add sees both operands of one sample."""
    net = iotable.precompute(Residual().eval(), input_domain=D2, example_input=torch.zeros(1, 6))
    assert {n.kind.value for n in net.graph} >= {"duplicate", "join"}
    design = export(net, tmp_path, language=SIMULATORS[simulator], top="res", vectors=100)
    assert design.latency == 3 and design.delay_registers == 8  # fc1's 4 codes of 2 bits, one cycle more
    result = run_bench(design, simulator)
    assert result.passed and "100/100 vectors match" in result.stdout, result.stdout
    x = values(D2, (30, 6), 1)
    assert torch.equal(simulate(design, x, simulator=simulator), net.run(x, return_codes=True))


def test_host_nodes_stay_in_software(tmp_path: Path) -> None:
    """A float head listed in host= is left out: out_data carries the codes it reads, and the description says so."""
    model = nn.Sequential(OrderedDict(fc1=sparse(8, 6, 3, 2), q1=Quantize(2), head=nn.Linear(6, 3))).eval()
    net = iotable.precompute(model, input_domain=D2, host=["head"])
    design = export(net, tmp_path, top="headless", vectors=30)
    assert design.host == ("head",) and design.output_node == "fc1" and design.outputs.elements == 6
    assert "host nodes left to software: head" in design.summary()
    assert "Host nodes left to software, reading out_data: head." in (tmp_path / "headless.v").read_text()
    result = run_bench(design, "iverilog")
    assert result.passed and "30/30 vectors match" in result.stdout
    x = values(D2, (10, 8), 2)
    codes = simulate(design, x)
    with torch.no_grad():
        head = model.head(torch.tensor(Quantize(2).domain.values, dtype=torch.float32)[codes])
    assert torch.equal(head, net.run(x))  # the host finishes what the hardware started


# -- the tamper test ------------------------------------------------------------------------------------------


def flip_row(text: str, label: str) -> str:
    """The module text with the last bit of the codes of the case row labelled ``label`` (a flat case) flipped."""
    match = re.search(rf"{re.escape(label)}: codes = \d+'b[01_]*([01]);", text)
    assert match is not None
    bit = "1" if match.group(1) == "0" else "0"
    return text[: match.start(1)] + bit + text[match.end(1) :]


@pytest.mark.parametrize("simulator", ["iverilog", "ghdl"])
def test_a_flipped_row_fails_the_bench_naming_vector_node_and_unit(
    mlp: iotable.TableNetwork, tmp_path: Path, simulator: str
) -> None:
    """Flipping one row of the table of the last layer's unit 2 makes the bench fail at the first vector that reads
    it, naming the vector, the node and the unit."""
    language = SIMULATORS[simulator]
    x = values(D2, (100, 12), 4)
    design = export(mlp, tmp_path, language=language, top="mlp", inputs=x, inline_bits=0)
    _, env = mlp.runtime.run(mlp.encode_input(x), capture=True)
    index_map = mlp.graph["fc3"].meta.index_map
    top = (tmp_path / design.sources[-1]).read_text()
    last = top[top.index("mlp_layer2 ") :]  # the last layer module (its entity / module declaration onwards)
    pattern = r"\n    (\w+) u{}_p0 \(" if language == "verilog" else r"\n    u{}_p0 : entity work\.(\w+) "
    module = {u: re.search(pattern.format(u), last).group(1) for u in range(4)}
    row = env["fc2"][0, index_map[2].tolist()].tolist()  # the row unit 2 reads for vector 0
    files = files_of(design, design.sources + design.bench)
    source = f"{module[2]}{'.v' if language == 'verilog' else '.vhd'}"
    label = "_".join(format(c, "02b") for c in row)
    pattern = (
        rf"(6'b{label}: codes = 3'b[01]{{2}})([01])"
        if language == "verilog"
        else rf'(b"{label}" => codes <= b"[01]{{2}})([01])'
    )
    match = re.search(pattern, files[source])
    flipped = "1" if match.group(2) == "0" else "0"
    files[source] = files[source][: match.start(2)] + flipped + files[source][match.end(2) :]
    # every unit sharing that module fails where it reads that row: the first vector's lowest output element
    users = [u for u in range(4) if module[u] == module[2]]
    vector, unit = min(
        (v, u) for v in range(100) for u in users if env["fc2"][v, index_map[u].tolist()].tolist() == row
    )
    result = run_bench(design, simulator, files)
    assert not result.passed
    assert f"mismatch at vector {vector}: output element {unit} (node 'fc3' unit {unit} position 0)" in result.stdout
    assert "vectors match" not in result.stdout


# -- synthesis ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("pipeline", [1, 0])
@pytest.mark.parametrize("language", ["verilog", "vhdl"])
def test_check_passes(mlp: iotable.TableNetwork, tmp_path: Path, language: str, pipeline: int) -> None:
    """yosys (Verilog: synth, check -assert, no latch) or ghdl's synthesis (VHDL) accepts the exported design."""
    require_program("yosys", package="yosys")
    if language == "vhdl":
        require_program("ghdl", package="ghdl")
    design = export(mlp, tmp_path, language=language, pipeline=pipeline, top="mlp", vectors=4)
    result = check(design, timeout=300)
    assert result.top == "mlp" and result.language == language


# -- the command line ------------------------------------------------------------------------------------------


def test_cli_export_writes_a_design_whose_bench_passes(
    mlp: iotable.TableNetwork, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """iotable export verilog BUNDLE DIR writes the design and benches, prints the description; bad paths exit 1."""
    bundle = iotable.save(mlp, tmp_path / "bundle")
    assert main(["export", "vhdl", str(bundle), str(tmp_path / "hw"), "--top", "mlp", "--vectors", "20"]) == 0
    out = capsys.readouterr().out
    assert "mlp: vhdl design, style unrolled" in out and "wrote " in out
    assert (tmp_path / "hw" / "mlp.vhd").is_file() and (tmp_path / "hw" / "mlp_design.json").is_file()
    require_program("ghdl", package="ghdl")
    names = [p.name for p in (tmp_path / "hw").iterdir() if "_tb" not in p.name or p.name == "mlp_tb.vhd"]
    files = {n: (tmp_path / "hw" / n).read_text() for n in names if not n.endswith("_vectors.hex")}
    result = simulate_files(files, "mlp_tb", simulator="ghdl", timeout=120)
    assert result.passed and "20/20 vectors match" in result.stdout
    (tmp_path / "afile").write_text("")
    assert main(["export", "verilog", str(bundle), str(tmp_path / "afile")]) == 1
    assert "exists and is not a directory" in capsys.readouterr().err
    layer = iotable.save(mlp["fc1"], tmp_path / "layer")
    assert main(["export", "verilog", str(layer), str(tmp_path / "x")]) == 1
    assert "needs a network bundle" in capsys.readouterr().err


# -- bad inputs ---------------------------------------------------------------------------------------------


def test_bad_options_are_refused_before_writing(mlp: iotable.TableNetwork, tmp_path: Path) -> None:
    """Unknown options, illegal names, a non-network and a file as directory raise, and nothing is written."""
    target = tmp_path / "out"
    with pytest.raises(OptionError, match="unknown language 'systemc'"):
        export(mlp, target, language="systemc")
    with pytest.raises(OptionError, match="unknown style 'folded'; expected one of 'unrolled'"):
        export(mlp, target, style="folded")
    with pytest.raises(OptionError, match="pipeline must be a number of table layers"):
        export(mlp, target, pipeline=-1)
    with pytest.raises(HDLError, match="'module' is a reserved word"):
        export(mlp, target, top="module")
    with pytest.raises(HDLError, match="expected a TableNetwork"):
        export(mlp["fc1"], target)  # type: ignore[arg-type]
    with pytest.raises(OptionError, match="unknown dont_cares 'maybe'"):
        export(mlp, target, dont_cares="maybe")
    assert not target.exists()
    afile = tmp_path / "file"
    afile.write_text("")
    with pytest.raises(HDLError, match="exists and is not a directory"):
        export(mlp, afile)


def test_simulate_refuses_the_other_language(mlp: iotable.TableNetwork, tmp_path: Path) -> None:
    """ghdl reads VHDL only, iverilog and verilator Verilog only; simulate says which to use."""
    design = export(mlp, tmp_path, top="mlp", vectors=4)
    with pytest.raises(HDLError, match="simulator 'ghdl' does not read VERILOG; use 'iverilog' or 'verilator'"):
        simulate(design, values(D2, (2, 12), 0), simulator="ghdl")


def test_raw_outputs_are_refused_by_name(tmp_path: Path) -> None:
    """A last layer without a quantizer holds raw values: export names the layer and what to do."""
    net = iotable.precompute(nn.Sequential(sparse(6, 3, 2, 1)).eval(), input_domain=D2)
    with pytest.raises(HDLError, match="holds raw output values, not codes"):
        export(net, tmp_path)


# -- the examples: LogicNets-style and the digits MLP on the whole digits test split ------------------------------


@pytest.fixture(scope="module")
def digits_nets():
    """The LogicNets-style and digits MLP examples, trained briefly, precomputed, with the digits test split."""
    sys.path.insert(0, str(EXAMPLES))
    try:
        digits = importlib.import_module("_digits")
        x_train, y_train, x_test, _ = digits.load(image=False)
        torch.manual_seed(0)
        nets = {}
        for name, build in (
            ("logicnets_style", lambda: importlib.import_module("logicnets_style").JetStyleModel()),
            ("digits_mlp", lambda: importlib.import_module("digits_mlp").build_model()),
        ):
            model = build()
            digits.train(model, x_train[:400], y_train[:400], epochs=1)
            nets[name] = (
                model.eval(),
                iotable.precompute(model, input_domain=digits.INPUT_DOMAIN, example_input=x_train[:1]),
            )
        yield nets, x_test
    finally:
        sys.path.remove(str(EXAMPLES))


@pytest.mark.parametrize("simulator", ["iverilog", "ghdl"])
@pytest.mark.parametrize("name", ["logicnets_style", pytest.param("digits_mlp", marks=pytest.mark.slow)])
def test_examples_on_the_digits_test_split(digits_nets, tmp_path: Path, name: str, simulator: str) -> None:
    """The example's design, fed the 360 test digits, passes its bench (equal to net.run), whose codes are the model's."""
    nets, x_test = digits_nets
    model, net = nets[name]
    design = export(net, tmp_path, language=SIMULATORS[simulator], top="net", inputs=x_test)
    result = run_bench(design, simulator)
    assert result.passed and "360/360 vectors match" in result.stdout, result.stdout
    with torch.no_grad():
        model_codes = torch.as_tensor(net.output_node.domain.encode(model(x_test).numpy()), dtype=torch.int64)
    assert torch.equal(net.run(x_test, return_codes=True), model_codes)
    if name == "logicnets_style":  # and simulate() hands the hardware's codes back (the larger MLP: bench only)
        assert torch.equal(simulate(design, x_test, simulator=simulator), model_codes)


# -- convolutions, unrolled: pads (every mode), windows (stride, dilation), depthwise, pointwise, pools, 1D and 2D ----


def conv2d_net() -> iotable.TableNetwork:
    """(1, 11, 11) signed 2-bit pixels (pad code 2); a strided conv, a dilated replicate-padded depthwise, a
    pointwise, a max-pool and a flatten."""
    torch.manual_seed(3)
    model = nn.Sequential(
        OrderedDict(
            conv=nn.Conv2d(1, 3, 2, stride=2, padding=1), bn=nn.BatchNorm2d(3), q1=Quantize(1),
            dw=nn.Conv2d(3, 3, 3, padding=2, dilation=2, groups=3, padding_mode="replicate"), q2=Quantize(1),
            pw=nn.Conv2d(3, 4, 1), q3=Quantize(2, scale=0.5),
            pool=nn.MaxPool2d(2), flatten=nn.Flatten(),
        )
    ).eval()  # fmt: skip
    half = Domain.uniform(2, signed=True, scale=0.5)
    return iotable.precompute(model, input_domain=half, example_input=torch.zeros(1, 1, 11, 11))


def conv1d_net() -> iotable.TableNetwork:
    """(2, 9) 2-bit sequences; a strided reflect-padded conv, a circular 'same' depthwise (kernel 4: pads 1 before,
    2 after), a zero-padded max-pool of kernel 3 and stride 2."""
    torch.manual_seed(4)
    model = nn.Sequential(
        OrderedDict(
            c1=nn.Conv1d(2, 2, 3, stride=2, padding=1, padding_mode="reflect"), q1=Quantize(1),
            c2=nn.Conv1d(2, 2, 4, padding="same", groups=2, padding_mode="circular"), q2=Quantize(2, signed=True),
            pool=nn.MaxPool1d(3, stride=2, padding=1),
        )
    ).eval()  # fmt: skip
    return iotable.precompute(model, input_domain=D2, example_input=torch.zeros(1, 2, 9))


CONV_NETS = {"conv2d": conv2d_net, "conv1d": conv1d_net}


@pytest.mark.parametrize("simulator", ["iverilog", "ghdl"])
@pytest.mark.parametrize("key", sorted(CONV_NETS))
def test_unrolled_convolutions_equal_net_run(tmp_path: Path, key: str, simulator: str) -> None:
    """Every unit at every position, windows and pads as wiring, pools as comparator trees: the bench passes and
    simulate returns net.run's codes."""
    net = CONV_NETS[key]()
    kinds = {n.kind.value for n in net.graph}
    assert {"pad", "window", "pool"} <= kinds
    design = export(net, tmp_path, language=SIMULATORS[simulator], style="unrolled", top=key, vectors=150)
    result = run_bench(design, simulator)
    assert result.passed and "150/150 vectors match" in result.stdout, result.stdout
    node = net.input_node
    x = values(node.domain, (40, *node.shape), 9)
    assert torch.equal(simulate(design, x, simulator=simulator), net.run(x, return_codes=True))


def test_unrolled_layers_instantiate_each_unit_at_each_position(tmp_path: Path) -> None:
    """The 2D net's depthwise layer: 3 units x 36 positions, at most 3 distinct tables; its pool: 36 comparator trees of 4."""
    design = export(conv2d_net(), tmp_path, top="c2", vectors=4)
    dw = next(r for r in design.layers if r.node == "dw")
    assert (dw.units, dw.instances) == (3, 108) and dw.distinct <= 3
    text = (tmp_path / "c2.v").read_text()
    assert text.count("module c2_pool0") == 1 and len(re.findall(r"wire \[1:0\] m\d+_1_0 =", text)) == 36


@pytest.mark.parametrize("key", sorted(CONV_NETS))
def test_unrolled_convolutions_pass_yosys(tmp_path: Path, key: str) -> None:
    """yosys synthesizes the unrolled convolution designs with check -assert and no latch."""
    require_program("yosys", package="yosys")
    design = export(CONV_NETS[key](), tmp_path, top=key, vectors=4)
    assert check(design, timeout=300).cells


@pytest.mark.parametrize("language", ["verilog", "vhdl"])
def test_digits_cnn_exports_up_to_its_host_head(tmp_path: Path, language: str) -> None:
    """The digits CNN example exports unrolled up to its float head: out_data carries the flatten's 256 codes."""
    sys.path.insert(0, str(EXAMPLES))
    try:
        digits = importlib.import_module("_digits")
        model = importlib.import_module("digits_cnn").DigitsCNN().eval()
    finally:
        sys.path.remove(str(EXAMPLES))
    net = iotable.precompute(
        model, input_domain=digits.INPUT_DOMAIN, example_input=torch.zeros(1, 1, 8, 8), host=["fc"]
    )
    design = export(net, tmp_path, language=language, top="cnn", vectors=8, table_benches=False)
    assert design.host == ("fc",) and design.output_node == "flatten" and design.outputs.shape == (256,)
    assert [(r.units, r.instances) for r in design.layers] == [(8, 128), (8, 128), (16, 256)]
    assert design.latency == 3 and design.inputs.width == 128 and design.outputs.width == 512
    assert not design.table_benches
