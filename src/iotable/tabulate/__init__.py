"""Tabulation: every input combination of every unit through the module (:mod:`.enumerate`), the
vectorized fast path for layers it recognizes (:mod:`.fastpath`), the probe that checks a decomposition
(:mod:`.probe`), packed black-box designs (:mod:`.design`) and the on-disk table cache (:mod:`.cache`)."""
