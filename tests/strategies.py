"""Hypothesis strategies for small layer configurations (kept together, as the tests share them)."""

from __future__ import annotations

from hypothesis import strategies as st

from iotable import Domain

domains = st.sampled_from(
    [Domain.uniform(1), Domain.uniform(2), Domain.uniform(2, signed=True), Domain.uniform(2, signed=True, narrow=True)]
)


@st.composite
def conv1d_configs(draw):
    """Conv1d hyper-parameters whose tables stay under a few hundred rows."""
    groups = draw(st.integers(1, 3))
    in_per_group = draw(st.integers(1, 2))
    out_per_group = draw(st.integers(1, 2))
    kernel = draw(st.integers(1, 3 if in_per_group == 1 else 2))
    return {
        "in_channels": groups * in_per_group,
        "out_channels": groups * out_per_group,
        "kernel_size": kernel,
        "groups": groups,
        "stride": draw(st.integers(1, 2)),
        "dilation": draw(st.integers(1, 2)),
        "padding": draw(st.integers(0, kernel - 1)),
    }


@st.composite
def sparse_fan_ins(draw, max_inputs: int = 6, max_units: int = 4, max_fan_in: int = 3):
    """(inputs, fan_in lists) of a LogicNets-style sparse layer."""
    n_in = draw(st.integers(2, max_inputs))
    n_units = draw(st.integers(1, max_units))
    unit = st.lists(st.integers(0, n_in - 1), min_size=1, max_size=max_fan_in, unique=True)
    return n_in, draw(st.lists(unit, min_size=n_units, max_size=n_units))


#: Elementwise tails between a linear layer and its quantizer (see :func:`fast_path_layers`).
TAILS = (
    ("bn", "relu"),
    ("bn", "hardtanh"),
    ("relu6",),
    ("bn",),
    ("relu", "bn"),
    ("bn", "relu", "bn"),
    ("identity", "dropout"),
    ("bn", "sigmoid"),
    ("bn", "tanh"),
    ("leaky",),
    (),
)


@st.composite
def fast_path_layers(draw):
    """A linear or convolutional layer, an elementwise tail and a quantizer, with tables of a few hundred rows.

    Returns the hyper-parameters as a dict: ``head`` (``"linear"``, ``"conv1d"``, ``"conv2d"``) and its
    sizes, ``tail`` (names from :data:`TAILS`), the quantizer's ``bits``, ``signed``, ``narrow``,
    ``scale`` and ``zero_point``, the input ``domain`` and a ``seed`` for the weights.
    """
    head = draw(st.sampled_from(["linear", "conv1d", "conv2d"]))
    config = {"head": head, "tail": draw(st.sampled_from(TAILS)), "seed": draw(st.integers(0, 2**16))}
    signed = draw(st.booleans())
    config.update(
        bits=draw(st.integers(1, 3)),
        signed=signed,
        narrow=draw(st.booleans()) if signed else False,
        scale=draw(st.sampled_from([0.05, 0.25, 0.3, 1.0])),
        zero_point=draw(st.integers(-1, 1)),
        domain=draw(domains),
    )
    if head == "linear":
        n_in, fan_in = draw(sparse_fan_ins(max_inputs=6, max_units=4, max_fan_in=4))
        config.update(n_in=n_in, fan_in=fan_in)
    else:
        rank = 2 if head == "conv2d" else 1
        in_per_group = draw(st.integers(1, 2))
        kernel = draw(st.sampled_from([k for k in (1, 2, 3) if in_per_group * k**rank <= 4]))  # fan-in <= 4
        config.update(
            groups=draw(st.integers(1, 2)),
            in_per_group=in_per_group,
            out_per_group=draw(st.integers(1, 2)),
            kernel=kernel,
            stride=draw(st.integers(1, 2)),
            padding=draw(st.integers(0, kernel - 1)),
        )
    return config


@st.composite
def output_domains(draw):
    """Uniform domains of any sign, width, scale and zero point, and explicit (possibly uneven) value sets."""
    if draw(st.booleans()):
        return Domain.uniform(
            draw(st.integers(1, 5)),
            signed=draw(st.booleans()),
            scale=draw(st.sampled_from([1.0, 0.5, 0.1, 0.3, 2.0**-7, 3.0])),
            zero_point=draw(st.sampled_from([0, 1, -2])),
        )
    values = draw(st.lists(st.floats(-100, 100, allow_nan=False, width=32), min_size=1, max_size=9, unique=True))
    return Domain.values(values)


@st.composite
def packable_fan_ins(draw):
    """(q, fan-ins of equal length over few inputs, per-unit sizes, capacity) for packed-pass designs."""
    q = draw(st.sampled_from([2, 3, 4, 5, 8, 9]))
    width = draw(st.integers(1, {2: 6, 3: 4, 4: 4, 5: 3, 8: 3, 9: 3}[q]))
    n_in = draw(st.integers(width, 12))
    unit = st.lists(st.integers(0, n_in - 1), min_size=width, max_size=width, unique=True).map(tuple)
    fan_ins = draw(st.lists(unit, min_size=1, max_size=12))
    sizes = draw(st.lists(st.integers(1, 5), min_size=len(fan_ins), max_size=len(fan_ins)))
    return q, fan_ins, sizes, draw(st.integers(1, 40))


@st.composite
def packed_layers(draw):
    """(domain, inputs, fan-ins) of a sparse layer whose tables have 1024+ rows, so forward passes are packed."""
    domain, width = draw(
        st.sampled_from(
            [
                (Domain.uniform(1), 10),
                (Domain.uniform(2), 5),
                (Domain.uniform(2, signed=True, narrow=True), 7),
                (Domain.uniform(3, signed=True), 4),
            ]
        )
    )
    n_in = draw(st.integers(width, width + 4))
    unit = st.lists(st.integers(0, n_in - 1), min_size=width, max_size=width, unique=True)
    return domain, n_in, draw(st.lists(unit, min_size=1, max_size=5))


#: torch's padding modes, as ``padding_mode=`` names them.
PADDING_MODES = ("zeros", "reflect", "replicate", "circular")


@st.composite
def pad_configs(draw):
    """(per-sample shape, (before, after) per spatial axis, mode, channels_last) that torch can pad.

    Reflect needs less padding than the extent on each side, circular at most the extent.
    """
    rank = draw(st.integers(1, 2))
    mode = draw(st.sampled_from(PADDING_MODES))
    size = tuple(draw(st.integers(1, 6)) for _ in range(rank))
    limit = {"reflect": lambda n: n - 1, "circular": lambda n: n}.get(mode, lambda n: 4)
    padding = tuple((draw(st.integers(0, limit(n))), draw(st.integers(0, limit(n)))) for n in size)
    channels = draw(st.integers(1, 3))
    channels_last = draw(st.booleans())
    shape = (*size, channels) if channels_last else (channels, *size)
    return shape, padding, mode, channels_last


@st.composite
def padded_conv_configs(draw):
    """Conv1d/Conv2d hyper-parameters with a padding mode, an even or odd kernel, and an input torch can pad."""
    rank = draw(st.integers(1, 2))
    groups = draw(st.integers(1, 2))
    kernel = draw(st.integers(1, 3 if rank == 1 else 2))
    dilation = draw(st.integers(1, 2))
    mode = draw(st.sampled_from(PADDING_MODES))
    same = draw(st.booleans())
    stride = 1 if same else draw(st.integers(1, 2))
    padding = "same" if same else draw(st.integers(0, kernel))
    size = tuple(draw(st.integers(dilation * (kernel - 1) + 2, 7)) for _ in range(rank))
    return {
        "rank": rank,
        "conv": {
            "in_channels": groups,
            "out_channels": groups * draw(st.integers(1, 2)),
            "kernel_size": kernel,
            "groups": groups,
            "stride": stride,
            "dilation": dilation,
            "padding": padding,
            "padding_mode": mode,
        },
        "size": size,
    }
