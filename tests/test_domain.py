"""Domains: integer-quantization semantics, explicit value sets, encode and decode."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from iotable import Domain
from iotable.errors import DomainError
from iotable.nn import Quantize, domain_of


@pytest.mark.parametrize(
    ("bits", "signed", "narrow", "expected"),
    [
        (2, False, False, [0, 1, 2, 3]),
        (2, False, True, [0, 1, 2]),
        (2, True, False, [-2, -1, 0, 1]),
        (2, True, True, [-1, 0, 1]),
        (1, True, False, [-1, 0]),
        (3, True, True, [-3, -2, -1, 0, 1, 2, 3]),
    ],
)
def test_uniform_integer_range(bits, signed, narrow, expected):
    """Uniform domains follow the QONNX/brevitas min/max formulas for signed and narrow ranges."""
    d = Domain.uniform(bits, signed=signed, narrow=narrow)
    assert d.values.tolist() == expected
    assert len(d) == len(expected)


def test_uniform_scale_and_zero_point():
    """Values are (q - zero_point) * scale, computed in float32."""
    d = Domain.uniform(2, scale=0.1, zero_point=1)
    q = np.arange(4, dtype=np.float32)
    assert d.values.tolist() == ((q - np.float32(1)) * np.float32(0.1)).astype(np.float64).tolist()
    assert d.zero_code == 1


def test_explicit_values_sorted_and_bits():
    """Domain.values sorts explicit values; bits is ceil(log2 n) also for sizes that are not powers of two."""
    assert Domain.values([1, -1]).values.tolist() == [-1.0, 1.0]
    assert Domain.values([1, -1]).bits == 1
    assert Domain.values([0, 1, 2]).bits == 2
    assert Domain.values([0, 1, 2, 3, 4]).bits == 3
    assert Domain.values([7]).bits == 0
    assert Domain.uniform(3).bits == 3


def test_encode_decode_round_trip():
    """decode(encode(v)) == v for every value, in any shape, from arrays and tensors."""
    d = Domain.uniform(3, signed=True, scale=0.25)
    codes = np.arange(len(d)).reshape(2, 4)
    values = d.decode(codes)
    assert d.encode(values).tolist() == codes.tolist()
    assert d.encode(torch.tensor(values, dtype=torch.float32)).tolist() == codes.tolist()
    assert d.encode(values).dtype == np.uint8


def test_encode_rejects_value_outside_domain():
    """A value not in the domain is an error naming the value and the expected values."""
    d = Domain.uniform(2)
    with pytest.raises(
        DomainError, match=r"value 0\.5 at index \(1,\) is not in Domain.uniform\(2\); expected one of \{0, 1, 2, 3\}"
    ):
        d.encode([1.0, 0.5])
    with pytest.raises(DomainError, match="nan"):
        d.encode([float("nan")])


def test_decode_rejects_bad_codes():
    """Codes out of range or not integers are errors."""
    d = Domain.uniform(2)
    with pytest.raises(DomainError, match=r"code 4 is out of range .* expected 0\.\.3"):
        d.decode([4])
    with pytest.raises(DomainError, match="expected integer codes"):
        d.decode([0.5])


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"bits": 0}, "bits as an integer from 1 to 24"),
        ({"bits": 2, "scale": 0}, "scale > 0"),
        ({"bits": 2, "scale": float("inf")}, "finite scale"),
        ({"bits": 2, "zero_point": float("nan")}, "finite zero_point"),
        ({"bits": 1, "narrow": True, "signed": False}, None),
    ],
)
def test_uniform_rejects_bad_parameters(kwargs, words):
    """Bad bit widths and scales are rejected with what was expected."""
    if words is None:  # 1-bit unsigned narrow keeps the single value 0: valid
        assert Domain.uniform(**kwargs).values.tolist() == [0.0]
        return
    with pytest.raises(DomainError, match=words):
        Domain.uniform(**kwargs)


def test_explicit_values_rejects_duplicates_and_empty():
    """Explicit domains need distinct finite values."""
    with pytest.raises(DomainError, match="distinct"):
        Domain.values([1, 1])
    with pytest.raises(DomainError, match="at least one value"):
        Domain.values([])


def test_a_domain_float32_cannot_tell_apart_or_hold_is_refused_and_every_accepted_one_encodes_its_values():
    """Values that collide in float32, lie past its range or round further than the domain's tolerance are refused
    by name; a domain accepted at the edge of float32 encodes its own values as float32 (as net.run reads them)."""
    above = float(np.nextafter(np.float32(0.1), np.float32(1)))
    for values in ([0.1, 0.1 + 1e-12], [0, 1e39], [0, 3.4e38, 3.5e38], [-1e39, 0], [0.1, above, 3e38]):
        with pytest.raises(DomainError, match="float32"):
            Domain(values)
    for values in ([0.1, above], [0, 3.4e38], [1e-30, 2e-30, 0.5], [0.1, 0.2, 0.3]):
        domain = Domain(values)
        assert domain.encode(domain.values.astype(np.float32)).tolist() == list(range(len(values)))


def test_domains_are_immutable_hashable_and_equal_by_value():
    """Equal values make equal domains; attributes cannot be reassigned."""
    assert Domain.uniform(1) == Domain.values([0, 1])
    assert len({Domain.uniform(2), Domain.uniform(2)}) == 1
    with pytest.raises(AttributeError):
        Domain.uniform(1).foo = 1
    with pytest.raises(ValueError):
        Domain.uniform(1).values[0] = 5


def test_quantize_outputs_are_domain_values_bit_for_bit():
    """Quantize rounds half to even, clamps, and returns exactly the domain's float32 values."""
    q = Quantize(3, signed=True, scale=0.1, zero_point=0)
    x = torch.linspace(-1, 1, 1001)
    y = q(x)
    assert set(y.tolist()) <= set(np.float32(q.domain.values).astype(np.float64).tolist())
    assert q.domain.encode(y).max() == len(q.domain) - 1
    half = Quantize(4)
    assert half(torch.tensor([0.5, 1.5, 2.5])).tolist() == [0.0, 2.0, 2.0]
    assert domain_of(q) is q.domain and domain_of(torch.nn.ReLU()) is None


def test_quantize_straight_through_gradient():
    """Gradients pass through the rounding inside the range and stop outside it."""
    q = Quantize(2, scale=0.5)
    x = torch.tensor([0.3, 0.9, -1.0, 5.0], requires_grad=True)
    q(x).sum().backward()
    assert x.grad.tolist() == [1.0, 1.0, 0.0, 0.0]


def test_copies_and_pickles_keep_the_domain():
    """``copy``/``deepcopy`` give the same immutable domain; a pickle round trip gives an equal one."""
    import copy
    import pickle

    d = Domain.uniform(3, signed=True, narrow=True, scale=0.25, zero_point=1)
    assert copy.copy(d) is d and copy.deepcopy(d) is d
    back = pickle.loads(pickle.dumps(d))
    assert back == d and back.params == d.params and repr(back) == repr(d)
    explicit = Domain.values([-1.0, 0.5])
    assert pickle.loads(pickle.dumps(explicit)) == explicit


def test_models_with_quantizers_deep_copy_and_save():
    """A model holding a Quantize (and so a Domain) deep-copies and round-trips through torch.save."""
    import copy
    import io

    import torch

    from iotable.nn import Quantize

    model = torch.nn.Sequential(torch.nn.Linear(2, 2), Quantize(2, scale=0.5))
    assert copy.deepcopy(model)[1].domain == model[1].domain
    buffer = io.BytesIO()
    torch.save(model, buffer)
    buffer.seek(0)
    assert torch.load(buffer, weights_only=False)[1].domain == model[1].domain


def test_tensors_encode_as_the_values_they_hold():
    """bfloat16 and sparse tensors encode to the codes of their values, like a dense float32 tensor."""
    d = Domain.uniform(2, signed=True, scale=0.5)
    values = torch.tensor([[-1.0, 0.5], [0.0, -0.5]])
    expected = d.encode(values).tolist()
    assert d.encode(values.to(torch.bfloat16)).tolist() == expected
    assert d.encode(values.to_sparse()).tolist() == expected


def test_params_must_describe_the_values():
    """Domain(values, params=...) keeps parameters only when they are the five uniform ones and give the values."""
    uniform = Domain.uniform(2, signed=True, scale=0.5)
    again = Domain(uniform.values, params=uniform.params)
    assert again == uniform and again.params == uniform.params and repr(again) == repr(uniform)
    assert Domain([1, 2], params={}).params == {}
    with pytest.raises(DomainError, match=r"do not give the 4 value\(s\)"):
        Domain([0, 1, 2, 4], params=Domain.uniform(2).params)
    with pytest.raises(DomainError, match=r"params\['signed'\] must be True or False, received 'no'"):
        Domain(uniform.values, params={**uniform.params, "signed": "no"})
