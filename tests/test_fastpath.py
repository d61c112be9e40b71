"""The sparse-linear fast path gives exactly the tables of the black-box path."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn
from torch.nn.utils import prune

from iotable import Domain, decompose, precompute
from iotable.nn import Quantize

U3 = Domain.uniform(3, scale=0.25)


def sparse_block(fan_in, n_in, *, seed=0, tail=None, scale=1.0):
    torch.manual_seed(seed)
    lin = nn.Linear(n_in, len(fan_in))
    with torch.no_grad():
        lin.weight.mul_(scale)
    mask = torch.zeros(len(fan_in), n_in)
    for k, idx in enumerate(fan_in):
        mask[k, idx] = 1
    prune.custom_from_mask(lin, "weight", mask)
    bn = nn.BatchNorm1d(len(fan_in))
    with torch.no_grad():
        bn.running_mean.uniform_(-0.5, 0.5)
        bn.running_var.uniform_(0.5, 2.0)
        bn.weight.uniform_(-2, 2)  # negative gains too: the tail is monotone either way
    modules = tail if tail is not None else [bn, nn.ReLU(), Quantize(3, scale=0.25)]
    return decompose(nn.Sequential(lin, *modules), fan_in=fan_in).eval()


FAN_IN = [[0, 1, 2, 3], [2, 4, 6, 7], [1, 3, 5], [0, 7, 6, 5], [4]]


@pytest.mark.parametrize("seed", range(4))
def test_fast_path_equals_black_box_on_random_float_weights(seed):
    """Random float weights, negative batch-norm gains, mixed fan-ins: identical tables both ways."""
    block = sparse_block(FAN_IN, 8, seed=seed)
    fast = precompute(block, input_domain=U3)
    slow = precompute(block, input_domain=U3, fast_path=False)
    assert fast.method == "linear fast path" and slow.method == "black box"
    assert fast.tables == slow.tables


def test_rows_on_a_rounding_boundary_go_through_the_module():
    """Pre-activations exactly on a half-step boundary are counted and computed by the module itself."""
    lin = nn.Linear(2, 1)
    with torch.no_grad():
        lin.weight.fill_(0.5)  # inputs are integers: sums land on .5 boundaries of a unit-step quantizer
        lin.bias.zero_()
    block = decompose(nn.Sequential(lin, Quantize(3)), fan_in=[[0, 1]])
    fast = precompute(block, input_domain=Domain.uniform(3))
    assert fast.near_ties > 0
    assert fast.tables == precompute(block, input_domain=Domain.uniform(3), fast_path=False).tables


def test_signed_and_per_channel_input_domains():
    """Signed inputs and inputs with different domains per channel take the fast path and stay exact."""
    block = sparse_block([[0, 1], [1, 2], [2, 0]], 3, seed=5, tail=[nn.Hardtanh(), Quantize(2, signed=True, scale=0.5)])
    domains = [Domain.uniform(2, signed=True), Domain.values([-1.0, 0.25, 3.0]), Domain.uniform(1)]
    fast = precompute(block, input_domain=domains)
    assert fast.method == "linear fast path"
    assert fast.tables == precompute(block, input_domain=domains, fast_path=False).tables


def test_whole_model_layers_use_the_fast_path():
    """In a whole model every sparse linear layer takes the fast path, and the network stays bit exact."""
    from iotable import verify

    model = nn.Sequential(sparse_block(FAN_IN, 8, seed=1), sparse_block([[0, 1], [2, 3], [3, 4]], 5, seed=2)).eval()
    model = nn.Sequential(*[m for block in model for m in block])
    net = precompute(model, input_domain=U3, example_input=torch.zeros(1, 8))
    assert {layer.method for layer in net.layers.values()} == {"linear fast path"}
    x = torch.tensor(U3.values, dtype=torch.float32)[torch.randint(0, 8, (256, 8))]
    assert verify(model, net, x).ok


@pytest.mark.parametrize(
    "block",
    [
        decompose(nn.Sequential(nn.Linear(3, 2), nn.ReLU()), fan_in=[[0, 1, 2]] * 2),  # raw outputs
        decompose(nn.Sequential(nn.Linear(3, 2), nn.GELU(), Quantize(2)), fan_in=[[0, 1, 2]] * 2),  # not monotone
        decompose(nn.Sequential(nn.Conv1d(2, 2, 1), Quantize(2))),  # not a linear layer
    ],
    ids=["raw-outputs", "non-monotone-tail", "convolution"],
)
def test_other_layers_take_the_black_box_path(block):
    """Layers the fast path cannot prove exact are enumerated as black boxes."""
    example = torch.zeros(1, 3) if isinstance(block[0], nn.Linear) else torch.zeros(1, 2, 4)
    result = precompute(block, input_domain=Domain.uniform(1), example_input=example, check=False)
    assert result.method == "black box"


def test_undeclared_nonzero_weight_is_not_trusted():
    """With the probe off, a weight outside the declared fan-in makes the fast path step aside."""
    lin = nn.Linear(3, 1)
    block = decompose(nn.Sequential(lin, Quantize(2)), fan_in=[[0, 1]])
    result = precompute(block, input_domain=Domain.uniform(1), check=False)
    assert result.method == "black box"
    assert np.array_equal(
        result.tables[0].outputs,
        precompute(block, input_domain=Domain.uniform(1), check=False, fast_path=False).tables[0].outputs,
    )


def test_units_sharing_inputs_keep_their_own_outputs():
    """Units listed out of channel order (two units read the same input) still get their own columns."""
    block = sparse_block([[0], [1], [0]], 2, seed=3, tail=[Quantize(3, signed=True, scale=0.25)])
    fast = precompute(block, input_domain=Domain.uniform(1))
    assert fast.method == "linear fast path"
    assert fast.tables == precompute(block, input_domain=Domain.uniform(1), fast_path=False).tables
