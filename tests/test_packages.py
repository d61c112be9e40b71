"""The field's own packages as their users write models with them: torchlogix's ``LogicDense`` and ``GroupSum``
precompute through their own forward and verify against it; torch-dwn's ``LUTLayer``, whose forward runs on CUDA
only, is read from its parameters by the package's own rule and checked against a direct evaluation of that rule
(and against the package's forward where it runs); difflogic's ``LogicLayer`` runs through its Python
implementation where the package imports."""

from __future__ import annotations

import importlib.util
import sys
import types
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

import iotable
from iotable import Domain, IOTableWarning, NodeKind
from iotable.errors import ModelError
from iotable.packages import read_layers
from tests import upstreamzoo as uz

from .optional import require_program

BITS = Domain([0.0, 1.0])


def _bits(n: int, features: int, seed: int) -> torch.Tensor:
    return torch.randint(0, 2, (n, features), generator=torch.Generator().manual_seed(seed)).float()


# -- torch-dwn -------------------------------------------------------------------------------------------------------


def _has(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


class _Mapping(nn.Module):
    """torch-dwn 1.1.1's ``LearnableMapping`` parameters: ``weights`` of shape (input_size, output_size * n)."""

    def __init__(self, inputs: int, outputs: int, generator: torch.Generator) -> None:
        super().__init__()
        self.weights = nn.Parameter(torch.rand(inputs, outputs, generator=generator))


class _LUTLayer(nn.Module):
    """torch-dwn 1.1.1's ``LUTLayer`` parameters by name, shape and dtype (``mapping`` int32 or a learnable
    mapping with the layer's index table, ``luts``, ``ste``), for machines where the package does not install (its
    setup builds a CUDA extension); its forward refuses a CPU tensor, as the package's does."""

    def __init__(self, inputs: int, outputs: int, n: int, *, mapping: str, ste: bool, seed: int) -> None:
        super().__init__()
        generator = torch.Generator().manual_seed(seed)
        self.input_size, self.output_size, self.n, self.ste = inputs, outputs, n, ste
        if mapping == "learnable":
            self.mapping: nn.Module | nn.Parameter = _Mapping(inputs, outputs * n, generator)
            index = torch.arange(outputs * n).reshape(outputs, n).int()
            self.register_parameter("_LUTLayer__dummy_mapping", nn.Parameter(index, requires_grad=False))
        else:
            chosen = torch.randint(0, inputs, (outputs, n), generator=generator).int()
            self.mapping = nn.Parameter(chosen, requires_grad=False)
        self.luts = nn.Parameter(torch.rand(outputs, 2**n, generator=generator) * 2 - 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise RuntimeError("EFDFunction CPU not Implemented")


_LUTLayer.__module__, _LUTLayer.__qualname__ = "torch_dwn.lut_layer", "LUTLayer"


def _dwn_layer(inputs: int, outputs: int, n: int, *, mapping: str = "random", ste: bool = True, seed: int = 0) -> Any:
    """A torch-dwn LUT layer: the package's own where it imports, else one with its parameters."""
    if _has("torch_dwn"):
        import torch_dwn

        torch.manual_seed(seed)
        return torch_dwn.LUTLayer(inputs, outputs, n, mapping=mapping, ste=ste)
    return _LUTLayer(inputs, outputs, n, mapping=mapping, ste=ste, seed=seed)


def _kernel(layer: Any, x: torch.Tensor) -> torch.Tensor:
    """torch-dwn's forward as its CUDA kernel states it, one sample and node at a time: address bit ``l`` of node
    ``j`` is ``x[mapping[j][l]] > 0``, the output ``luts[j][address]``, then ``> 0`` as 0/1 when ``ste``."""
    if isinstance(layer.mapping, nn.Module):
        chosen = layer.mapping.weights.detach().argmax(dim=0).tolist()
        index = layer._LUTLayer__dummy_mapping.tolist()
        mapping = [[chosen[k] for k in row] for row in index]
    else:
        mapping = layer.mapping.tolist()
    luts, out = layer.luts.detach().tolist(), []
    for sample in x.tolist():
        row = []
        for j, inputs in enumerate(mapping):
            address = sum(int(sample[i] > 0) << bit for bit, i in enumerate(inputs))
            value = luts[j][address]
            row.append(float(value > 0) if layer.ste else value)
        out.append(row)
    return torch.tensor(out, dtype=torch.float32)


def _dwn_model(seed: int = 0) -> nn.Sequential:
    """A DWN as torch-dwn's README builds one, small: a random-mapping LUT-4 layer, a learnable-mapping LUT-3
    layer, then GroupSum over 4 classes."""
    first = _dwn_layer(16, 24, 4, seed=seed)
    second = _dwn_layer(24, 20, 3, mapping="learnable", seed=seed + 1)
    return nn.Sequential(first, second, uz.GroupSum(4, tau=1 / 0.3)).eval()


def _dwn_reference(model: nn.Sequential, x: torch.Tensor) -> torch.Tensor:
    return model[2](_kernel(model[1], _kernel(model[0], x)))


class _GroupSum(nn.Module):
    """torch-dwn 1.1.1's ``GroupSum(k, tau, randperm)`` as its documentation states it, for machines where the
    package does not install: an optional fixed permutation of the last axis, zeros padded to a multiple of ``k``
    (a Python check of the width), then the sum of each of ``k`` groups divided by ``tau``."""

    def __init__(self, k: int, tau: float = 1.0, randperm: int = 0) -> None:
        super().__init__()
        self.k, self.tau = k, tau
        self.randperm = torch.randperm(randperm, generator=torch.Generator().manual_seed(0)) if randperm else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.randperm is not None:
            x = x[:, self.randperm]
        if x.size(-1) % self.k != 0:
            pad = [0] * (2 * len(x.shape))
            pad[1] = self.k - x.size(-1) % self.k
            x = nn.functional.pad(x, tuple(pad))
        return x.view(*x.shape[:-1], self.k, x.shape[-1] // self.k).sum(dim=-1) / self.tau


def _dwn_group_sum(k: int, tau: float, randperm: int = 0) -> nn.Module:
    """torch-dwn's GroupSum: the package's own where it imports, else one with its documented forward."""
    if _has("torch_dwn"):
        import torch_dwn

        torch.manual_seed(0)
        return torch_dwn.GroupSum(k, tau, randperm=randperm)
    return _GroupSum(k, tau, randperm)


@pytest.mark.parametrize(("nodes", "randperm"), [(24, False), (22, False), (24, True)])
def test_dwn_group_sum_as_the_package_writes_it(nodes: int, randperm: bool) -> None:
    """torch-dwn's own GroupSum form (a Python check of the width, padding, an optional permutation) after a LUT
    layer gives the kernel rule's sums on every sample; without padding or permutation it is a sum node."""
    model = nn.Sequential(_dwn_layer(16, nodes, 4), _dwn_group_sum(4, 1 / 0.3, nodes if randperm else 0)).eval()
    net = _precompute_dwn(model)
    x = _bits(300, 16, 1)
    assert torch.equal(net.run(x), model[1](_kernel(model[0], x)))
    if nodes == 24 and not randperm:
        assert [n.kind for n in net.graph.nodes][-2:] == [NodeKind.SUM, NodeKind.OUTPUT]


def _precompute_dwn(model: nn.Module, features: int = 16) -> iotable.TableNetwork:
    with pytest.warns(IOTableWarning, match="CUDA only"):
        return iotable.precompute(model, input_domain=BITS, example_input=torch.zeros(1, features))


def test_dwn_lut_layers_are_read_from_their_parameters_as_the_kernel_computes() -> None:
    """A DWN with a fixed and a learnable mapping precomputes with no decoration, saying its LUT layers were read,
    and every output on 500 samples equals the package's kernel rule evaluated directly."""
    model = _dwn_model()
    net = _precompute_dwn(model)
    assert net["0"].plan.output_domain == BITS and net["1"].plan.output_domain == BITS
    assert [n.kind for n in net.graph.nodes][-2:] == [NodeKind.SUM, NodeKind.OUTPUT]
    x = _bits(500, 16, 1)
    assert torch.equal(net.run(x), _dwn_reference(model, x))
    assert iotable.verify(read_layers(model), net, x).agreement == 1.0


def test_each_dwn_table_row_is_the_kernels_output() -> None:
    """Every row of every table of a DWN LUT layer equals the kernel rule's output for that row's inputs (the
    layer's other inputs at random bits)."""
    model = _dwn_model()
    net = _precompute_dwn(model)
    for layer in (0, 1):
        tables = net[str(layer)]
        plan = tables.plan
        generator = torch.Generator().manual_seed(3)
        for unit, table in zip(plan.units, tables):
            x = torch.randint(0, 2, (table.rows, plan.in_channels), generator=generator).float()
            rows = np.stack([d.decode(table.inputs[:, j]) for j, d in enumerate(plan.unit_domains(unit))], 1)
            x[:, list(unit.in_channels)] = torch.tensor(rows, dtype=torch.float32)
            expected = _kernel(model[layer], x)[:, list(unit.out_channels)].numpy()
            assert np.array_equal(table.output_values(), expected), (layer, unit.index)


def test_dwn_raw_entries_without_ste_become_the_output_domain() -> None:
    """A LUT layer built with ``ste=False`` outputs its raw entries: they are the layer's output domain, and the
    network is the kernel rule on every sample."""
    layer = _dwn_layer(6, 5, 2, ste=False, seed=4)
    net = _precompute_dwn(nn.Sequential(layer), features=6)
    assert len(net["0"].plan.output_domain) <= 20
    x = _bits(200, 6, 2)
    assert torch.equal(net.run(x), _kernel(layer, x))


def test_a_lone_dwn_layer_precomputes_as_a_network() -> None:
    """A torch-dwn LUT layer given alone is read and becomes a one-layer network equal to the kernel rule."""
    layer = _dwn_layer(8, 5, 3, seed=2)
    net = _precompute_dwn(layer, features=8)
    x = _bits(100, 8, 1)
    assert torch.equal(net.run(x), _kernel(layer, x))
    assert iotable.verify(read_layers(layer), net, x).agreement == 1.0


def test_estimate_reads_dwn_layers_too() -> None:
    """estimate of a DWN reads its LUT layers as precompute does (saying so) and plans the same tables."""
    model = _dwn_model()
    with pytest.warns(IOTableWarning, match=r"estimate: .*CUDA only"):
        cost = iotable.estimate(model, input_domain=BITS, example_input=torch.zeros(1, 16), keep_dead=True)
    net = _precompute_dwn(model)
    tables = [(layer.name, layer.tables) for layer in cost.layers if layer.name in net.layers]
    assert tables == [(name, len(layer)) for name, layer in net.layers.items()]


def test_verify_refuses_the_cuda_only_forward_on_cpu_inputs() -> None:
    """verify does not run a torch-dwn LUT layer's forward on CPU inputs: it names the layer, the package and the
    comparison that can run."""
    model = _dwn_model()
    net = _precompute_dwn(model)
    with pytest.raises(ModelError, match=r"layer '0' is torch-dwn's LUTLayer.*CUDA only.*read_layers"):
        iotable.verify(model, net, _bits(10, 16, 1))


def _first_address(layer: Any, x: torch.Tensor, node: int) -> int:
    """The address node ``node`` of ``layer`` reads for the first sample of ``x``, by the kernel rule."""
    inputs = read_layers(nn.Sequential(layer))[0].mapping[node].tolist()
    return sum(int(x[0, i] > 0) << bit for bit, i in enumerate(inputs))


def test_a_flipped_dwn_entry_changes_the_tables_and_verify_sees_it() -> None:
    """Tamper: negating the LUT entry the first sample reads changes the read tables, and verify of the old
    network against the changed model's reading fails, while a new precompute agrees again."""
    model = _dwn_model()
    net = _precompute_dwn(model)
    x = _bits(2000, 16, 1)
    hidden = _kernel(model[0], x)
    address = _first_address(model[1], hidden, 0)
    with torch.no_grad():
        model[1].luts[0, address] = -model[1].luts[0, address]
    again = _precompute_dwn(model)["1"]
    assert not all(np.array_equal(a.outputs, b.outputs) for a, b in zip(again, net["1"]))
    assert iotable.verify(read_layers(model), net, x).agreement < 1.0
    assert iotable.verify(read_layers(model), _precompute_dwn(model), x).agreement == 1.0


def test_a_moved_dwn_mapping_index_changes_what_verify_compares() -> None:
    """Tamper: a fixed mapping index moved to another input, or a learnable mapping's weights moved to choose
    another input, changes the reading, and verify of the old network reports the difference."""
    model = _dwn_model()
    net = _precompute_dwn(model)
    x = _bits(2000, 16, 1)
    before = _dwn_reference(model, x)
    with torch.no_grad():
        old = int(model[0].mapping[0, 0])
        model[0].mapping[0, 0] = (old + 1) % 16
        if torch.equal(_dwn_reference(model, x), before):  # that input did not change an output: try the others
            for other in range(16):
                model[0].mapping[0, 0] = other
                if not torch.equal(_dwn_reference(model, x), before):
                    break
    assert iotable.verify(read_layers(model), net, x).agreement < 1.0
    model = _dwn_model()
    with torch.no_grad():
        weights = model[1].mapping.weights
        chosen = [int(c) for c in weights.argmax(dim=0)]
        for column in range(weights.shape[1]):  # make each slot read the input after its own
            weights[(chosen[column] + 1) % weights.shape[0], column] = weights[:, column].max() + 1
    assert iotable.verify(read_layers(model), net, x).agreement < 1.0


def test_a_dwn_mapping_index_out_of_range_is_refused_by_name() -> None:
    """Tamper: a mapping index beyond the layer's inputs is refused before any table is built, naming the layer,
    the index and the range."""
    model = _dwn_model()
    with torch.no_grad():
        model[0].mapping[3, 1] = 99
    with pytest.raises(ModelError, match=r"layer '0': mapping\[3, 1\] is 99; expected an index in 0..15"):
        iotable.precompute(model, input_domain=BITS, example_input=torch.zeros(1, 16))


def test_dwn_luts_of_the_wrong_shape_are_refused_by_name() -> None:
    """LUT contents whose shape is not (output_size, 2**n) are refused with both shapes named."""
    model = _dwn_model()
    model[0].luts = nn.Parameter(torch.zeros(24, 8))
    with pytest.raises(ModelError, match=r"layer '0': expected luts of shape \(24, 16\).*received \(24, 8\)"):
        read_layers(model)


def test_the_package_forward_where_it_runs() -> None:
    """With torch-dwn installed: its LUTLayer's forward on CUDA equals the reading; on a CPU it raises, which is
    why precompute reads it."""
    torch_dwn = pytest.importorskip("torch_dwn")
    torch.manual_seed(0)
    layer = torch_dwn.LUTLayer(12, 10, 4, mapping="learnable").eval()
    x = _bits(300, 12, 5)
    if torch.cuda.is_available():
        with torch.no_grad():
            assert torch.equal(layer.cuda()(x.cuda()).cpu(), read_layers(nn.Sequential(layer.cpu()))[0](x))
    else:
        with pytest.raises(Exception, match="CPU|CUDA|BaseException"):
            layer(x)
        assert torch.equal(read_layers(nn.Sequential(layer))[0](x), _kernel(layer, x))


def test_dwn_verilog_simulates_equal(tmp_path: Path) -> None:
    """The Verilog of a DWN read from its parameters simulates equal to ``net.run`` under iverilog."""
    from iotable.hdl import export, simulate

    require_program("iverilog", package="iverilog")
    net = _precompute_dwn(_dwn_model())
    design = export(net, tmp_path, top="net", vectors=16)
    x = _bits(200, 16, 2)
    assert torch.equal(simulate(design, x, simulator="iverilog", timeout=120), net.run(x, return_codes=True))


# -- torchlogix ------------------------------------------------------------------------------------------------------


def _torchlogix_layers() -> Any:
    """``torchlogix.layers``, skipping where torchlogix is not installed. torchlogix 0.2.2's package ``__init__``
    imports its ``circuit`` module, which only Python 3.12 and later parse; below that, its layers are imported
    without it (they do not use it)."""
    if not _has("torchlogix"):
        pytest.importorskip("torchlogix")
    if sys.version_info < (3, 12) and "torchlogix" not in sys.modules:
        found = importlib.util.find_spec("torchlogix")
        assert found is not None and found.submodule_search_locations is not None
        package = types.ModuleType("torchlogix")
        package.__path__ = list(found.submodule_search_locations)
        sys.modules["torchlogix"] = package
    return importlib.import_module("torchlogix.layers")


def _torchlogix_model(
    parametrization: str = "raw", lut_rank: int = 2, connections: str = "fixed", seed: int = 0
) -> nn.Sequential:
    """A torchlogix network as its README builds one, small: two LogicDense layers (randomly initialised gates),
    then GroupSum over 4 classes."""
    layers = _torchlogix_layers()
    torch.manual_seed(seed)
    options = {"parametrization": parametrization, "lut_rank": lut_rank, "connections": connections,
               "parametrization_kwargs": {"weight_init": "random"}}  # fmt: skip
    model = nn.Sequential(layers.LogicDense(16, 32, **options), layers.LogicDense(32, 24, **options),
                          layers.GroupSum(4, tau=2.0))  # fmt: skip
    return model.eval()


@pytest.mark.parametrize(
    ("parametrization", "lut_rank", "connections"),
    [("raw", 2, "fixed"), ("warp", 2, "fixed"), ("warp", 4, "fixed"), ("raw", 2, "learnable")],
)
def test_torchlogix_logic_dense_precomputes_and_verifies(parametrization: str, lut_rank: int, connections: str) -> None:
    """torchlogix's LogicDense and GroupSum precompute with no decoration and no warning, each gate layer's output
    domain is {0, 1}, GroupSum is a sum node, and verify against the module's own forward agrees on 2,000
    samples."""
    model = _torchlogix_model(parametrization, lut_rank, connections)
    net = iotable.precompute(model, input_domain=BITS, example_input=torch.zeros(1, 16))
    assert net["0"].plan.output_domain == BITS and net["1"].plan.output_domain == BITS
    assert [n.kind for n in net.graph.nodes][-2:] == [NodeKind.SUM, NodeKind.OUTPUT]
    x = _bits(2000, 16, 1)
    assert iotable.verify(model, net, x).agreement == 1.0
    with torch.no_grad():
        assert torch.equal(net.run(x), model(x))


def test_torchlogix_tables_are_the_package_luts() -> None:
    """Each gate's table gives, for every pair of values of its two connected inputs ``a`` and ``b``, the entry
    ``2a + b`` of the truth table torchlogix itself reports for the gate (``get_luts``)."""
    model = _torchlogix_model()
    net = iotable.precompute(model, input_domain=BITS, example_input=torch.zeros(1, 16))
    luts, indices = model[0].get_luts().tolist(), model[0].connections.indices.tolist()
    checked = 0
    for unit, table in zip(net["0"].plan.units, net["0"]):
        for position, out in enumerate(unit.out_channels):
            first, second = indices[0][out], indices[1][out]
            for a in (0, 1):
                for b in (0, 1):
                    if first == second and a != b:
                        continue
                    probe = [0] * 16
                    probe[first], probe[second] = a, b
                    codes = [probe[c] for c in unit.in_channels]  # the code of a bit is the bit
                    assert table.lookup(codes).tolist()[position] == float(luts[out][2 * a + b]), (out, a, b)
                    checked += 1
    assert checked >= 4 * 32 - 4 * 2


def test_a_flipped_torchlogix_gate_fails_verify() -> None:
    """Tamper: giving a gate of the last LogicDense another function makes the model differ from the network
    built before, which verify reports; a new precompute agrees again."""
    model = _torchlogix_model()
    net = iotable.precompute(model, input_domain=BITS, example_input=torch.zeros(1, 16))
    x = _bits(2000, 16, 1)
    with torch.no_grad():
        before = model(x)
        weight = model[1].weight
        for gate in range(weight.shape[1]):  # the first other gate that changes an output on these samples
            weight[0] = -10.0
            weight[0, gate] = 10.0
            if not torch.equal(model(x), before):
                break
    assert iotable.verify(model, net, x).agreement < 1.0
    assert iotable.verify(model, iotable.precompute(model, input_domain=BITS, example_input=torch.zeros(1, 16)),
                          x).agreement == 1.0  # fmt: skip


def test_torchlogix_verilog_simulates_equal(tmp_path: Path) -> None:
    """The Verilog of a small torchlogix network simulates equal to ``net.run`` (and so to the model) under
    iverilog."""
    from iotable.hdl import export, simulate

    require_program("iverilog", package="iverilog")
    model = _torchlogix_model()
    net = iotable.precompute(model, input_domain=BITS, example_input=torch.zeros(1, 16))
    design = export(net, tmp_path, top="net", vectors=16)
    x = _bits(200, 16, 2)
    assert torch.equal(simulate(design, x, simulator="iverilog", timeout=120), net.run(x, return_codes=True))


# -- difflogic -------------------------------------------------------------------------------------------------------


class _LogicLayer(nn.Module):
    """difflogic 0.1.0's ``LogicLayer`` attributes by name, shape and dtype (``weights`` of 16 gate logits per
    neuron, the pair ``indices`` of int64 index tensors, ``implementation="cuda"``), for machines where the package
    does not install (its setup builds a CUDA extension); its forward refuses a CPU tensor, as the extension does."""

    def __init__(self, in_dim: int, out_dim: int, seed: int) -> None:
        super().__init__()
        generator = torch.Generator().manual_seed(seed)
        self.in_dim, self.out_dim, self.implementation = in_dim, out_dim, "cuda"
        self.weights = nn.Parameter(torch.randn(out_dim, 16, generator=generator))
        pairs = torch.randint(0, in_dim, (2, out_dim), generator=generator)
        self.indices = (pairs[0].clone(), pairs[1].clone())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise RuntimeError("x must be a CUDA tensor")


_LogicLayer.__module__, _LogicLayer.__qualname__ = "difflogic.difflogic", "LogicLayer"


def _gates(layer: Any, x: torch.Tensor) -> torch.Tensor:
    """difflogic's gates as its documentation tables them, one sample and neuron at a time: gate ``g`` of inputs
    ``A``, ``B`` is digit ``2A + B`` of ``g`` written as four binary digits (gate 1, ``0001``, is AND)."""
    gates = layer.weights.detach().argmax(-1).tolist()
    first, second = (t.tolist() for t in layer.indices)
    rows = [
        [float(format(g, "04b")[2 * int(sample[i]) + int(sample[k])]) for g, i, k in zip(gates, first, second)]
        for sample in x.tolist()
    ]
    return torch.tensor(rows, dtype=torch.float32)


def _difflogic_model() -> nn.Sequential:
    """A DiffLogic network as difflogic's README builds one (on CUDA), small: two gate layers, then GroupSum."""
    return nn.Sequential(_LogicLayer(16, 32, seed=0), _LogicLayer(32, 24, seed=1), uz.GroupSum(4, tau=2.0)).eval()


def test_difflogic_cuda_layers_are_read_as_their_gates() -> None:
    """Gate layers built for CUDA precompute with no decoration, saying they were read, and every output on 2,000
    samples equals the package's gate table evaluated directly."""
    model = _difflogic_model()
    with pytest.warns(IOTableWarning, match=r"difflogic's LogicLayer.*CUDA only"):
        net = iotable.precompute(model, input_domain=BITS, example_input=torch.zeros(1, 16))
    assert net["0"].plan.output_domain == BITS and net["1"].plan.output_domain == BITS
    x = _bits(2000, 16, 1)
    assert torch.equal(net.run(x), model[2](_gates(model[1], _gates(model[0], x))))
    assert iotable.verify(read_layers(model), net, x).agreement == 1.0
    with pytest.raises(ModelError, match=r"layer '0' is difflogic's LogicLayer.*CUDA only.*implementation = 'python'"):
        iotable.verify(model, net, x)


def test_a_flipped_difflogic_gate_or_index_changes_the_reading() -> None:
    """Tamper: the negation of a gate (15 - g) in the last layer, or an index moved to another input, changes
    what verify compares with; an index out of range is refused by name."""
    model = _difflogic_model()
    with pytest.warns(IOTableWarning):
        net = iotable.precompute(model, input_domain=BITS, example_input=torch.zeros(1, 16))
    x = _bits(300, 16, 1)
    with torch.no_grad():
        gate = int(model[1].weights[0].argmax())
        model[1].weights[0, 15 - gate] = model[1].weights[0].max() + 1
    assert iotable.verify(read_layers(model), net, x).agreement < 1.0
    model = _difflogic_model()
    before = model[2](_gates(model[1], _gates(model[0], x)))
    first = model[0].indices[0]
    moves = ((j, other) for j in range(32) for other in range(16))
    for j, other in moves:  # the first neuron whose first input, moved, changes an output on these samples
        kept, first[j] = int(first[j]), other
        if not torch.equal(model[2](_gates(model[1], _gates(model[0], x))), before):
            break
        first[j] = kept
    assert iotable.verify(read_layers(model), net, x).agreement < 1.0
    model[0].indices[1][5] = 16
    with pytest.raises(ModelError, match=r"layer '0': indices\[1\]\[5\] is 16; expected an index in 0..15"):
        read_layers(model)


def test_difflogic_logic_layer_precomputes_and_verifies() -> None:
    """With difflogic installed (its CUDA extension built): LogicLayer on its Python implementation and GroupSum
    precompute with no decoration and verify against the module's own forward on 2,000 samples, a flipped gate
    fails verify, and a layer built for CUDA reads as the package's Python path computes."""
    difflogic = pytest.importorskip("difflogic")
    torch.manual_seed(0)
    model = nn.Sequential(
        difflogic.LogicLayer(16, 32, device="cpu", implementation="python"),
        difflogic.LogicLayer(32, 24, device="cpu", implementation="python"),
        difflogic.GroupSum(4, tau=2.0, device="cpu"),
    ).eval()
    net = iotable.precompute(model, input_domain=BITS, example_input=torch.zeros(1, 16))
    assert net["0"].plan.output_domain == BITS
    x = _bits(2000, 16, 1)
    assert iotable.verify(model, net, x).agreement == 1.0
    with torch.no_grad():
        gate = int(model[1].weights[0].argmax())
        model[1].weights[0, 15 - gate] = model[1].weights[0].max() + 1
    assert iotable.verify(model, net, x).agreement < 1.0
    built_for_cuda = difflogic.LogicLayer(16, 32, device="cpu", implementation="cuda").eval()
    python_path = difflogic.LogicLayer(16, 32, device="cpu", implementation="python").eval()
    python_path.weights, python_path.indices = built_for_cuda.weights, built_for_cuda.indices
    with torch.no_grad():
        assert torch.equal(read_layers(nn.Sequential(built_for_cuda))[0](x), python_path(x))
