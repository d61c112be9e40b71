"""Every bad input iotable can receive, in one place: each raises its IOTableError naming the thing, the expectation
and what was received, and no internal IndexError, KeyError, RuntimeError or TypeError escapes.

Cases go from decoration (decompose) through domains, planning and enumeration, tables, whole-model graph
building and the runtime to bundles. Some repeat checks of the per-module test files; this module is the list.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

import iotable
from iotable import (
    Domain,
    InputError,
    IOTable,
    IOTableError,
    ModelError,
    OptionError,
    decompose,
    load,
    plan,
    precompute,
    save,
    spec_of,
    verify,
)
from iotable.errors import (
    BundleError,
    DomainError,
    EnumerationError,
    GraphError,
    MissingRowError,
    NotDecomposedError,
    ONNXFileError,
    PLAError,
    SpecError,
    SpecMismatchError,
    SpecOptionError,
    TableError,
    TableTooLargeError,
)
from iotable.network.precompute import precompute_layer, precompute_model
from iotable.nn import Quantize

from .test_bundle import stamp
from .test_network import sparse_linear

D1 = Domain.uniform(1)
D2 = Domain.uniform(2)
U2 = Domain.uniform(2, scale=0.5)


class Context:
    """What the cases share: a small network, a model, a bundle to copy and damage, and a scratch directory."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.model = nn.Sequential(sparse_linear(4, [[0, 1], [1, 2], [2, 3]]), Quantize(2, scale=0.5)).eval()
        self.net = precompute(self.model, input_domain=U2, example_input=torch.zeros(1, 4))
        self.raw_net = precompute(nn.Sequential(nn.Linear(2, 2)), input_domain=D1, example_input=torch.zeros(1, 2))
        self.bundle = save(self.net, root / "bundle")
        few = torch.tensor([[0.0, 0.5, 1.0, 1.5], [1.5, 1.0, 0.5, 0.0]])
        self.observation = iotable.observe(self.net, few)
        self.restricted = iotable.restrict(self.net, self.observation)
        codes = torch.cartesian_prod(*[torch.arange(4)] * 4)
        self.every_input = torch.tensor(U2.values, dtype=torch.float32)[codes]
        self._copies = 0

    def copy(self) -> Path:
        """A fresh copy of the bundle."""
        self._copies += 1
        return Path(shutil.copytree(self.bundle, self.root / f"copy{self._copies}"))

    def edited(self, edit: Callable[[dict], Any]) -> Path:
        """A copy of the bundle whose manifest went through ``edit``."""
        path = self.copy()
        manifest = json.loads((path / "manifest.json").read_text(encoding="utf-8"))
        edit(manifest)
        (path / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
        stamp(path)  # as an edit that knows the format would: the checks behind the checksum are reached
        return path

    def without(self, rel: str) -> Path:
        """A copy of the bundle without its file ``rel``."""
        path = self.copy()
        (path / rel).unlink()
        return path

    def damaged(self, rel: str, damage: Callable[[bytes], bytes]) -> Path:
        """A copy of the bundle whose file ``rel`` went through ``damage``."""
        path = self.copy()
        (path / rel).write_bytes(damage((path / rel).read_bytes()))
        return path


@dataclass(frozen=True)
class Case:
    """One bad input: the call, the error class, and regular expressions the message must all contain."""

    id: str
    call: Callable[[Context], Any]
    error: type[IOTableError]
    words: tuple[str, ...]


# -- helper modules -----------------------------------------------------------------------------------------


class Custom(nn.Module):
    """A module no built-in rule covers."""

    def forward(self, x):
        return x


class Crash(nn.Module):
    def forward(self, x):
        raise RuntimeError("boom")


class Pair(nn.Module):
    def forward(self, x):
        return x, x


class Mixes(nn.Module):
    """Output 0 reads inputs 0 and 1, whatever its metadata says."""

    def forward(self, x):
        return torch.stack([x[:, 0] + x[:, 1], x[:, 1]], dim=1)


class Halves(nn.Module):
    def forward(self, x):
        return x[:, :1]


class DataDependent(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.q = Quantize(1)

    def forward(self, x):
        return self.q(x) if x.sum() > 0 else self.q(-x)


class TwoInputs(nn.Module):
    def forward(self, x, y):
        return x


class TwoOutputs(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.q = Quantize(2)

    def forward(self, x):
        return self.q(x), self.q(x)


class Sine(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(2, 2)
        self.q = Quantize(2)

    def forward(self, x):
        return self.q(torch.sin(self.fc(x)))


class RawAdd(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(2, 2)
        self.q = Quantize(2)

    def forward(self, x):
        return self.q(self.fc(x) + x)


def linear() -> nn.Linear:
    return nn.Linear(4, 2)


def whole(*modules: nn.Module, shape: tuple[int, ...] = (2,), domain: Any = D2, **kwargs: Any) -> Any:
    """precompute a whole model (an nn.Sequential of ``modules``) on a one-sample example of ``shape``."""
    return precompute(nn.Sequential(*modules), input_domain=domain, example_input=torch.zeros(1, *shape), **kwargs)


def partial_table() -> IOTable:
    return IOTable([[0], [1]], [[1.0], [2.0]], input_domains=D2)


def broken_graph(ctx: Context) -> Any:
    graph, node = ctx.net.graph, ctx.net.graph["0"]
    index_map = np.array(node.meta.index_map)
    index_map[1, 0] = -1
    return graph.replace(dataclasses.replace(node, meta=dataclasses.replace(node.meta, index_map=index_map))).check()


def stamped(path: Path) -> Path:
    """The bundle at ``path`` with its manifest's checksum written anew (to reach the checks behind it)."""
    stamp(path)
    return path


def tampered_pad_graph() -> Any:
    """A replicate-padded network whose pad node's first entry copies element 3 instead of element 0."""
    net = whole(nn.Conv1d(1, 1, 3, padding=1, padding_mode="replicate"), Quantize(2), shape=(1, 4))
    pad = net.graph["0:pad"]
    index_map = np.array(pad.meta.index_map)
    index_map[0, 0] = 3
    return net.graph.replace(dataclasses.replace(pad, meta=dataclasses.replace(pad.meta, index_map=index_map))).check()


def flip_last_byte(data: bytes) -> bytes:
    return data[:-1] + bytes([data[-1] ^ 0x01])


def escape(manifest: dict, to: str) -> None:
    rel = "tables/layer0/unit0.outputs.npy"
    manifest["files"][to] = manifest["files"].pop(rel)
    manifest["layers"][0]["tables"][0]["outputs"] = to


def foreign_dir(ctx: Context) -> Path:
    path = ctx.root / "foreign"
    path.mkdir(exist_ok=True)
    (path / "notes.txt").write_text("mine")
    return path


def a_file(ctx: Context) -> Path:
    path = ctx.root / "file.txt"
    path.write_text("mine")
    return path


TABLE = "tables/layer0/unit1.outputs.npy"

CASES = [
    # -- decoration: decompose / spec_of ---------------------------------------------------------------------
    Case(
        "decompose-groups-zero",
        lambda c: decompose(linear(), groups=0),
        SpecOptionError,
        ("groups", "positive integer", "received 0"),
    ),
    Case(
        "decompose-groups-and-fan-in",
        lambda c: decompose(linear(), groups=2, fan_in=[[0]]),
        SpecOptionError,
        ("groups= or fan_in=, not both",),
    ),
    Case(
        "decompose-groups-not-dividing",
        lambda c: decompose(linear(), groups=3),
        SpecError,
        ("groups=3 does not divide the 4 input channels", "expected a divisor of 4"),
    ),
    Case(
        "decompose-fan-out-repeats",
        lambda c: decompose(linear(), fan_in=[[1], [2]], fan_out=[[1, 1], [0]]),
        SpecOptionError,
        (r"fan_out\[0\] = \[1, 1\] repeats an output", "expected distinct indices"),
    ),
    Case(
        "decompose-fan-in-negative",
        lambda c: decompose(linear(), fan_in=[[-1], [2]]),
        SpecOptionError,
        (r"fan_in\[0\] = \[-1\]", "negative index", "expected indices >= 0"),
    ),
    Case(
        "decompose-fan-in-empty",
        lambda c: decompose(linear(), fan_in=[]),
        SpecOptionError,
        ("fan_in must list at least one unit", "received an empty list"),
    ),
    Case(
        "decompose-fan-in-not-lists",
        lambda c: decompose(linear(), fan_in=3.5),
        SpecOptionError,
        ("fan_in must be a list of integer lists", "received 3.5"),
    ),
    Case(
        "decompose-fan-in-no-such-mask",
        lambda c: decompose(linear(), fan_in="abc"),
        SpecError,
        ("fan_in='abc' names no attribute", "Linear has no 'abc'", "path of a mask tensor"),
    ),
    Case(
        "decompose-fan-in-floats",
        lambda c: decompose(linear(), fan_in=[[0.5]]),
        SpecOptionError,
        ("fan_in must be a list of integer lists", r"received \[\[0\.5\]\]"),
    ),
    Case(
        "decompose-fan-in-beyond-inputs",
        lambda c: decompose(linear(), fan_in=[[0, 7], [1]]),
        SpecError,
        (
            r"decompose\(Linear\)",
            r"fan_in\[0\] = \[0, 7\] indexes element 7",
            "the module has 4",
            r"expected indices 0\.\.3",
        ),
    ),
    Case(
        "decompose-fan-out-alone",
        lambda c: decompose(linear(), fan_out=[[0]]),
        SpecOptionError,
        ("fan_out= needs fan_in=",),
    ),
    Case(
        "decompose-fan-out-count",
        lambda c: decompose(linear(), fan_in=[[0], [1]], fan_out=[[0]]),
        SpecOptionError,
        ("fan_in lists 2 units but fan_out lists 1", "expected one each"),
    ),
    Case(
        "decompose-kernel-zero",
        lambda c: decompose(Custom(), kernel_size=0),
        SpecOptionError,
        ("kernel_size must be an integer >= 1", "received 0"),
    ),
    Case(
        "decompose-kernel-rank-3",
        lambda c: decompose(Custom(), kernel_size=(1, 2, 3)),
        SpecOptionError,
        ("kernel_size", "a tuple of 1 or 2", r"received \(1, 2, 3\)"),
    ),
    Case(
        "decompose-kernel-float",
        lambda c: decompose(Custom(), kernel_size=1.5),
        SpecOptionError,
        ("kernel_size must be an integer", "received 1.5"),
    ),
    Case(
        "decompose-padding-negative",
        lambda c: decompose(Custom(), kernel_size=3, padding=-1),
        SpecError,
        ("padding must be 'same', 'valid', an integer >= 0", r"\(before, after\) pair", "received -1"),
    ),
    Case(
        "decompose-stride-without-kernel",
        lambda c: decompose(Custom(), stride=2),
        SpecOptionError,
        ("stride/dilation/padding describe a sliding window", "give kernel_size= too"),
    ),
    Case(
        "decompose-layout-unknown",
        lambda c: decompose(Custom(), layout="NCDHW"),
        OptionError,
        ("unknown layout 'NCDHW'", "expected one of 'NC', 'NCW', 'NWC', 'NCHW', 'NHWC'"),
    ),
    Case(
        "decompose-layout-not-spatial",
        lambda c: decompose(Custom(), layout="NC", kernel_size=3),
        SpecError,
        ("layout 'NC' has no spatial axis", "kernel_size"),
    ),
    Case(
        "decompose-padding-mode-unknown",
        lambda c: decompose(Custom(), kernel_size=3, padding=1, padding_mode="mirror"),
        OptionError,
        ("unknown padding mode 'mirror'", "expected one of 'zeros', 'reflect', 'replicate', 'circular'"),
    ),
    Case(
        "decompose-padding-pair-of-three",
        lambda c: decompose(Custom(), kernel_size=3, padding=((0, 1, 2),)),
        SpecError,
        (r"a \(before, after\) pair of them", r"received \(\(0, 1, 2\),\)"),
    ),
    Case(
        "decompose-padding-same-strided",
        lambda c: decompose(Custom(), kernel_size=3, stride=2, padding="same"),
        SpecError,
        ("padding='same' needs stride 1", r"received stride=\(2,\)", r"\(before, after\) pairs instead"),
    ),
    Case(
        "decompose-padding-mode-without-kernel",
        lambda c: decompose(Custom(), padding_mode="reflect"),
        SpecOptionError,
        ("describe a sliding window", "give kernel_size= too"),
    ),
    Case(
        "decompose-output-domain-type",
        lambda c: decompose(Custom(), output_domain=3),
        SpecError,
        ("output_domain must be an iotable.Domain", "received int"),
    ),
    Case(
        "decompose-not-a-module",
        lambda c: decompose(3, groups=1),
        SpecOptionError,
        ("expected a torch.nn.Module instance or subclass", "received int"),
    ),
    Case(
        "spec-of-undecorated",
        lambda c: spec_of(Custom()),
        NotDecomposedError,
        ("Custom has no decomposition metadata and no built-in rule", r"decorate it with iotable\.decompose"),
    ),
    Case(
        "spec-of-two-layer-block",
        lambda c: spec_of(nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2))),
        NotDecomposedError,
        (
            r"nn\.Sequential\(Linear, Linear\) is not one table layer",
            "expected one layer followed only by elementwise modules",
        ),
    ),
    # -- domains ----------------------------------------------------------------------------------------------
    Case(
        "domain-bits-zero",
        lambda c: Domain.uniform(0),
        DomainError,
        ("Domain.uniform", "expected bits as an integer from 1 to 24", "received 0"),
    ),
    Case("domain-bits-too-many", lambda c: Domain.uniform(25), DomainError, ("from 1 to 24", "received 25")),
    Case(
        "domain-bits-bool",
        lambda c: Domain.uniform(True),
        DomainError,
        ("expected bits as an integer", "received True"),
    ),
    Case(
        "domain-bits-string",
        lambda c: Domain.uniform("2"),
        DomainError,
        ("expected bits as an integer", "received '2'"),
    ),
    Case(
        "domain-scale-zero",
        lambda c: Domain.uniform(2, scale=0),
        DomainError,
        ("expected a finite scale > 0", "received 0"),
    ),
    Case(
        "domain-scale-nan",
        lambda c: Domain.uniform(2, scale=float("nan")),
        DomainError,
        ("expected a finite scale > 0", "received nan"),
    ),
    Case(
        "domain-scale-too-small",
        lambda c: Domain.uniform(2, scale=1e-46),
        DomainError,
        ("scale=1e-46 is too small for float32", "use a larger scale"),
    ),
    Case(
        "domain-zero-point-inf",
        lambda c: Domain.uniform(2, zero_point=float("inf")),
        DomainError,
        ("expected a finite zero_point", "received inf"),
    ),
    Case(
        "domain-values-same-in-float32",
        lambda c: Domain([0.1, 0.1 + 1e-12]),
        DomainError,
        ("expected values distinct in float32", "received 0.1 and 0.100000000001", "keep one of them"),
    ),
    Case(
        "domain-values-past-float32",
        lambda c: Domain([0, 1e39]),
        DomainError,
        (r"expected values float32 holds \(magnitude at most 3.4028235e\+38", r"received \{1e\+39\}"),
    ),
    Case(
        "domain-values-one-past-float32",
        lambda c: Domain([0, 3.4e38, 3.5e38]),
        DomainError,
        (r"expected values float32 holds", r"received \{3.5e\+38\}", "scale the values down"),
    ),
    Case(
        "domain-values-float32-too-far",
        lambda c: Domain([0.1, 0.10000000149011612 + 2**-27, 3e38]),
        DomainError,
        ("expected values whose float32 lies within", "received 3e\\+38, whose float32 is 3.0000000054977558e\\+38"),
    ),
    Case(
        "domain-values-empty",
        lambda c: Domain.values([]),
        DomainError,
        ("expected at least one value", "received an empty sequence"),
    ),
    Case(
        "domain-values-duplicates",
        lambda c: Domain.values([1, 1]),
        DomainError,
        ("expected distinct values", r"received duplicates in \{1, 1\}"),
    ),
    Case(
        "domain-values-nan", lambda c: Domain.values([0, float("nan")]), DomainError, ("expected finite values", "nan")
    ),
    Case(
        "domain-values-ragged",
        lambda c: Domain.values([[1, 2], [3]]),
        DomainError,
        ("Domain values: expected numbers", "received list"),
    ),
    Case(
        "encode-value-outside",
        lambda c: D2.encode([0.0, 0.3]),
        DomainError,
        (r"value 0\.3 at index \(1,\) is not in Domain\.uniform\(2\)", r"expected one of \{0, 1, 2, 3\}"),
    ),
    Case("encode-nan", lambda c: D2.encode([float("nan")]), DomainError, ("value nan", "is not in Domain.uniform")),
    Case(
        "encode-strings",
        lambda c: D2.encode(["a"]),
        DomainError,
        ("Domain.encode: expected numeric values", "received dtype <U1"),
    ),
    Case(
        "decode-code-out-of-range",
        lambda c: D2.decode([4]),
        DomainError,
        ("code 4 is out of range", r"expected 0\.\.3"),
    ),
    Case(
        "decode-float-codes",
        lambda c: D2.decode([0.5]),
        DomainError,
        ("Domain.decode: expected integer codes", "received dtype float64"),
    ),
    # -- enumeration: plan / precompute ---------------------------------------------------------------------
    Case(
        "plan-reflect-wider-than-input",
        lambda c: precompute(
            decompose(Custom(), kernel_size=1, padding=3, padding_mode="reflect"),
            input_domain=D2,
            example_input=torch.zeros(1, 1, 3),
        ),
        SpecError,
        ("^Custom: reflect padding of 3 before and 3 after an extent of 3", "allows at most 2 on each side"),
    ),
    Case(
        "plan-conv-declared-another-stride",
        lambda c: precompute(decompose(nn.Conv1d(1, 1, 3, stride=2), kernel_size=3), input_domain=D2),
        SpecError,
        ("^Conv1d: the layer's window is its Conv1d's own", r"stride=\(1,\) where the Conv1d has stride=\(2,\)"),
    ),
    Case(
        "plan-not-a-module",
        lambda c: plan(3, input_domain=D2),
        SpecOptionError,
        ("expected a torch.nn.Module", "received int"),
    ),
    Case(
        "plan-input-domain-type",
        lambda c: plan(linear(), input_domain=3),
        SpecError,
        ("Linear: input_domain must be an iotable.Domain or a sequence of them", "received int"),
    ),
    Case(
        "plan-input-domain-count",
        lambda c: plan(linear(), input_domain=[D2] * 3),
        SpecError,
        (r"Linear: 3 input domain\(s\) for 4 input channel\(s\)", "expected one per channel"),
    ),
    Case(
        "plan-max-rows-zero",
        lambda c: plan(linear(), input_domain=D2, max_rows=0),
        SpecOptionError,
        ("max_rows must be a positive integer", "received 0"),
    ),
    Case(
        "plan-table-too-large",
        lambda c: plan(nn.Linear(20, 1), input_domain=D2, max_rows=1000),
        TableTooLargeError,
        ("Linear: unit 0 reads 20 inputs", "= 40 bits", "the limit is 1000", "Decompose finer"),
    ),
    Case(
        "plan-custom-without-example",
        lambda c: plan(decompose(Custom()), input_domain=D2),
        SpecError,
        ("cannot tell the input shape of Custom", "pass example_input="),
    ),
    Case(
        "plan-example-1d",
        lambda c: plan(linear(), input_domain=D2, example_input=torch.zeros(3)),
        SpecError,
        (r"example_input: expected a batch \(N, C, \.\.\.\)", r"received shape \(3,\)"),
    ),
    Case(
        "plan-example-string",
        lambda c: plan(linear(), input_domain=D2, example_input="x"),
        SpecError,
        ("example_input: expected a tensor or array with a batch axis", "received str"),
    ),
    Case(
        "plan-example-wrong-rank",
        lambda c: plan(nn.Conv1d(1, 1, 3), input_domain=D2, example_input=torch.zeros(1, 4)),
        SpecError,
        ("Conv1d: layout NCW expects inputs of rank 3", r"example_input has shape \(N, 4\)"),
    ),
    Case(
        "plan-frame-too-small",
        lambda c: plan(nn.Conv1d(1, 1, 3), input_domain=D2, example_input=torch.zeros(1, 1, 2)),
        SpecError,
        ("the input extent 2 cannot hold one window of span 3",),
    ),
    Case(
        "precompute-forward-fails",
        lambda c: precompute(decompose(Crash()), input_domain=D2, example_input=torch.zeros(1, 2)),
        EnumerationError,
        (r"Crash: forward failed on an input of shape \(1, 2\)", "RuntimeError: boom"),
    ),
    Case(
        "precompute-forward-returns-tuple",
        lambda c: precompute(decompose(Pair()), input_domain=D2, example_input=torch.zeros(1, 2)),
        EnumerationError,
        ("expected forward to return one tensor", "received tuple"),
    ),
    Case(
        "precompute-undeclared-input",
        lambda c: precompute(decompose(Mixes(), fan_in=[[0], [1]]), input_domain=D2, example_input=torch.zeros(1, 2)),
        SpecMismatchError,
        (
            r"Mixes: unit 0 \(output 0\) changed when input 1 changed",
            r"declares its fan-in as input channel\(s\) \[0\]",
        ),
    ),
    Case(
        "precompute-fan-in-vs-outputs",
        lambda c: precompute(decompose(Halves(), fan_in=[[0], [1]]), input_domain=D2, example_input=torch.zeros(1, 2)),
        SpecError,
        (r"Halves: fan_in lists 2 unit\(s\) but the module has 1 output\(s\)",),
    ),
    Case(
        "precompute-outputs-outside-declared-domain",
        lambda c: precompute(decompose(nn.Linear(2, 1), output_domain=D1), input_domain=D2),
        EnumerationError,
        ("Linear", r"is not in Domain\.uniform\(1\)", r"expected one of \{0, 1\}"),
    ),
    # -- tables ------------------------------------------------------------------------------------------------
    Case(
        "table-float-inputs",
        lambda c: IOTable([[0.5]], [[1]], input_domains=D2),
        TableError,
        (r"inputs must be integer codes of shape \(N, fan_in\)", r"received float64 \(1, 1\)"),
    ),
    Case(
        "table-duplicate-rows",
        lambda c: IOTable([[0], [0]], [[1], [1]], input_domains=D2),
        TableError,
        (r"input row \(0,\) appears more than once", "expected distinct rows"),
    ),
    Case(
        "table-code-out-of-range",
        lambda c: IOTable([[9]], [[1]], input_domains=D2),
        TableError,
        ("input column 0 holds code 9", r"expected codes 0\.\.3"),
    ),
    Case(
        "table-outputs-shape",
        lambda c: IOTable([[0]], [[1], [2]], input_domains=D2),
        TableError,
        (r"outputs must have shape \(1, fan_out\)", r"received \(2, 1\)"),
    ),
    Case(
        "table-domain-count",
        lambda c: IOTable([[0, 1]], [[1]], input_domains=[D2]),
        TableError,
        (r"1 input domain\(s\) for 2 input column\(s\)", "expected one per input"),
    ),
    Case(
        "table-from-no-pairs",
        lambda c: IOTable.from_pairs([], input_domains=D2),
        TableError,
        ("expected at least one", "received none"),
    ),
    Case(
        "lookup-wrong-width",
        lambda c: partial_table().lookup([[0, 1]]),
        TableError,
        (r"expected integer codes of shape \(M, 1\)", r"received int64 \(1, 2\)"),
    ),
    Case(
        "lookup-code-out-of-range",
        lambda c: partial_table().lookup([[9]]),
        TableError,
        ("row 0 holds code 9 in input 0", r"expected 0\.\.3"),
    ),
    Case(
        "lookup-missing-row",
        lambda c: partial_table().lookup([[3]]),
        MissingRowError,
        (r"input \(3,\) \(row 0 of the query\) is not in this partial table", "pass default= or dont_care="),
    ),
    # -- graph building: whole models ------------------------------------------------------------------------
    Case(
        "model-untraceable",
        lambda c: precompute(DataDependent(), input_domain=D1, example_input=torch.zeros(1, 3)),
        ModelError,
        ("cannot trace DataDependent with torch.fx", "decorate the block"),
    ),
    Case(
        "model-two-layers-between-quantizers",
        lambda c: whole(nn.Linear(3, 3), nn.Linear(3, 2), Quantize(1), shape=(3,)),
        ModelError,
        ("0 and 1 sit between the same pair of quantizers", r"Quantize.* after 0", "host="),
    ),
    Case(
        "model-unsupported-function",
        lambda c: precompute(Sine(), input_domain=D2, example_input=torch.zeros(1, 2)),
        ModelError,
        ("the function sin is not supported between tables",),
    ),
    Case(
        "model-undecorated-module",
        lambda c: whole(nn.Linear(2, 2), nn.Softmax(1), Quantize(2)),
        ModelError,
        ("Softmax has no decomposition metadata", "host="),
    ),
    Case(
        "model-two-inputs",
        lambda c: precompute(TwoInputs(), input_domain=D2, example_input=torch.zeros(1, 2)),
        ModelError,
        ("more than one input are not supported",),
    ),
    Case(
        "model-two-outputs",
        lambda c: precompute(TwoOutputs(), input_domain=D2, example_input=torch.zeros(1, 2)),
        ModelError,
        ("the model returns tuple", "expected a single tensor"),
    ),
    Case(
        "model-no-example",
        lambda c: precompute(nn.Sequential(nn.Conv1d(1, 1, 3), Quantize(2)), input_domain=D2),
        ModelError,
        ("cannot tell the input shape of Sequential", "pass example_input="),
    ),
    Case(
        "model-example-1d",
        lambda c: precompute(c.model, input_domain=U2, example_input=np.zeros(4)),
        ModelError,
        (r"a whole model needs example_input=, a batch \(N, \.\.\.\)", "received Tensor"),
    ),
    Case(
        "model-example-wrong-width",
        lambda c: precompute(c.model, input_domain=U2, example_input=torch.zeros(1, 5)),
        ModelError,
        (r"running the traced model on example_input of shape \(1, 5\) failed",),
    ),
    Case(
        "model-host-unknown-name",
        lambda c: precompute(c.model, input_domain=U2, example_input=torch.zeros(1, 4), host=["nope"]),
        ModelError,
        ("host=: no submodule named 'nope'", r"expected one of \['0', '1'\]"),
    ),
    Case(
        "model-host-wrong-type",
        lambda c: precompute(c.model, input_domain=U2, example_input=torch.zeros(1, 4), host=[3]),
        ModelError,
        ("host=: expected submodule names or modules", "received int"),
    ),
    Case(
        "model-host-foreign-module",
        lambda c: precompute(c.model, input_domain=U2, example_input=torch.zeros(1, 4), host=[nn.Linear(1, 1)]),
        ModelError,
        ("host=: Linear is not a submodule of the model",),
    ),
    Case(
        "model-input-layout-unknown",
        lambda c: precompute(c.model, input_domain=U2, example_input=torch.zeros(1, 4), input_layout="XYZ"),
        OptionError,
        ("input_layout: unknown layout 'XYZ'", "expected one of"),
    ),
    Case(
        "model-input-domain-count",
        lambda c: whole(nn.Conv1d(2, 2, 1), Quantize(2), shape=(2, 4), domain=[D2] * 3),
        ModelError,
        (r"input_domain lists 3 domain\(s\) for an input of 2 channel\(s\)",),
    ),
    Case(
        "model-pool-unquantized",
        lambda c: whole(nn.Conv1d(1, 1, 1), nn.MaxPool1d(2), Quantize(2), shape=(1, 4)),
        ModelError,
        ("max-pool reads the unquantized output of 0", "put a Quantize before the pool"),
    ),
    Case(
        "model-flatten-unquantized",
        lambda c: whole(nn.Conv1d(1, 1, 1), nn.Flatten(), Quantize(2), shape=(1, 4)),
        ModelError,
        ("flatten reads an unquantized tensor", "put a Quantize before it"),
    ),
    Case(
        "model-add-unquantized",
        lambda c: precompute(RawAdd(), input_domain=D2, example_input=torch.zeros(1, 2)),
        ModelError,
        ("an add must read two quantized tensors", "put a Quantize on each operand"),
    ),
    Case(
        "model-padding-without-zero",
        lambda c: whole(nn.Conv1d(1, 1, 3, padding=1), Quantize(2), shape=(1, 4), domain=Domain.values([1, 2])),
        ModelError,
        ("padding feeds real 0", r"domain Domain\.values\(\[1, 2\]\) has no 0"),
    ),
    Case(
        "model-layer-too-large",
        lambda c: whole(Quantize(1), nn.Linear(40, 2), Quantize(1), shape=(40,), domain=D1),
        TableTooLargeError,
        ("unit 0 reads 40 inputs", r"pass host=\['1'\]"),
    ),
    # -- runtime inputs --------------------------------------------------------------------------------------
    Case(
        "run-wrong-shape",
        lambda c: c.net.run(torch.zeros(2, 5)),
        InputError,
        (r"net\.run: expected a batch of shape \(N, 4\)", r"received \(2, 5\)"),
    ),
    Case(
        "run-one-sample-without-batch",
        lambda c: c.net.run(torch.zeros(4)),
        InputError,
        (r"expected a batch of shape \(N, 4\)", r"received \(4,\)"),
    ),
    Case(
        "run-list",
        lambda c: c.net.run([[0.0] * 4]),
        InputError,
        (r"expected a tensor or array of shape \(N, 4\)", "received list"),
    ),
    Case("run-none", lambda c: c.net.run(None), InputError, ("expected a tensor or array", "received NoneType")),
    Case(
        "run-value-outside-domain",
        lambda c: c.net.run(torch.full((2, 4), 0.25)),
        DomainError,
        (
            "input values must belong to the input domain",
            r"value 0\.25 at index \(0, 0\)",
            r"Domain\.uniform\(2, scale=0\.5\)",
        ),
    ),
    Case("run-nan", lambda c: c.net.run(torch.full((2, 4), float("nan"))), DomainError, ("input domain", "value nan")),
    Case("run-inf", lambda c: c.net.run(torch.full((2, 4), float("inf"))), DomainError, ("input domain", "value inf")),
    Case(
        "run-code-out-of-range",
        lambda c: c.net.run(torch.full((2, 4), 4), codes=True),
        InputError,
        (r"code 4 at index \(0, 0\) is outside 0\.\.3 of the input domain",),
    ),
    Case(
        "run-negative-code",
        lambda c: c.net.run(torch.full((2, 4), -1), codes=True),
        InputError,
        (r"code -1 at index \(0, 0\) is outside 0\.\.3",),
    ),
    Case(
        "run-float-codes",
        lambda c: c.net.run(torch.zeros(2, 4), codes=True),
        InputError,
        ("codes must be an integer tensor", r"received dtype torch\.float32", "pass codes=False"),
    ),
    Case(
        "run-bool-codes",
        lambda c: c.net.run(torch.zeros(2, 4, dtype=torch.bool), codes=True),
        InputError,
        ("codes must be an integer tensor", r"received dtype torch\.bool"),
    ),
    Case(
        "run-return-codes-of-raw-output",
        lambda c: c.raw_net.run(torch.zeros(2, 2), return_codes=True),
        InputError,
        ("return_codes=True needs a quantized output", "outputs raw values"),
    ),
    Case(
        "verify-wrong-shape",
        lambda c: verify(c.model, c.net, torch.zeros(2, 5)),
        InputError,
        (r"expected a batch of shape \(N, 4\)", r"received \(2, 5\)"),
    ),
    Case(
        "verify-other-model",
        lambda c: verify(nn.Linear(4, 2), c.net, torch.zeros(2, 4)),
        ModelError,
        (r"the network outputs shape \(2, 3\), the model \(2, 2\)",),
    ),
    Case(
        "run-dont-care-row",
        lambda c: c.restricted.run(c.every_input),
        MissingRowError,
        ("unit 0", r"hit a don't-care row \(not observed\)", "Restrict with a default"),
    ),
    Case(
        "graph-unknown-node",
        lambda c: c.net.graph["nope"],
        GraphError,
        ("no node named 'nope'", r"nodes are \['input', '0', 'output'\]"),
    ),
    Case("graph-undriven-input", broken_graph, GraphError, ("table '0' unit 1 input 0 is not driven",)),
    Case(
        "graph-pad-map-disagrees",
        lambda c: tampered_pad_graph(),
        GraphError,
        (r"pad node '0:pad': index_map\[\(0, 0\)\] is 3", "mode 'replicate'", "copies 0 there", "pad_index_map"),
    ),
    # -- observing, restricting, PLA files -----------------------------------------------------------------
    Case(
        "observe-wrong-shape",
        lambda c: iotable.observe(c.net, torch.zeros(2, 5)),
        InputError,
        (r"expected a batch of shape \(N, 4\)", r"received \(2, 5\)"),
    ),
    Case(
        "restrict-min-count-zero",
        lambda c: iotable.restrict(c.net, c.observation, min_count=0),
        iotable.errors.ObserveError,
        ("restrict: min_count must be a positive integer", "received 0"),
    ),
    Case(
        "restrict-default-unknown",
        lambda c: iotable.restrict(c.net, c.observation, default="one"),
        iotable.errors.ObserveError,
        ("default must be None, a value, or 'zero'", "received 'one'"),
    ),
    Case(
        "restrict-without-observation",
        lambda c: iotable.restrict(c.net, iotable.Observation()),
        iotable.errors.ObserveError,
        (r"the observation has no counts for layer\(s\) \['0'\]", "observe this network first"),
    ),
    Case(
        "restrict-partial-network",
        lambda c: iotable.restrict(c.restricted, c.observation),
        iotable.errors.ObserveError,
        ("layer '0' unit 0 is already partial", "restrict the dense network"),
    ),
    Case(
        "pla-raw-outputs",
        lambda c: iotable.pla.write_pla(c.raw_net.tables[0], c.root / "raw.pla"),
        PLAError,
        ("PLA needs code outputs", "holds raw values"),
    ),
    Case(
        "pla-dont-cares-option",
        lambda c: iotable.pla.write_pla(c.net.tables[0], c.root / "t.pla", dont_cares="maybe"),
        PLAError,
        ("dont_cares must be 'auto', 'explicit' or 'implicit'", "received 'maybe'"),
    ),
    Case(
        "pla-missing-file",
        lambda c: iotable.pla.read_pla(c.root / "none.pla", input_domains=[U2] * 2, output_domain=U2),
        PLAError,
        ("read_pla: cannot read", "none.pla"),
    ),
    Case(
        "pla-wrong-widths",
        lambda c: iotable.pla.read_pla(
            iotable.pla.write_pla(c.net.tables[0], c.root / "t0.pla"), input_domains=[U2] * 3, output_domain=U2
        ),
        PLAError,
        ("t0.pla' declares .i 4", "expected .i 6"),
    ),
    # -- loading: bundles -------------------------------------------------------------------------------------
    Case("load-path-type", lambda c: load(3), BundleError, ("expected a bundle directory path", "received int")),
    Case(
        "load-missing-directory",
        lambda c: load(c.root / "nothing"),
        BundleError,
        ("nothing does not exist", "expected a bundle directory"),
    ),
    Case(
        "load-a-file",
        lambda c: load(a_file(c)),
        BundleError,
        ("file.txt is not a directory", "expected a bundle directory"),
    ),
    Case(
        "load-no-manifest",
        lambda c: load(foreign_dir(c)),
        BundleError,
        (r"foreign/manifest\.json: missing", "not an iotable bundle"),
    ),
    Case(
        "load-manifest-not-json",
        lambda c: load(stamped(c.damaged("manifest.json", lambda d: d[:20]))),
        BundleError,
        (r"manifest\.json: not valid JSON", "corrupted"),
    ),
    Case(
        "load-manifest-edited",
        lambda c: load(c.damaged("manifest.json", lambda d: d.replace(b'"scale": 0.5', b'"scale": 1.5', 1))),
        BundleError,
        (r"manifest\.json: checksum mismatch", r"manifest\.sha256 says", "save the bundle again"),
    ),
    Case(
        "load-newer-format",
        lambda c: load(c.edited(lambda m: m.update(format_version=99))),
        BundleError,
        ("format_version 99 was written by a newer iotable", "reads format_version 6", "Upgrade iotable"),
    ),
    Case(
        "load-unknown-format-version",
        lambda c: load(c.edited(lambda m: m.update(format_version=-1))),
        BundleError,
        ("unknown format_version -1", "expected an integer from 1 to 6"),
    ),
    Case(
        "load-checksum",
        lambda c: load(c.damaged(TABLE, flip_last_byte)),
        BundleError,
        (rf"{TABLE}: checksum mismatch", "the file is corrupted"),
    ),
    Case(
        "load-truncated",
        lambda c: load(c.damaged(TABLE, lambda d: d[:-3])),
        BundleError,
        (rf"{TABLE}: truncated", "expected", "bytes", "found"),
    ),
    Case("load-missing-table", lambda c: load(c.without(TABLE)), BundleError, (rf"{TABLE}: missing from the bundle",)),
    Case(
        "load-shape-disagrees",
        lambda c: load(c.edited(lambda m: m["files"][TABLE].update(shape=[16]))),
        BundleError,
        (rf"{TABLE}: holds dtype \|u1 and shape \(16, 1\)", r"says dtype \|u1 and shape \(16,\)"),
    ),
    Case(
        "load-dtype-disagrees",
        lambda c: load(c.edited(lambda m: m["files"][TABLE].update(dtype="<f4"))),
        BundleError,
        (rf"{TABLE}: holds dtype \|u1", "says dtype <f4"),
    ),
    Case(
        "load-path-with-dotdot",
        lambda c: load(c.edited(lambda m: escape(m, "../x.npy"))),
        BundleError,
        ("the file name '../x.npy' is not one a bundle holds", "relative path inside the bundle", "no '..'"),
    ),
    Case(
        "load-absolute-path",
        lambda c: load(c.edited(lambda m: escape(m, "/etc/x.npy"))),
        BundleError,
        ("the file name '/etc/x.npy' is not one a bundle holds", "no absolute path"),
    ),
    Case(
        "load-missing-field",
        lambda c: load(c.edited(lambda m: m.pop("layers"))),
        BundleError,
        (r"manifest\.json: expected the fields", r"missing \['layers'\]"),
    ),
    Case(
        "load-field-of-wrong-type",
        lambda c: load(c.edited(lambda m: m.update(input_shape="4"))),
        BundleError,
        ("input_shape: expected a list of integers", "received str"),
    ),
    Case(
        "load-host-modules-type",
        lambda c: load(c.bundle, host_modules="fc"),
        BundleError,
        ("host_modules must map host node names to modules", "received str"),
    ),
    Case(
        "load-host-modules-unknown",
        lambda c: load(c.bundle, host_modules={"fc": nn.Linear(1, 1)}),
        BundleError,
        (r"host_modules names \['fc'\]", r"host nodes are \[\]"),
    ),
    Case(
        "save-not-a-network",
        lambda c: save({"tables": []}, c.root / "new"),
        BundleError,
        ("expected a TableNetwork or LayerTables", "received dict"),
    ),
    Case("save-path-type", lambda c: save(c.net, 3), BundleError, ("expected a directory path", "received int")),
    Case(
        "save-over-a-file", lambda c: save(c.net, a_file(c)), BundleError, ("file.txt exists and is not a directory",)
    ),
    Case(
        "save-over-a-foreign-directory",
        lambda c: save(c.net, foreign_dir(c)),
        BundleError,
        ("not an iotable bundle", "refusing to replace it"),
    ),
    # -- inputs that used to escape as internal errors ----------------------------------------------------------
    Case("domain-values-string", lambda c: Domain.values("ab"), DomainError, ("expected a sequence of numbers", "str")),
    Case("domain-values-words", lambda c: Domain.values(["a", "b"]), DomainError, ("expected real numbers",)),
    Case("domain-values-none", lambda c: Domain.values(None), DomainError, ("expected a sequence of numbers",)),
    Case("domain-values-complex", lambda c: Domain.values([1j, 2]), DomainError, ("expected real numbers", "complex")),
    Case("domain-scale-string", lambda c: Domain.uniform(2, scale="x"), DomainError, ("real number for scale", "'x'")),
    Case("domain-scale-none", lambda c: Domain.uniform(2, scale=None), DomainError, ("real number for scale",)),
    Case(
        "domain-zero-point-none",
        lambda c: Domain.uniform(2, zero_point=None),
        DomainError,
        ("real number for zero_point", "None"),
    ),
    Case("decompose-spec-of-int", lambda c: spec_of(3), SpecError, ("expected a torch.nn.Module", "received int")),
    Case(
        "precompute-budget-string",
        lambda c: precompute(linear(), input_domain=D2, memory_budget="x"),
        SpecOptionError,
        ("memory_budget must be a positive integer", "'x'"),
    ),
    Case(
        "table-dont-care-string",
        lambda c: IOTable([[0]], [[1.0]], input_domains=D2, dont_care="x"),
        TableError,
        ("dont_care must be a number or 1 number", "'x'"),
    ),
    Case(
        "table-dont-care-length",
        lambda c: IOTable([[0]], [[1.0]], input_domains=D2, dont_care=[1, 2]),
        TableError,
        ("dont_care must be a number or 1 number",),
    ),
    Case(
        "table-lookup-default-string",
        lambda c: partial_table().lookup([[3]], default="x"),
        TableError,
        ("default must be a number",),
    ),
    Case(
        "model-input-domain-int",
        lambda c: precompute(c.model, input_domain=3, example_input=torch.zeros(1, 4)),
        ModelError,
        ("input_domain must be an iotable.Domain", "received int"),
    ),
    Case(
        "run-unsigned-codes-out-of-range",
        lambda c: c.net.run(np.full((2, 4), 9, np.uint16), codes=True),
        InputError,
        ("code 9 at index", r"outside 0\.\.3"),
    ),
    Case(
        "run-string-array",
        lambda c: c.net.run(np.array([["a"] * 4])),
        InputError,
        ("expected a numeric array", "dtype <U1"),
    ),
    Case(
        "run-complex",
        lambda c: c.net.run(torch.zeros(2, 4, dtype=torch.complex64)),
        InputError,
        ("expected a real tensor", "complex64"),
    ),
    Case(
        "run-meta-device",
        lambda c: c.net.run(torch.zeros(2, 4, device="meta")),
        InputError,
        ("expected a real tensor with data", "meta"),
    ),
    Case(
        "run-layer-name",
        lambda c: c.net["nope"],
        iotable.errors.LayerNotFoundError,
        ("no table layer named 'nope'", "layers are"),
    ),
    Case(
        "run-verify-not-a-model",
        lambda c: verify("model", c.net, c.every_input),
        ONNXFileError,
        ("no file 'model'; expected the model", "or a torch module"),
    ),
    Case(
        "run-verify-not-a-net",
        lambda c: verify(c.model, "net", c.every_input),
        ModelError,
        ("expected a TableNetwork",),
    ),
    Case("model-graph-kind", lambda c: c.net.graph.nodes_of("nope"), GraphError, ("unknown node kind 'nope'",)),
    Case(
        "restrict-observe-batch-zero",
        lambda c: iotable.observe(c.net, c.every_input, batch_size=0),
        iotable.errors.ObserveError,
        ("batch_size must be a positive integer", "0"),
    ),
    Case(
        "restrict-observe-not-a-net",
        lambda c: iotable.observe("net", c.every_input),
        iotable.errors.ObserveError,
        ("expected a TableNetwork", "str"),
    ),
    Case(
        "restrict-not-an-observation",
        lambda c: iotable.restrict(c.net, "obs"),
        iotable.errors.ObserveError,
        ("expected an Observation", "str"),
    ),
    Case(
        "restrict-default-out-of-range",
        lambda c: iotable.restrict(c.net, c.observation, default=99),
        TableError,
        (r"dont_care must be output codes 0\.\.3", "99"),
    ),
    Case(
        "pla-write-not-a-table",
        lambda c: iotable.pla.write_pla("x", c.root / "x.pla"),
        PLAError,
        ("expected an IOTable",),
    ),
    Case("pla-export-not-tables", lambda c: iotable.export_pla("x", c.root / "pla"), PLAError, ("expected a network",)),
    Case(
        "pla-read-short-row",
        lambda c: iotable.pla.read_pla(short_pla(c), input_domains=[D1, D1], output_domain=D1),
        PLAError,
        ("row 0 has fields of widths", r"expected \[2, 1\]"),
    ),
]


def pla_file(ctx: Context, name: str, text: str) -> Path:
    """A PLA file of ``text`` in the scratch directory."""
    path = ctx.root / name
    path.write_text(text)
    return path


def symlink_loop(ctx: Context) -> Path:
    path = ctx.root / "loop"
    if not path.is_symlink():
        path.symlink_to(path)
    return path


def nested(depth: int) -> Any:
    value: Any = 0
    for _ in range(depth):
        value = [value]
    return value


def npy_format_2(ctx: Context) -> Path:
    """A copy of the bundle whose table file is .npy 2.0, listed with its true checksum and size."""
    path = ctx.copy()
    array = np.load(path / TABLE)
    with open(path / TABLE, "wb") as f:
        np.lib.format.write_array(f, array, version=(2, 0))
    data = (path / TABLE).read_bytes()
    manifest = json.loads((path / "manifest.json").read_text(encoding="utf-8"))
    manifest["files"][TABLE].update(sha256=hashlib.sha256(data).hexdigest(), bytes=len(data))
    (path / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    stamp(path)
    return path


def empty_partial_table() -> IOTable:
    return IOTable(np.zeros((0, 1), int), np.zeros((0, 1)), input_domains=[D2])


CASES += [
    # -- issue 16: inputs that escaped as internal errors, or were accepted and misread --------------------------
    Case(
        "domain-params-unknown-keys",
        lambda c: Domain([1, 2], params={"x": 1}),
        DomainError,
        ("params must be a dict with exactly the keys", r"received \['x'\]", "Domain.uniform"),
    ),
    Case(
        "domain-params-disagree-with-values",
        lambda c: Domain([0, 1, 2, 4], params=D2.params),
        DomainError,
        (r"do not give the 4 value\(s\) \{0, 1, 2, 4\}", "omit params="),
    ),
    Case(
        "domain-params-truthy-string",
        lambda c: Domain(D2.values, params={**D2.params, "narrow": "yes"}),
        DomainError,
        (r"params\['narrow'\] must be True or False", "'yes'"),
    ),
    Case(
        "domain-signed-string",
        lambda c: Domain.uniform(2, signed="no"),
        DomainError,
        ("expected True or False for signed", "str 'no'"),
    ),
    Case(
        "domain-narrow-int",
        lambda c: Domain.uniform(2, narrow=1),
        DomainError,
        ("expected True or False for narrow", "int 1"),
    ),
    Case(
        "domain-encode-meta-tensor",
        lambda c: D2.encode(torch.zeros(2, device="meta")),
        DomainError,
        ("expected a tensor of numbers", "a meta tensor"),
    ),
    Case(
        "table-unpack-beyond-64-bits",
        lambda c: c.net.tables[0].unpack([10**20]),
        TableError,
        ("address 100000000000000000000 is outside 0..15",),
    ),
    Case(
        "table-unpack-negative",
        lambda c: c.net.tables[0].unpack(-1),
        TableError,
        (r"address -1 is outside 0\.\.15",),
    ),
    Case(
        "table-unpack-fraction",
        lambda c: c.net.tables[0].unpack(1.5),
        TableError,
        ("expected integer addresses", "dtype float64", "1.5"),
    ),
    Case(
        "table-lookup-no-rows",
        lambda c: empty_partial_table().lookup([[1]]),
        MissingRowError,
        (r"input \(1,\)", r"partial table of 0 row\(s\)", "pass default= or dont_care="),
    ),
    Case(
        "precompute-cache-dir-int",
        lambda c: precompute(linear(), input_domain=D2, cache_dir=123),
        iotable.errors.CacheError,
        ("cache_dir: expected a directory path", "received int"),
    ),
    Case(
        "precompute-cache-dir-empty",
        lambda c: precompute(linear(), input_domain=D2, cache_dir=""),
        iotable.errors.CacheError,
        ("received ''", "would write into the current directory", r"cache_dir='\.'"),
    ),
    Case(
        "precompute-cache-dir-nul",
        lambda c: precompute(linear(), input_domain=D2, cache_dir=str(c.root / "a\0b")),
        iotable.errors.CacheError,
        ("holds a NUL character", "pass another path"),
    ),
    Case(
        "precompute-cache-dir-too-long",
        lambda c: precompute(linear(), input_domain=D2, cache_dir=c.root / ("a" * 5000)),
        iotable.errors.CacheError,
        ("cache_dir: cannot create", "File name too long", "choose a shorter path"),
    ),
    Case(
        "precompute-name-int",
        lambda c: precompute(linear(), input_domain=D2, name=5),
        SpecOptionError,
        ("name must be a non-empty string", "received 5"),
    ),
    Case(
        "precompute-model-none",
        lambda c: precompute(None, input_domain=U2, example_input=torch.zeros(1, 3)),
        SpecOptionError,
        (
            r"^precompute: expected a torch.nn.Module \(a layer, a decorated block or a whole model\)",
            "received NoneType",
        ),
    ),
    Case(
        "precompute-model-function",
        lambda c: precompute_model(lambda x: x, input_domain=U2, example_input=torch.zeros(1, 3)),
        SpecOptionError,
        ("^precompute_model: expected a torch.nn.Module", "received function", "wrap a function in an nn.Module"),
    ),
    Case(
        "precompute-model-onnx-path",
        lambda c: precompute_layer(c.root / "model.onnx", input_domain=U2),
        SpecOptionError,
        (
            "^precompute_layer: expected a torch.nn.Module",
            r"received the path '.*model\.onnx'",
            "a QONNX model \\(.onnx\\) goes to iotable.precompute",
        ),
    ),
    Case(
        "precompute-example-of-no-elements",
        lambda c: precompute(
            nn.Sequential(Quantize(2, scale=0.5), nn.Linear(0, 2), Quantize(2, scale=0.5)).eval(),
            input_domain=U2,
            example_input=torch.zeros(1, 0),
        ),
        ModelError,
        (r"^precompute: example_input has shape \(1, 0\), samples of no elements", "pass a batch"),
    ),
    Case(
        "plan-layer-of-no-inputs",
        lambda c: plan(nn.Linear(0, 2), input_domain=U2),
        SpecError,
        ("^Linear: a table layer reads at least one input channel, but Linear has 0", "fold it into"),
    ),
    Case(
        "plan-conv-example-of-no-channels",
        lambda c: precompute(nn.Conv1d(0, 2, 3), input_domain=U2, example_input=torch.zeros(1, 0, 5)),
        SpecError,
        (r"^Conv1d: .* but Conv1d has 0 \(from an example input of shape \(0, 5\)\)",),
    ),
    Case(
        "verify-empty-batch",
        lambda c: verify(c.model, c.net, torch.zeros(0, 4)),
        InputError,
        (r"^verify: expected a batch of at least one sample, received shape \(0, 4\)", "proves nothing"),
    ),
    Case(
        "precompute-check-string",
        lambda c: precompute(linear(), input_domain=D2, check="no"),
        SpecOptionError,
        ("check must be True or False", "str 'no'"),
    ),
    Case(
        "save-nul-path",
        lambda c: save(c.net, str(c.root / "a\0b")),
        BundleError,
        ("save: the path", "holds a NUL character", "pass the bundle directory's path"),
    ),
    Case(
        "save-path-too-long",
        lambda c: save(c.net, c.root / ("a" * 5000)),
        BundleError,
        ("save: cannot use the path", "File name too long", "choose a shorter path"),
    ),
    Case(
        "save-layer-of-another-plan",
        lambda c: save(
            iotable.network.precompute.LayerTables(
                plan=c.net["0"].plan, tables=(*c.raw_net.tables, c.raw_net.tables[0])
            ),
            c.root / "mixed",
        ),
        BundleError,
        ("save: refusing to write", "which load would refuse", "disagree with the plan of unit 0"),
    ),
    Case(
        "load-nul-path",
        lambda c: load(str(c.root / "a\0b")),
        BundleError,
        ("load: the path", "holds a NUL character"),
    ),
    Case(
        "load-path-too-long",
        lambda c: load(c.root / ("a" * 5000)),
        BundleError,
        ("load: cannot use the path", "File name too long", "choose a shorter path"),
    ),
    Case("load-empty-path", lambda c: load(""), BundleError, ("load: the path '' is empty",)),
    Case(
        "load-symlink-loop",
        lambda c: load(symlink_loop(c)),
        BundleError,
        ("loop does not exist", "expected a bundle directory"),
    ),
    Case(
        "load-checksum-file-missing",
        lambda c: load(c.without("manifest.sha256")),
        BundleError,
        (r"manifest\.sha256: missing", "save it again"),
    ),
    Case(
        "load-declared-bytes",
        lambda c: load(c.edited(lambda m: m["files"][TABLE].update(bytes=1))),
        BundleError,
        (rf"{TABLE}: holds \d+ bytes, but manifest\.json says 1",),
    ),
    Case(
        "load-deep-json",
        lambda c: load(c.edited(lambda m: m["graph"]["nodes"][0]["meta"].update(deep=nested(500)))),
        BundleError,
        ("nested deeper than 32 levels",),
    ),
    Case(
        "load-unused-domain",
        lambda c: load(c.edited(lambda m: m["domains"].append({**m["domains"][0], "scale": 2.0}))),
        BundleError,
        (r"domains\[1\]: no node, plan or table uses this domain",),
    ),
    Case(
        "load-file-name-nul",
        lambda c: load(c.edited(lambda m: escape(m, "tables/x\0.npy"))),
        BundleError,
        ("is not one a bundle holds", "no NUL"),
    ),
    Case(
        "load-npy-format-2",
        lambda c: load(npy_format_2(c)),
        BundleError,
        (r"\.npy format version 2\.0 is not supported; a bundle holds 1\.0",),
    ),
    Case(
        "pla-read-no-o-line",
        lambda c: iotable.pla.read_pla(
            pla_file(c, "no_o.pla", ".i 2\n01 1\n.e\n"), input_domains=[D1] * 2, output_domain=D1
        ),
        PLAError,
        ("no_o.pla' has no .o line",),
    ),
    Case(
        "pla-read-no-outputs",
        lambda c: iotable.pla.read_pla(
            pla_file(c, "o0.pla", ".i 2\n.o 0\n.e\n"), input_domains=[D1] * 2, output_domain=D1
        ),
        PLAError,
        ("declares .i 2 .o 0", "a positive multiple of 1"),
    ),
    Case(
        "pla-read-output-digit-2",
        lambda c: iotable.pla.read_pla(
            pla_file(c, "two.pla", ".i 2\n.o 2\n01 02\n.e\n"), input_domains=[D1] * 2, output_domain=D2
        ),
        PLAError,
        (r"row 0 \('01 02'\) holds a character other than 0/1",),
    ),
    Case(
        "pla-read-output-domain-none",
        lambda c: iotable.pla.read_pla(
            iotable.pla.write_pla(c.net.tables[0], c.root / "n.pla"), input_domains=[U2] * 2, output_domain=None
        ),
        PLAError,
        ("output_domain must be a Domain", "received NoneType"),
    ),
    Case(
        "pla-read-input-domains-string",
        lambda c: iotable.pla.read_pla(
            iotable.pla.write_pla(c.net.tables[0], c.root / "s.pla"), input_domains="U2", output_domain=U2
        ),
        PLAError,
        ("input_domains must be a Domain or a sequence of Domains", "received str"),
    ),
    Case(
        "pla-read-single-domain-odd-bits",
        lambda c: iotable.pla.read_pla(pla_file(c, "odd.pla", ".i 3\n.o 1\n.e\n"), input_domains=D2, output_domain=D1),
        PLAError,
        ("declares .i 3", "not a multiple of the 2 bit", "pass one Domain per input"),
    ),
    Case(
        "pla-read-code-outside-domain",
        lambda c: iotable.pla.read_pla(
            pla_file(c, "big.pla", ".i 2\n.o 1\n11 1\n.e\n"), input_domains=[Domain.values([0, 1, 2])], output_domain=D1
        ),
        PLAError,
        ("big.pla' does not hold a table of the given domains", "holds code 3"),
    ),
    Case(
        "pla-write-onto-a-directory",
        lambda c: iotable.pla.write_pla(c.net.tables[0], c.root),
        PLAError,
        ("is a directory", "pass the path of the file to write"),
    ),
    Case(
        "pla-write-into-proc",
        lambda c: iotable.pla.write_pla(c.net.tables[0], "/proc/iotable.pla"),
        PLAError,
        ("/proc/iotable.pla",),
    ),
    Case(
        "pla-write-nul-path",
        lambda c: iotable.pla.write_pla(c.net.tables[0], c.root / "a\0b.pla"),
        PLAError,
        ("holds a NUL character", "pass another path"),
    ),
    Case(
        "pla-export-onto-a-file",
        lambda c: iotable.export_pla(c.net, a_file(c)),
        PLAError,
        ("file.txt' exists and is not a directory", "pass a directory"),
    ),
    Case(
        "pla-export-path-type",
        lambda c: iotable.export_pla(c.net, 5),
        PLAError,
        ("expected a path", "received int"),
    ),
]


def short_pla(ctx: Context) -> Path:
    """A PLA file whose only row has one input bit where the header says two."""
    path = ctx.root / "short.pla"
    path.write_text(".i 2\n.o 1\n0 1\n.e\n")
    return path


@pytest.fixture(scope="module")
def ctx(tmp_path_factory: pytest.TempPathFactory) -> Context:
    return Context(tmp_path_factory.mktemp("bad_inputs"))


def test_cases_are_many_and_distinct() -> None:
    """The list covers every stage with distinct cases."""
    ids = [case.id for case in CASES]
    assert len(ids) == len(set(ids)) and len(ids) >= 25
    stages = {case.id.split("-")[0] for case in CASES}
    assert {"decompose", "domain", "plan", "precompute", "table", "model", "run", "load", "save", "restrict"} <= stages


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_bad_input_raises_a_clear_library_error(case: Case, ctx: Context) -> None:
    """The bad input raises its IOTableError subclass; the message names the thing, the expectation, what came."""
    with pytest.raises(case.error) as info:
        case.call(ctx)
    assert type(info.value) is case.error, f"raised {type(info.value).__name__}, expected exactly {case.error.__name__}"
    message = str(info.value)
    for words in case.words:
        assert re.search(words, message), f"{words!r} not in {message!r}"


def test_no_internal_error_escapes(ctx: Context) -> None:
    """Across every case, the error raised is an IOTableError: no bare IndexError, KeyError, RuntimeError,
    TypeError or other internal error reaches the caller."""
    escaped = []
    for case in CASES:
        try:
            case.call(ctx)
        except IOTableError:
            continue
        except Exception as exc:  # what this test exists to catch
            escaped.append(f"{case.id}: {type(exc).__name__}: {exc}")
        else:
            escaped.append(f"{case.id}: no error")
    assert not escaped, "\n".join(escaped)
