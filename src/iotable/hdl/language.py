"""The hardware description languages iotable writes, as an :class:`~enum.Enum`: public options name one with
a string (``"verilog"``, ``"vhdl"``), converted here once; everything inside the package passes the member."""

from __future__ import annotations

import enum
from typing import Any

from ..errors import OptionError

__all__ = ["Language"]


class Language(str, enum.Enum):
    """A hardware description language iotable writes."""

    VERILOG = "verilog"
    VHDL = "vhdl"

    @classmethod
    def parse(cls, value: Any, *, what: str) -> Language:
        """``value`` (a member or its name, any case) as a member; else :class:`OptionError` listing them."""
        if isinstance(value, Language):
            return value
        if isinstance(value, str) and value.lower() in {m.value for m in cls}:
            return cls(value.lower())
        accepted = ", ".join(repr(m.value) for m in cls)
        msg = f"{what}: unknown language {value!r}; expected one of {accepted}"
        raise OptionError(msg)

    @property
    def suffixes(self) -> tuple[str, ...]:
        """The suffixes of this language's source files, the one iotable writes first."""
        return {"verilog": (".v", ".sv"), "vhdl": (".vhd", ".vhdl")}[self.value]
