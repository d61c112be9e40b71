"""Where :func:`~iotable.hdl.implement` implements a design: a :class:`Target` (family, device, package), read
from its name by :func:`parse_target`."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ..errors import OptionError

__all__ = ["Target", "parse_target"]

# iCE40 devices nextpnr-ice40 knows, and the package each is placed in unless another is given.
_ICE40 = {
    "lp384": "qn32", "lp1k": "tq144", "lp4k": "tq144", "lp8k": "ct256", "hx1k": "tq144", "hx4k": "tq144",
    "hx8k": "ct256", "up3k": "sg48", "up5k": "sg48", "u4k": "sg48",
}  # fmt: skip
_ECP5 = ("12k", "25k", "45k", "85k", "um-25k", "um-45k", "um-85k", "um5g-25k", "um5g-45k", "um5g-85k")
_XILINX = ("xc7", "xcu", "xcup")


@dataclass(frozen=True)
class Target:
    """Where a design is implemented: a family (``"ice40"``, ``"ecp5"``, ``"xilinx"``), a device of it and,
    for place and route, a package."""

    family: str
    device: str
    package: str | None

    @property
    def name(self) -> str:
        """The target as :func:`parse_target` reads it (``"ecp5-85k"``, ``"xilinx"``)."""
        return f"{self.family}-{self.device}" if self.family != "xilinx" or self.device != "xc7" else "xilinx"

    @property
    def placed(self) -> bool:
        """Whether the flow places and routes (Lattice), or stops after synthesis (Xilinx)."""
        return self.family != "xilinx"


def parse_target(value: Any, *, package: str | None = None, what: str = "implement") -> Target:
    """``"ice40-<device>"`` (``hx8k``, ``up5k``, ...), ``"ecp5-<size>"`` (``25k``, ``85k``, ``um5g-45k``, ...)
    or ``"xilinx"`` (``"xilinx-xcup"`` for UltraScale+) as a :class:`Target`; an :class:`OptionError` listing
    the accepted ones otherwise.

    Example:
        >>> parse_target("ecp5-85k")
        Target(family='ecp5', device='85k', package='CABGA381')
    """
    accepted = (
        f"'ice40-<device>' ({', '.join(_ICE40)}), 'ecp5-<size>' ({', '.join(_ECP5)}), 'xilinx' or "
        f"'xilinx-<family>' ({', '.join(_XILINX)})"
    )
    text = value.lower() if isinstance(value, str) else None
    family, _, device = (text or "").partition("-")
    if family == "xilinx" and device in ("", *_XILINX):
        if package is not None:
            msg = f"{what}: target {value!r} is synthesis only and has no package; leave package out"
            raise OptionError(msg)
        return Target("xilinx", device or "xc7", None)
    if (family == "ice40" and device in _ICE40) or (family == "ecp5" and device in _ECP5):
        if package is not None and (not isinstance(package, str) or not re.fullmatch(r"[A-Za-z0-9]+", package)):
            msg = f"{what}: package must be a package name such as 'ct256' or 'CABGA381', received {package!r}"
            raise OptionError(msg)
        default = _ICE40[device] if family == "ice40" else "CABGA381"
        return Target(family, device, package or default)
    msg = f"{what}: unknown target {value!r}; expected {accepted}"
    raise OptionError(msg)
