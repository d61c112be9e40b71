"""A :class:`~iotable.hdl._netlist.Netlist` as Verilog-2001 or VHDL-2008 source text.

One file per distinct table (``table_verilog`` / ``table_vhdl``, or with mapped tables ``mapped_verilog`` /
``mapped_vhdl``: the same ports, the table's LUT netlist inside) and one file ``<top>.v`` / ``<top>.vhd`` with
the layer modules, the pool modules and the top module. The top module's ports and their timing are the
I/O contract of docs/hardware.md; registers are enabled by ``advance`` (the pipeline moves when its output
is taken or empty), and only the valid bits are reset.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ._mapped import mapped_verilog, mapped_vhdl
from ._netlist import Layer, Netlist, Pool
from ._table import table_verilog, table_vhdl

__all__ = ["Lang", "block_texts", "design_files", "runs", "table_files", "top_parts"]


@dataclass(frozen=True)
class Lang:
    """What differs between the languages in the few constructs the generator writes."""

    name: str

    @property
    def verilog(self) -> bool:
        return self.name == "verilog"

    @property
    def suffix(self) -> str:
        return ".v" if self.verilog else ".vhd"

    @property
    def comment(self) -> str:
        return "//" if self.verilog else "--"

    def slice(self, signal: str, high: int, low: int) -> str:
        return f"{signal}[{high}:{low}]" if self.verilog else f"{signal}({high} downto {low})"

    def constant(self, width: int, value: int) -> str:
        return f"{width}'d{value}" if self.verilog else '"' + format(value, f"0{width}b") + '"'

    def concat(self, parts: list[str]) -> str:
        if len(parts) == 1:
            return parts[0]
        return "{" + ", ".join(parts) + "}" if self.verilog else " & ".join(parts)


def runs(
    lang: Lang, names: list[str], sig: np.ndarray, lsb: np.ndarray, width: np.ndarray, value: np.ndarray
) -> list[str]:
    """The HDL parts of a concatenation of elements listed **most significant first**: adjacent bit fields of
    one signal merge into one slice; ``sig == -1`` marks a constant of code ``value``."""
    if not len(sig):
        return []
    follows = np.zeros(len(sig), dtype=bool)
    follows[1:] = (sig[1:] == sig[:-1]) & (sig[1:] >= 0) & (lsb[:-1] == lsb[1:] + width[1:])
    starts = np.flatnonzero(~follows)
    ends = np.append(starts[1:], len(sig)) - 1
    parts = []
    for first, last in zip(starts.tolist(), ends.tolist()):  # one part per run of elements, not per table row
        if sig[first] < 0:
            parts.append(lang.constant(int(width[first]), int(value[first])))
        else:
            parts.append(lang.slice(names[int(sig[first])], int(lsb[first] + width[first] - 1), int(lsb[last])))
    return parts


def top_parts(lang: Lang, netlist: Netlist, ids: np.ndarray) -> str:
    """A concatenation of top-level elements ``ids`` (element 0 lowest) as one HDL expression."""
    order = np.asarray(ids, dtype=np.int64)[::-1]
    names = [s.name for s in netlist.signals]
    return lang.concat(
        runs(lang, names, netlist.sig[order], netlist.lsb[order], netlist.width[order], netlist.value[order])
    )


def _local_parts(lang: Lang, widths: np.ndarray, elements: list[int]) -> str:
    """A concatenation of port-``x`` elements (listed most significant first) as one expression."""
    lsb = np.concatenate([[0], np.cumsum(widths)[:-1]]).astype(np.int64)
    index = np.asarray(elements, dtype=np.int64)
    zero = np.zeros(len(index), np.int64)
    return lang.concat(runs(lang, ["x"], zero, lsb[index], widths[index], zero))


def _vector(lang: Lang, width: int) -> str:
    return f"[{width - 1}:0]" if lang.verilog else f"std_logic_vector({width - 1} downto 0)"


def _layer_text(lang: Lang, netlist: Netlist, block: Layer) -> str:
    xw = int(block.x_widths.sum())
    lines = []
    for (instance, module, elements), lsb in zip(block.instances, block.y_lsb.tolist()):
        cw = netlist.modules[module].layout.code_bits
        address = _local_parts(lang, block.x_widths, elements)
        codes = lang.slice("y", lsb + cw - 1, lsb)
        if lang.verilog:
            lines.append(f"    {module} {instance} (.address({address}), .codes({codes}));")
        else:
            lines.append(f"    {instance} : entity work.{module} port map (address => {address}, codes => {codes});")
    head = (
        f"{lang.comment} Layer module of table node '{block.node}' (layer '{block.layer}'): {len(block.instances)} "
        f"instance(s) of {len({m for _, m, _ in block.instances})} table module(s).\n"
        f"{lang.comment} x: the tensor the node reads (element i at the bits after elements 0..i-1), y: its output "
        "codes.\n"
    )
    return head + _module(lang, block.name, xw, block.y_width, [], lines)


def _pool_text(lang: Lang, block: Pool) -> str:
    lsb = np.concatenate([[0], np.cumsum(block.x_widths)[:-1]]).astype(np.int64)
    ylsb = np.concatenate([[0], np.cumsum(block.y_widths)[:-1]]).astype(np.int64)
    declarations, lines = [], []
    for k, sources in enumerate(block.maxima):  # a comparator tree per output element
        w = int(block.y_widths[k])
        level = [lang.slice("x", int(lsb[s] + w - 1), int(lsb[s])) for s in sources]
        depth = 0
        while len(level) > 1:
            nxt = []
            for j in range(0, len(level) - 1, 2):
                name = f"m{k}_{depth}_{j // 2}"
                a, b = level[j], level[j + 1]
                if lang.verilog:
                    declarations.append(f"    wire [{w - 1}:0] {name} = ({a} > {b}) ? {a} : {b};")
                else:
                    declarations.append(f"    signal {name} : {_vector(lang, w)};")
                    lines.append(f"    {name} <= {a} when unsigned({a}) > unsigned({b}) else {b};")
                nxt.append(name)
            if len(level) % 2:
                nxt.append(level[-1])
            level, depth = nxt, depth + 1
        target = lang.slice("y", int(ylsb[k] + w - 1), int(ylsb[k]))
        lines.append(f"    assign {target} = {level[0]};" if lang.verilog else f"    {target} <= {level[0]};")
    head = (
        f"{lang.comment} Pool module of node '{block.node}': each output code is the largest of the codes its "
        "window covers (codes ascend with values).\n"
    )
    return head + _module(lang, block.name, int(block.x_widths.sum()), int(block.y_widths.sum()), declarations, lines)


def _module(lang: Lang, name: str, xw: int, yw: int, declarations: list[str], body: list[str]) -> str:
    if lang.verilog:
        ports = [f"module {name} (", f"    input  wire [{xw - 1}:0] x,", f"    output wire [{yw - 1}:0] y", ");"]
        return "\n".join([*ports, *declarations, *body, "endmodule", "", ""])
    return "\n".join(
        [
            "library ieee;",
            "use ieee.std_logic_1164.all;",
            "use ieee.numeric_std.all;",
            "",
            f"entity {name} is",
            "    port (",
            f"        x : in  std_logic_vector({xw - 1} downto 0);",
            f"        y : out std_logic_vector({yw - 1} downto 0)",
            "    );",
            f"end entity {name};",
            "",
            f"architecture rtl of {name} is",
            *declarations,
            "begin",
            *body,
            "end architecture rtl;",
            "",
            "",
        ]
    )


def _top_text(lang: Lang, netlist: Netlist, header: list[str]) -> str:
    """The top module: ports, the valid pipeline, module instances, registers and the output."""
    inw = netlist.signals[0].width
    outw = int(netlist.width[netlist.output_ids].sum()) if netlist.output_ids.size else 1
    latency = netlist.latency
    signals, body = [], []
    for block in netlist.blocks:
        out = netlist.signals[block.output]
        instance = block.name[len(netlist.top) + 1 :]
        x = top_parts(lang, netlist, block.x_ids)
        if lang.verilog:
            signals.append(f"    wire [{out.width - 1}:0] {out.name};")
            body.append(f"    {block.name} {instance} (.x({x}), .y({out.name}));")
        else:
            signals.append(f"    signal {out.name} : {_vector(lang, out.width)};")
            body.append(f"    {instance} : entity work.{block.name} port map (x => {x}, y => {out.name});")
    registers = []
    for reg in netlist.registers:
        src = netlist.signals[reg.source]  # type: ignore[index]
        if lang.verilog:
            signals.append(f"    reg  [{reg.width - 1}:0] {reg.name};")
        else:
            signals.append(f"    signal {reg.name} : {_vector(lang, reg.width)};")
        registers.append((reg.name, src.name))
    output = top_parts(lang, netlist, netlist.output_ids)
    if lang.verilog:
        return "\n".join(header + _verilog_top(netlist.top, inw, outw, latency, signals, body, registers, output))
    return "\n".join(header + _vhdl_top(netlist.top, inw, outw, latency, signals, body, registers, output))


def _verilog_top(
    top: str, inw: int, outw: int, latency: int, signals: list[str], body: list[str], registers: list, output: str
) -> list[str]:
    lines = [
        f"module {top} (",
        "    input  wire clk,",
        "    input  wire rst,",
        "    input  wire in_valid,",
        "    output wire in_ready,",
        f"    input  wire [{inw - 1}:0] in_data,",
        "    output wire out_valid,",
        "    input  wire out_ready,",
        f"    output wire [{outw - 1}:0] out_data",
        ");",
        *signals,
    ]
    if latency:
        shift = "in_valid" if latency == 1 else f"{{valid[{latency - 2}:0], in_valid}}"
        lines += [
            "    // The pipeline advances when its output is taken or not valid; only the valid bits are reset.",
            "    wire advance = ~out_valid | out_ready;",
            f"    reg  [{latency - 1}:0] valid;",
            "    assign in_ready = advance;",
            f"    assign out_valid = valid[{latency - 1}];",
            "    always @(posedge clk) begin",
            f"        if (rst) valid <= {latency}'b0;",
            f"        else if (advance) valid <= {shift};",
            "    end",
        ]
    else:
        lines += [
            "    // Combinational: no register, so out_valid is in_valid and in_ready is out_ready.",
            "    assign in_ready = out_ready;",
            "    assign out_valid = in_valid;",
        ]
    lines += body
    if registers:
        lines += ["    always @(posedge clk) begin", "        if (advance) begin"]
        lines += [f"            {name} <= {src};" for name, src in registers]
        lines += ["        end", "    end"]
    lines += [f"    assign out_data = {output};", "endmodule", ""]
    return lines


def _vhdl_top(
    top: str, inw: int, outw: int, latency: int, signals: list[str], body: list[str], registers: list, output: str
) -> list[str]:
    lines = [
        "library ieee;",
        "use ieee.std_logic_1164.all;",
        "",
        f"entity {top} is",
        "    port (",
        "        clk       : in  std_logic;",
        "        rst       : in  std_logic;",
        "        in_valid  : in  std_logic;",
        "        in_ready  : out std_logic;",
        f"        in_data   : in  std_logic_vector({inw - 1} downto 0);",
        "        out_valid : out std_logic;",
        "        out_ready : in  std_logic;",
        f"        out_data  : out std_logic_vector({outw - 1} downto 0)",
        "    );",
        f"end entity {top};",
        "",
        f"architecture rtl of {top} is",
        *signals,
    ]
    if latency:
        shift = "in_valid" if latency == 1 else f"valid({latency - 2} downto 0) & in_valid"
        lines += [
            "    signal advance : std_logic;",
            f"    signal valid : std_logic_vector({latency - 1} downto 0);",
            "begin",
            "    -- The pipeline advances when its output is taken or not valid; only the valid bits are reset.",
            f"    advance <= (not valid({latency - 1})) or out_ready;",
            "    in_ready <= advance;",
            f"    out_valid <= valid({latency - 1});",
            "    process (clk)",
            "    begin",
            "        if rising_edge(clk) then",
            "            if rst = '1' then",
            "                valid <= (others => '0');",
            "            elsif advance = '1' then",
            f"                valid <= {shift};" if latency > 1 else "                valid(0) <= in_valid;",
            "            end if;",
            "        end if;",
            "    end process;",
        ]
    else:
        lines += [
            "begin",
            "    -- Combinational: no register, so out_valid is in_valid and in_ready is out_ready.",
            "    in_ready <= out_ready;",
            "    out_valid <= in_valid;",
        ]
    lines += body
    if registers:
        lines += [
            "    process (clk)",
            "    begin",
            "        if rising_edge(clk) then",
            "            if advance = '1' then",
        ]
        lines += [f"                {name} <= {src};" for name, src in registers]
        lines += ["            end if;", "        end if;", "    end process;"]
    lines += [f"    out_data <= {output};", "end architecture rtl;", ""]
    return lines


def table_files(
    netlist: Netlist, lang: Lang, *, dont_cares: str, mapped: Mapping[str, Any] | None = None
) -> dict[str, str]:
    """``<table module>.v|.vhd`` for each distinct table: a ``case``, or with ``mapped`` (a
    :class:`~iotable.synth.MappedTable` per module name) its LUT netlist."""
    emit = table_verilog if lang.verilog else table_vhdl
    emit_mapped = mapped_verilog if lang.verilog else mapped_vhdl
    files = {}
    for module in netlist.modules.values():
        if mapped is None:
            text = emit(module.table, module.name, dont_cares=dont_cares)
        else:
            text = emit_mapped(module.table, mapped[module.name], module.name)
        files[f"{module.name}{lang.suffix}"] = text
    return files


def block_texts(lang: Lang, netlist: Netlist) -> str:
    """The layer and pool modules of a netlist."""
    return "".join(
        _layer_text(lang, netlist, block) if isinstance(block, Layer) else _pool_text(lang, block)
        for block in netlist.blocks
    )


def design_files(
    netlist: Netlist,
    language: str,
    *,
    dont_cares: str,
    header: list[str],
    mapped: Mapping[str, Any] | None = None,
) -> dict[str, str]:
    """Every source file of the design: the table modules (:func:`table_files`), then ``<top>.v|.vhd`` (layer
    and pool modules, then the top)."""
    lang = Lang(language)
    files = table_files(netlist, lang, dont_cares=dont_cares, mapped=mapped)
    comments = [f"{lang.comment} {line}" if line else "" for line in header]
    files[f"{netlist.top}{lang.suffix}"] = block_texts(lang, netlist) + _top_text(lang, netlist, comments)
    return files
