"""Design-space sweeps: trained variants × implementation options, measured cheapest first, and their Pareto front.

- :class:`Variant` — one trained model (a torch module with :func:`iotable.precompute`'s arguments, or a saved
  bundle), with the inputs to verify it on and a scorer of its accuracy; :meth:`Variant.fingerprint` digests its
  content.
- :func:`sweep` — every variant with every target, pipelining setting (:class:`Pipelining`: ``pipeline=`` and
  ``pipeline_luts=`` as :func:`iotable.hdl.export` takes them), mapping effort and placement seed, through the
  stages estimate → tables → verification → ABC → place and route; the two expensive ones run only for the
  candidates on or near the front of the cheaper stages' numbers (:mod:`.pareto`). Each stage's result is a JSON
  record in the sweep's folder, written as the stage ends and reused by a rerun when its fingerprint and
  options match (:mod:`.store`).
- :class:`SweepResult` — a :class:`SweepPoint` per candidate (its options and fingerprint rebuild its design),
  the front over LUTs, Fmax, latency and accuracy, ``to_csv``, ``to_markdown`` and ``plot`` (matplotlib, the
  extra ``iotable[sweep]``); ``iotable sweep BUNDLE... --plot FILE.png`` on the command line (:mod:`.command`).

docs/hardware.md ("Sweeps") describes the stages, the pruning and the records.
"""

from __future__ import annotations

from .options import Pipelining
from .pareto import dominates, front
from .result import SweepPoint, SweepResult
from .run import sweep
from .variant import Variant

__all__ = ["Pipelining", "SweepPoint", "SweepResult", "Variant", "dominates", "front", "sweep"]
