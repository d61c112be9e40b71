"""Tabulation: every input combination of every unit through the module (:mod:`.enumerate`: its passes in
:mod:`.passes`, run by :mod:`.forward` and :mod:`.packed`, packed black-box designs in :mod:`.design`), the
vectorized fast path for layers it recognizes (:mod:`.fastpath`: :mod:`.recognition`, the column records of
:mod:`.columns`, affine tails in :mod:`.affine`, fixed-point codes in :mod:`.kernel`), the probe that checks a
decomposition (:mod:`.probe`) and the on-disk table cache (:mod:`.cache`)."""
