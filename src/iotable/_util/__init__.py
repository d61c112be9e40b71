"""Helpers every stage uses: atomic file writes, subprocesses with timeouts, progress bars, eval mode,
element orders and notebook display. Imports nothing from iotable but :mod:`iotable.errors`."""
