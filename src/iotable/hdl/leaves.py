"""The modules :func:`~iotable.hdl.check_files` checks on their own (``separate``): which file declares which,
and the black-box stub that stands for each in the check of the rest."""

from __future__ import annotations

import re
from collections.abc import Collection
from pathlib import Path
from typing import Any

from ..errors import HDLError
from .language import Language

__all__ = ["check_leaves", "stub"]

_MODULE = re.compile(r"^\s*module\s+([A-Za-z_][A-Za-z0-9_$]*)", re.MULTILINE)


def check_leaves(files: dict[str, str], separate: Any, top: str, language: Language, *, what: str) -> dict[str, str]:
    """Module -> file for each file of ``separate``, checked: a Verilog file among ``files``, one module."""
    if isinstance(separate, str) or not isinstance(separate, Collection):
        msg = f"{what}: separate must be a collection of file names, received {type(separate).__name__}"
        raise HDLError(msg)
    leaves: dict[str, str] = {}
    for name in separate:
        if name not in files or language is not Language.VERILOG:
            problem = "is not among the files" if name not in files else "is not Verilog (VHDL is checked whole)"
            msg = f"{what}: separate names {name!r}, which {problem}; name Verilog files of the design"
            raise HDLError(msg)
        modules = _MODULE.findall(files[name])
        if len(modules) != 1 or modules[0] == top:
            msg = (
                f"{what}: separate names {name!r}, which declares {len(modules)} module(s) {modules[:5]}; a file "
                f"checked on its own declares exactly one module, not the top {top!r}"
            )
            raise HDLError(msg)
        leaves[modules[0]] = name
    return leaves


def stub(text: str, name: str, work: Path) -> str:
    """A file holding only the port header of the module in ``text`` (yosys reads a black box from it without
    parsing the body, which for a table is thousands of rows); ``name`` itself when its header is not ANSI."""
    header = re.search(r"^\s*module\b[^;]*;", text, re.MULTILINE)
    if header is None or not re.search(r"\b(?:input|output|inout)\b", header.group(0)):
        return name
    stub = f"iotable_stub_{name}"
    (work / stub).write_text(header.group(0) + "\nendmodule\n", encoding="utf-8")
    return stub
