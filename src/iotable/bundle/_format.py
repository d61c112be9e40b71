"""Constants of the bundle format that its parts share."""

from __future__ import annotations

#: How a table's packed address orders its input digits.
DIGIT_ORDER = "first input most significant"
#: Values of all domains of a bundle together, at most (four 24-bit domains).
MAX_DOMAIN_VALUES = 2**26
#: The first format version whose table nodes count their address bits as hardware packs them (an input of a
#: one-value domain a 1-bit field); older bundles counted 0 bits for it and are upgraded as they load.
HARDWARE_BITS = 6
#: Golden inputs per network (fewer for large inputs).
GOLDEN_SAMPLES = 8
#: Input elements of all golden samples together, at most (one sample at least).
_GOLDEN_ELEMENTS = 2**16
