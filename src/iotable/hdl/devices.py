"""What a device holds, for :func:`~iotable.hdl.implement`'s checks before place and route: its logic cells
(LUT4 with a flip-flop), the user I/O pins of a package, and the fastest clock its global clock network is
rated for.

- Logic cells: Lattice's family tables (iCE40 LP/HX data sheet DS1040 and iCE40 UltraPlus data sheet
  FPGA-DS-02008: "Logic Cells (LUT + Flip-Flop)"; ECP5 and ECP5-5G data sheet FPGA-DS-02012: "LUTs (K)",
  12,288 / 24,288 / 43,848 / 83,640 LUT4). An iCE40 logic cell holds one LUT4 and one flip-flop, an ECP5 slice
  two of each, and an ECP5 carry cell (``CCU2C``) takes a slice's two LUTs.
- Pins: the programmable I/O of the package (the same tables); a package not listed here is not checked.
- Clock network: the global buffer's maximum frequency of the iCE40 LP/HX data sheet (275 MHz) and the
  primary clock tree's of the ECP5 data sheet (400 MHz). A register-to-register path faster than that is
  the logic's speed, not a clock the device distributes; the iCE40 UltraPlus parts are not listed.
"""

from __future__ import annotations

from ..errors import HDLError
from .target import Target

__all__ = ["cells_needed", "check_fits", "check_min_luts", "clock_limit", "logic_cells", "package_pins"]

_ICE40_CELLS = {
    "lp384": 384, "lp1k": 1280, "lp4k": 3520, "lp8k": 7680, "hx1k": 1280, "hx4k": 3520, "hx8k": 7680,
    "up3k": 2800, "up5k": 5280, "u4k": 3520,
}  # fmt: skip
_ECP5_CELLS = {"12k": 12288, "25k": 24288, "45k": 43848, "85k": 83640}
_PINS = {
    ("ice40", "lp384", "qn32"): 21, ("ice40", "hx1k", "tq144"): 95, ("ice40", "hx4k", "tq144"): 95,
    ("ice40", "hx8k", "ct256"): 206, ("ice40", "up5k", "sg48"): 39, ("ice40", "up3k", "sg48"): 39,
    ("ecp5", "12k", "CABGA381"): 197, ("ecp5", "25k", "CABGA381"): 197, ("ecp5", "45k", "CABGA381"): 203,
    ("ecp5", "85k", "CABGA381"): 205,
}  # fmt: skip
_CLOCK_MHZ = {"ice40-lp": 275.0, "ice40-hx": 275.0, "ecp5": 400.0}


def _size(target: Target) -> str:
    """An ECP5 device's size (``"um5g-85k"`` -> ``"85k"``), else the device."""
    return target.device.rpartition("-")[2] if target.family == "ecp5" else target.device


def logic_cells(target: Target) -> int | None:
    """The LUT4 logic cells of ``target``'s device; ``None`` for a family without a table (Xilinx)."""
    table = {"ice40": _ICE40_CELLS, "ecp5": _ECP5_CELLS}.get(target.family, {})
    return table.get(_size(target))


def cells_needed(target: Target, counts: dict[str, int]) -> int:
    """The fewest logic cells the synthesized cells can take: every LUT (and, on ECP5, two for each carry
    cell) and every flip-flop have a cell each, and a cell holds one of each."""
    luts = counts["luts"] + (2 * counts["carry"] if target.family == "ecp5" else 0)
    return max(luts, counts["flip_flops"])


def package_pins(target: Target) -> int | None:
    """The user I/O pins of ``target``'s package, ``None`` when not listed."""
    return _PINS.get((target.family, _size(target), str(target.package)))


def clock_limit(target: Target) -> float | None:
    """The fastest clock ``target``'s global clock network is rated for, in MHz; ``None`` when not listed."""
    if target.family == "ice40":
        return _CLOCK_MHZ.get(f"ice40-{target.device[:2]}")
    return _CLOCK_MHZ.get(target.family)


def check_fits(target: Target, counts: dict[str, int], *, what: str) -> None:
    """Refuse, before place and route, a synthesized design whose cells cannot fit ``target``'s device
    (:func:`cells_needed` against :func:`logic_cells`): an :class:`HDLError` naming both and the fix."""
    available = logic_cells(target)
    needed = cells_needed(target, counts)
    if available is None or needed <= available:
        return
    msg = (
        f"{what}: the design needs at least {needed:,} logic cells after synthesis ({counts['luts']:,} LUT4, "
        f"{counts['carry']:,} carry cells, {counts['flip_flops']:,} flip-flops) and {target.name} has "
        f"{available:,} ({100 * needed / available:.0f}%); not placed: pick a larger device (target=), or make "
        "the design smaller"
    )
    raise HDLError(msg)


def check_min_luts(target: Target, luts: int | None, *, top: str, what: str) -> None:
    """Refuse, before synthesis, a design whose lower bound of LUT cells (:mod:`.fit`: the fewest synthesis can
    leave of its tables' cells as placed) exceeds ``target``'s logic cells: an :class:`HDLError` naming the
    design, both counts and the fix. No bound (``None``) or no table of the device: nothing is checked here,
    and :func:`check_fits` checks the synthesized cells."""
    available = logic_cells(target)
    if luts is None or available is None or luts <= available:
        return
    msg = (
        f"{what}: design {top!r} needs at least {luts:,} LUT4 cells (a lower bound, counted before synthesis "
        f"from its tables' verified LUT netlists as placed, less every cell synthesis could remove) and "
        f"{target.name} has {available:,} logic cells ({100 * luts / available:.0f}%); not synthesized: pick a "
        "larger device (target=), or a smaller model (fewer or narrower tables); out_of_context=True does not "
        "shrink the logic"
    )
    raise HDLError(msg)
