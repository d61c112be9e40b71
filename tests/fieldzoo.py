"""Layers of the 2024–26 LUT-network families, written the way their authors write them (small versions, our
own code): DWN, DiffLogic, TreeLUT, KANELÉ, PolyLUT-Add, and a LogicNets-style masked neuron layer. Each
layer knows its true fan-ins (``true_fan_ins``), which the tests compare with what iotable infers."""

from __future__ import annotations

import torch
from torch import nn


def _generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


class Thermometer(nn.Module):
    """DWN's input encoder: feature ``f`` becomes ``T`` bits, bit ``t`` set where it exceeds threshold ``t``."""

    def __init__(self, features: int, levels: int) -> None:
        super().__init__()
        self.register_buffer("thresholds", torch.linspace(0, 1, levels + 2)[1:-1].repeat(features, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x.unsqueeze(-1) > self.thresholds).float().flatten(1)

    def true_fan_ins(self) -> list[tuple[int, ...]]:
        features, levels = self.thresholds.shape
        return [(f,) for f in range(features) for _ in range(levels)]


class LUTLayer(nn.Module):
    """DWN: every node an ``n``-input LUT over inputs chosen by a learnable mapping (argmax per slot; two slots
    may pick the same input); the LUT's entries are learned reals, the node outputs their sign as a bit."""

    def __init__(self, inputs: int, nodes: int, n: int = 4, seed: int = 0) -> None:
        super().__init__()
        generator = _generator(seed)
        self.nodes, self.n = nodes, n
        self.mapping = nn.Parameter(torch.randn(nodes * n, inputs, generator=generator))
        self.luts = nn.Parameter(torch.randn(nodes, 2**n, generator=generator))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        chosen = self.mapping.argmax(-1).view(self.nodes, self.n)
        bits = x[:, chosen]
        address = (bits * 2 ** torch.arange(self.n - 1, -1, -1)).sum(-1).long()
        return (self.luts[torch.arange(self.nodes), address] > 0).float()

    def true_fan_ins(self) -> list[tuple[int, ...]]:
        return [tuple(sorted(set(row))) for row in self.mapping.argmax(-1).view(self.nodes, self.n).tolist()]


class GroupSum(nn.Module):
    """DWN's and DiffLogic's head: per class, the sum of a group of bits divided by a temperature."""

    def __init__(self, k: int, tau: float = 1.0) -> None:
        super().__init__()
        self.k, self.tau = k, tau

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        assert x.shape[-1] % self.k == 0, (x.shape, self.k)
        return x.view(*x.shape[:-1], self.k, x.shape[-1] // self.k).sum(-1) / self.tau


def _gates(a: torch.Tensor, b: torch.Tensor) -> list[torch.Tensor]:
    """The 16 two-input Boolean functions on reals in [0, 1] (products for AND), in truth-table order."""
    ab = a * b
    return [
        torch.zeros_like(a), ab, a - ab, a, b - ab, b, a + b - 2 * ab, a + b - ab,
        1 - (a + b - ab), 1 - (a + b - 2 * ab), 1 - b, 1 - b + ab, 1 - a, 1 - a + ab, 1 - ab, torch.ones_like(a),
    ]  # fmt: skip


class LogicLayer(nn.Module):
    """DiffLogic: every neuron a two-input gate over a fixed random pair of inputs (``indices``); in eval mode
    the gate is the one its learned weights pick (a one-hot mix of the 16 functions)."""

    def __init__(self, inputs: int, neurons: int, seed: int = 0) -> None:
        super().__init__()
        generator = _generator(seed)
        pairs = torch.stack([torch.randperm(inputs, generator=generator)[:2] for _ in range(neurons)], dim=1)
        self.register_buffer("indices", pairs)  # (2, neurons)
        self.weights = nn.Parameter(torch.randn(neurons, 16, generator=generator))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a, b = x[..., self.indices[0]], x[..., self.indices[1]]
        mix = nn.functional.one_hot(self.weights.argmax(-1), 16).to(x.dtype)
        return (torch.stack(_gates(a, b), dim=-1) * mix).sum(-1)

    def true_fan_ins(self) -> list[tuple[int, ...]]:
        """The pair each neuron is wired to (the picked gate may ignore one or both)."""
        return [tuple(sorted({a, b})) for a, b in self.indices.T.tolist()]


class Comparators(nn.Module):
    """TreeLUT's first layer: each comparator tests one quantized feature against a threshold."""

    def __init__(self, features: int, count: int, seed: int = 0) -> None:
        super().__init__()
        generator = _generator(seed)
        self.register_buffer("feature", torch.randint(0, features, (count,), generator=generator))
        self.register_buffer("threshold", torch.rand(count, generator=generator))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x[:, self.feature] > self.threshold).float()

    def true_fan_ins(self) -> list[tuple[int, ...]]:
        return [(int(f),) for f in self.feature]


class Trees(nn.Module):
    """TreeLUT: depth-2 trees over comparator bits (root, then the left or right child), each leaf a small
    integer score; a tree reads the three comparators on its paths."""

    def __init__(self, comparators: int, trees: int, seed: int = 0) -> None:
        super().__init__()
        generator = _generator(seed)
        nodes = torch.stack([torch.randperm(comparators, generator=generator)[:3] for _ in range(trees)])
        self.register_buffer("nodes", nodes)  # (trees, 3): root, left child, right child
        leaves = torch.stack([torch.randperm(7, generator=generator)[:4] - 3 for _ in range(trees)])
        self.register_buffer("leaves", leaves.float())  # distinct: every comparator on a path matters

    def forward(self, bits: torch.Tensor) -> torch.Tensor:
        root, left, right = (bits[:, self.nodes[:, k]] for k in range(3))
        leaf = torch.where(root > 0, 2 + right, left).long()
        return self.leaves[torch.arange(self.nodes.shape[0]), leaf]

    def true_fan_ins(self) -> list[tuple[int, ...]]:
        return [tuple(sorted(set(row))) for row in self.nodes.tolist()]


class KANLayer(nn.Module):
    """KANELÉ: per edge a 1-D function of one input (hat functions on a grid, learned coefficients), per
    neuron the sum of its edges; pruned edges have all-zero coefficients."""

    def __init__(self, inputs: int, outputs: int, grid: int = 5, keep: float = 0.5, seed: int = 0) -> None:
        super().__init__()
        generator = _generator(seed)
        self.register_buffer("grid", torch.linspace(0, 1, grid))
        coefficients = torch.randn(outputs, inputs, grid, generator=generator)
        edges = torch.rand(outputs, inputs, generator=generator) < keep
        edges[:, 0] = True
        self.coefficients = nn.Parameter(coefficients * edges.unsqueeze(-1))

    def edges(self, x: torch.Tensor) -> torch.Tensor:
        """Every edge's value, ``(batch, outputs, inputs)``."""
        step = self.grid[1] - self.grid[0]
        basis = torch.relu(1 - (x.unsqueeze(-1) - self.grid).abs() / step)  # (batch, inputs, grid)
        return torch.einsum("big,oig->boi", basis, self.coefficients)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.edges(x).sum(-1)

    def true_fan_ins(self) -> list[tuple[int, ...]]:
        return [tuple(torch.nonzero(row.abs().sum(-1)).flatten().tolist()) for row in self.coefficients]


class QuantKANLayer(KANLayer):
    """KANELÉ: a KAN layer whose every edge output is quantized to fixed point (``edge_bits`` bits, ``frac`` of
    them after the point) before the neuron sums its edges."""

    def __init__(
        self,
        inputs: int,
        outputs: int,
        grid: int = 8,
        edge_bits: int = 8,
        frac: int = 5,
        keep: float = 0.8,
        seed: int = 0,
    ) -> None:
        super().__init__(inputs, outputs, grid=grid, keep=keep, seed=seed)
        self.edge_bits, self.frac = edge_bits, frac

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        top = 2 ** (self.edge_bits - 1)
        edges = torch.clamp(torch.round(self.edges(x) * 2**self.frac), -top, top - 1) / 2**self.frac
        return edges.sum(-1)


class PolyNeurons(nn.Module):
    """PolyLUT: every neuron a degree-2 polynomial of its masked inputs (all monomials), then a ReLU."""

    def __init__(self, inputs: int, outputs: int, fan_in: int, seed: int = 0) -> None:
        super().__init__()
        generator = _generator(seed)
        mask = torch.zeros(outputs, inputs)
        for row in mask:
            row[torch.randperm(inputs, generator=generator)[:fan_in]] = 1
        self.register_buffer("mask", mask)
        self.linear = nn.Parameter(torch.randn(outputs, inputs, generator=generator))
        self.square = nn.Parameter(torch.randn(outputs, inputs, inputs, generator=generator))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        masked = x.unsqueeze(1) * self.mask  # (batch, outputs, inputs)
        quadratic = torch.einsum("boi,oij,boj->bo", masked, self.square, masked)
        return torch.relu((masked * self.linear).sum(-1) + quadratic)

    def true_fan_ins(self) -> list[tuple[int, ...]]:
        return [tuple(torch.nonzero(row).flatten().tolist()) for row in self.mask]


class Adder2(nn.Module):
    """PolyLUT-Add's adder as upstream writes it: its input holds the two sub-neurons' outputs stacked along
    the batch axis."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        first, second = x.chunk(2, dim=0)
        return first + second


class PolyAddLayer(nn.Module):
    """PolyLUT-Add: two PolyLUT sub-neuron layers on the same inputs, their outputs added."""

    def __init__(self, inputs: int, outputs: int, fan_in: int, seed: int = 0) -> None:
        super().__init__()
        self.first = PolyNeurons(inputs, outputs, fan_in, seed)
        self.second = PolyNeurons(inputs, outputs, fan_in, seed + 1)
        self.adder = Adder2()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.adder(torch.cat((self.first(x), self.second(x)), 0))

    def true_fan_ins(self) -> list[tuple[int, ...]]:
        return [tuple(sorted(set(a) | set(b))) for a, b in zip(self.first.true_fan_ins(), self.second.true_fan_ins())]


class QuantPolyAddLayer(nn.Module):
    """PolyLUT-Add as upstream writes it: each sub-neuron layer quantized, their codes handed to the adder stacked
    along the batch axis (``torch.cat(..., 0)``); batch norm and a quantizer follow the layer."""

    def __init__(self, inputs: int, outputs: int, fan_in: int, bits: int = 2, seed: int = 0) -> None:
        from iotable.nn import Quantize

        super().__init__()
        self.first = nn.Sequential(PolyNeurons(inputs, outputs, fan_in, seed), Quantize(bits, scale=0.25))
        self.second = nn.Sequential(PolyNeurons(inputs, outputs, fan_in, seed + 1), Quantize(bits, scale=0.25))
        self.adder = Adder2()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.adder(torch.cat((self.first(x), self.second(x)), 0))


class MaskedNeurons(nn.Module):
    """LogicNets: a dense weight times a fixed sparse mask, batch-norm-like scale and shift, ReLU."""

    def __init__(self, inputs: int, outputs: int, fan_in: int, seed: int = 0) -> None:
        super().__init__()
        generator = _generator(seed)
        mask = torch.zeros(outputs, inputs)
        for row in mask:
            row[torch.randperm(inputs, generator=generator)[:fan_in]] = 1
        self.register_buffer("mask", mask)
        self.weight = nn.Parameter(torch.randn(outputs, inputs, generator=generator))
        self.bias = nn.Parameter(torch.randn(outputs, generator=generator))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(nn.functional.linear(x, self.weight * self.mask, self.bias))

    def true_fan_ins(self) -> list[tuple[int, ...]]:
        return [tuple(torch.nonzero(row).flatten().tolist()) for row in self.mask]
