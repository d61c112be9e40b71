"""Constants of the bundle format that its parts share."""

from __future__ import annotations

#: How a table's packed address orders its input digits.
DIGIT_ORDER = "first input most significant"
#: Values of all domains of a bundle together, at most (four 24-bit domains).
MAX_DOMAIN_VALUES = 2**26
#: Golden inputs per network (fewer for large inputs).
GOLDEN_SAMPLES = 8
#: Input elements of all golden samples together, at most (one sample at least).
_GOLDEN_ELEMENTS = 2**16
