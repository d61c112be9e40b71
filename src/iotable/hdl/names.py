"""Every name and every free text that reaches HDL source passes through here.

- :func:`check_name` validates a user's module name (VHDL: also no library or standard package name);
  :func:`check_unique` that a design's module names differ ignoring case; :func:`verilog_name` /
  :func:`vhdl_name` are the one door for every identifier a printer writes (generated names are checked too,
  so a bad one fails loudly here instead of as a simulator's syntax error).
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

# VHDL names an entity must not take: the libraries (an entity named `ieee` clashes with `library ieee`) and
# what the packages the generated code `use`s declare (STD.STANDARD, STD.TEXTIO, STD.ENV, IEEE.STD_LOGIC_1164,
# IEEE.NUMERIC_STD), with the other common IEEE packages: an entity's name is visible in its architecture, so an
# entity named `std_logic` or `rising_edge` hides the type or function its own ports and processes use.
_VHDL_LIBRARY_NAMES = frozenset(
    """
    std ieee work standard textio env std_logic_1164 numeric_std numeric_bit numeric_std_unsigned
    numeric_bit_unsigned std_logic_textio std_logic_arith std_logic_unsigned std_logic_signed math_real
    math_complex fixed_pkg float_pkg fixed_generic_pkg float_generic_pkg fixed_float_types vital_timing
    vital_primitives
    boolean false true bit character severity_level note warning error failure integer real time fs ps ns us ms
    sec min hr delay_length now natural positive string boolean_vector bit_vector integer_vector real_vector
    time_vector file_open_kind read_mode write_mode append_mode file_open_status open_ok status_error name_error
    mode_error file_open_state state_open state_closed file_origin_kind file_origin_begin file_origin_current
    file_origin_end to_string to_bstring to_ostring to_hstring to_binary_string to_octal_string to_hex_string
    minimum maximum rising_edge falling_edge
    nul soh stx etx eot enq ack bel bs ht lf vt ff cr so si dle dc1 dc2 dc3 dc4 nak syn etb can em sub esc fsp
    gsp rsp usp del
    line text side right left width input output read readline write writeline sread oread hread bread owrite
    hwrite bwrite swrite tee flush justify
    stop finish resolution_limit
    std_ulogic std_ulogic_vector resolved std_logic std_logic_vector x01 x01z ux01 ux01z to_bit to_bitvector
    to_bv to_stdulogic to_stdlogicvector to_stdulogicvector to_slv to_sulv to_std_logic_vector
    to_std_ulogic_vector to_bit_vector to_01 to_x01 to_x01z to_ux01 is_x
    unsigned signed unresolved_unsigned unresolved_signed u_unsigned u_signed shift_left shift_right
    rotate_left rotate_right resize to_integer to_unsigned to_signed std_match find_leftmost find_rightmost
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
    if language is Language.VHDL and name.lower() in _VHDL_LIBRARY_NAMES:
        msg = (
            f"{what}: module name {name!r} is the name of a VHDL library or of something a standard package "
            f"declares (ieee, std, work, std_logic, numeric_std, rising_edge, ...), which the entity would hide "
            f"or clash with; choose another (e.g. {name}_t)"
        )
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


def check_unique(names: list[str], *, what: str) -> None:
    """Raise :class:`HDLError` if two of ``names`` (a design's module names) are equal ignoring case: VHDL
    identifiers are case-insensitive and so are some file systems, so one would replace the other."""
    seen: dict[str, str] = {}
    for name in names:
        other = seen.setdefault(name.lower(), name)
        if other is not name:
            msg = (
                f"{what}: two modules of the design are named {other!r} and {name!r}, the same name ignoring case; "
                "this is a bug in iotable.hdl, please report it"
            )
            raise HDLError(msg)


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
