"""Every name and every free text that reaches HDL source passes through here.

- :func:`check_name` validates a user's module name; :func:`verilog_name` / :func:`vhdl_name` are the one door
  for every identifier a printer writes (generated names are checked too, so a bad one fails loudly here
  instead of as a simulator's syntax error).
- :func:`verilog_comment` / :func:`vhdl_comment` turn free text (node and layer names, which come from the
  model) into the body of a one-line comment: printable ASCII, no line break, no comment delimiter, so that
  nothing a model is named can end a comment and become code. :func:`verilog_string` / :func:`vhdl_string`
  do the same for the text of a string literal (the benches' messages).
"""

from __future__ import annotations

import re

from ..errors import HDLError
from .language import Language

# IEEE 1800-2017 keywords (a superset of Verilog-2001's): verilator reads .v files as SystemVerilog, so a
# module named `logic` or `bit` would not compile there even though Verilog-2001 allows it.
_VERILOG_KEYWORDS = frozenset(
    """
    accept_on alias always always_comb always_ff always_latch and assert assign assume automatic before begin
    bind bins binsof bit break buf bufif0 bufif1 byte case casex casez cell chandle checker class clocking cmos
    config const constraint context continue cover covergroup coverpoint cross deassign default defparam design
    disable dist do edge else end endcase endchecker endclass endclocking endconfig endfunction endgenerate
    endgroup endinterface endmodule endpackage endprimitive endprogram endproperty endspecify endsequence
    endtable endtask enum event eventually expect export extends extern final first_match for force foreach
    forever fork forkjoin function generate genvar global highz0 highz1 if iff ifnone ignore_bins illegal_bins
    implements implies import incdir include initial inout input inside instance int integer interconnect
    interface intersect join join_any join_none large let liblist library local localparam logic longint
    macromodule matches medium modport module nand negedge nettype new nexttime nmos nor noshowcancelled not
    notif0 notif1 null or output package packed parameter pmos posedge primitive priority program property
    protected pull0 pull1 pulldown pullup pulsestyle_ondetect pulsestyle_onevent pure rand randc randcase
    randsequence rcmos real realtime ref reg reject_on release repeat restrict return rnmos rpmos rtran
    rtranif0 rtranif1 s_always s_eventually s_nexttime s_until s_until_with scalared sequence shortint
    shortreal showcancelled signed small soft solve specify specparam static string strong strong0 strong1
    struct super supply0 supply1 sync_accept_on sync_reject_on table tagged task this throughout time
    timeprecision timeunit tran tranif0 tranif1 tri tri0 tri1 triand trior trireg type typedef union unique
    unique0 unsigned until until_with untyped use uwire var vectored virtual void wait wait_order wand weak
    weak0 weak1 while wildcard wire with within wor xnor xor
    """.split()
)

# VHDL-2008 reserved words (VHDL names are case-insensitive, so compare in lower case).
_VHDL_KEYWORDS = frozenset(
    """
    abs access after alias all and architecture array assert assume assume_guarantee attribute begin block
    body buffer bus case component configuration constant context cover default disconnect downto else elsif
    end entity exit fairness file for force function generate generic group guarded if impure in inertial
    inout is label library linkage literal loop map mod nand new next nor not null of on open or others out
    package parameter port postponed procedure process property protected pure range record register reject
    release rem report restrict restrict_guarantee return rol ror select sequence severity shared signal sla
    sll sra srl strong subtype then to transport type unaffected units until use variable vmode vprop vunit
    wait when while with xnor xor
    """.split()
)

# Names the generated text uses itself: the ports, the bench's signals and the architecture.
_TAKEN = frozenset(
    {"address", "codes", "chunk", "expected", "vectors", "word", "matched", "dut", "rtl", "bench", "row"}
)

_VERILOG_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_VHDL_NAME = re.compile(r"[A-Za-z](?:_?[A-Za-z0-9])*\Z")
_FILE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*\Z")


#: Each language's identifiers: the pattern, the rule in words, and whether a name is reserved.
_RULES = {
    Language.VERILOG: (
        _VERILOG_NAME,
        "a letter or '_' first, then letters, digits or '_'",
        _VERILOG_KEYWORDS.__contains__,
    ),
    Language.VHDL: (
        _VHDL_NAME,
        "a letter first, then letters, digits and single '_' (none at the end)",
        lambda name: name.lower() in _VHDL_KEYWORDS,
    ),
}


def check_name(name: object, *, language: Language, what: str) -> str:
    """``name`` if it is a legal, unreserved identifier of ``language``; else :class:`HDLError` saying why."""
    if not isinstance(name, str):
        msg = f"{what}: the module name must be a string, received {type(name).__name__} {name!r}"
        raise HDLError(msg)
    pattern, rule, is_reserved = _RULES[language]
    reserved = is_reserved(name)
    if pattern.match(name) is None:
        msg = f"{what}: module name {name!r} is not a legal {language.name} identifier; expected {rule}"
        raise HDLError(msg)
    if reserved or name.lower() in _TAKEN:
        kind = "a reserved word" if reserved else "a name the generated code uses itself"
        msg = f"{what}: module name {name!r} is {kind} in {language.name}; choose another (e.g. {name}_t)"
        raise HDLError(msg)
    if len(name) > 200:
        msg = f"{what}: module name of {len(name)} characters; expected at most 200"
        raise HDLError(msg)
    return name


def check_file_name(name: object, *, what: str) -> str:
    """``name`` if it is a plain file name (no directory, no leading dot); else :class:`HDLError`."""
    if not isinstance(name, str) or _FILE_NAME.match(name) is None:
        msg = (
            f"{what}: file name {name!r} is not a plain file name; expected letters, digits, '_', '.' or '-' "
            "with no directory part (e.g. 'layer0_u3.v')"
        )
        raise HDLError(msg)
    return name


def printable(text: object) -> str:
    """``text`` as printable ASCII on one line: every other character (newlines, control characters,
    non-ASCII) becomes ``?``."""
    ascii_text = str(text).encode("ascii", "replace").decode("ascii")
    return "".join(c if c.isprintable() else "?" for c in ascii_text)


def _identifier(name: str, pattern: re.Pattern[str], language: str) -> str:
    if pattern.match(name) is None:
        msg = f"generated {language} identifier {name!r} is not legal; this is a bug in iotable.hdl, please report it"
        raise HDLError(msg)
    return name


def verilog_name(name: str) -> str:
    """``name`` as a Verilog identifier: checked, returned unchanged."""
    return _identifier(name, _VERILOG_NAME, "Verilog")


def vhdl_name(name: str) -> str:
    """``name`` as a VHDL identifier: checked, returned unchanged."""
    return _identifier(name, _VHDL_NAME, "VHDL")


def verilog_comment(text: object) -> str:
    """``text`` safe inside a Verilog ``//`` comment (and a ``/* */`` one): one printable line without
    ``/*`` or ``*/``.

    Example:
        >>> verilog_comment("a\\nmodule evil; endmodule // */")
        'a?module evil; endmodule // *?'
    """
    return printable(text).replace("/*", "/?").replace("*/", "*?")


def vhdl_comment(text: object) -> str:
    """``text`` safe inside a VHDL ``--`` comment (and a ``/* */`` one of VHDL-2008): one printable line
    without ``/*`` or ``*/``."""
    return verilog_comment(text)


def verilog_string(text: object) -> str:
    """``text`` safe inside a Verilog string literal: one printable line, no ``"``, ``\\`` or ``%``."""
    return printable(text).replace('"', "'").replace("\\", "/").replace("%", "%%")


def vhdl_string(text: object) -> str:
    """``text`` safe inside a VHDL string literal: one printable line, no ``"``."""
    return printable(text).replace('"', "'")
