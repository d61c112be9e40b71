"""Byte flips in a small bundle's manifest: each altered bundle is refused, or runs identically with an identical graph.

``tests/test_manifest_fuzz.py`` runs a sample of offsets; ``python -m tests.manifest_fuzz`` runs every byte of the
manifest (two flips each) in both modes and prints the counts:

- ``raw``: the manifest alone is altered (``manifest.sha256`` as saved): every trial must be refused, by ``load`` and
  by ``iotable check``;
- ``stamped``: the checksum is written anew for the altered manifest, as a tool that knows the format would, so that
  the checks behind the checksum are reached: every trial must be refused, or load and run with the original's
  outputs and graph; no trial may end in an error that is not an ``IOTableError``;
- ``values``: every integer of the manifest in turn is replaced by each of :data:`HUGE` (beyond any int64 or
  size a machine holds) and the checksum written anew: every trial must be refused.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import hashlib
import io
import json
import re
import shutil
import sys
import tempfile
from collections import Counter
from pathlib import Path

import torch
from torch import nn

import iotable
from iotable.bundle.manifest import _canonical, _difference, _Encoder
from iotable.cli import main as cli
from iotable.nn import Quantize
from iotable.synth import DEFAULT_SCRIPT

#: Integers past what numpy's int64 or C's ssize_t hold: a manifest field holding one must be refused by name.
HUGE = (10**20, 2**63, -(2**63) - 1)

S2 = iotable.Domain.uniform(2, signed=True, scale=0.5)

#: Manifest fields that only say where the bundle came from or how its tables were made (docs/bundle.md,
#: "Information-only fields"): the loader takes any well-typed value that agrees with the rest.
INFORMATION = re.compile(
    r"\.layers\[\d+\]\.(build|plan\.spec|plan\.max_rows|plan\.slots)\b|\.graph\.nodes\[\d+\]\.(fx_node|meta\.modules)\b"
    r"|\.host\[\d+\]\.class\b|\.luts\[\d+\]\.(script|abc_version|seconds|k)\b"
)


class Small(nn.Module):
    """A zero-padded depthwise conv, a max-pool, a reflect-padded conv and a residual add: pads of both kinds,
    windows, a pool, a duplicate and a join."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv1d(2, 2, 3, padding=1, groups=2)
        self.q1 = Quantize(2, signed=True, scale=0.5)
        self.pool = nn.MaxPool1d(2)
        self.mix = nn.Conv1d(2, 2, 3, padding=1, padding_mode="reflect")
        self.q2 = Quantize(2, signed=True, scale=0.5)
        self.q3 = Quantize(3, signed=True, scale=0.25)

    def forward(self, x):
        y = self.pool(self.q1(self.conv(x)))
        return self.q3(self.q2(self.mix(y)) + y)


def direct_results(net: iotable.TableNetwork, *, k: int = 6) -> iotable.TableNetwork:
    """``net`` holding the LUT mapping results ``iotable.synth.cost`` would give for its tables of at most ``k``
    address bits (one LUT per output bit, written without running ABC, so no ABC is needed)."""
    from iotable.lutnet import LutNetlist, LutResult, bit_function
    from iotable.synth.jobs import Job, run_job

    version = "ABC (not run: tables of at most k bits are written directly)"
    results = []
    for table in net.tables:
        fn = bit_function(table, what="direct_results")
        if fn.input_bits <= k:
            (record,) = run_job(Job((fn,), (repr(table),), "abc", DEFAULT_SCRIPT.format(k=k), k, 10.0, version))
            results.append(LutResult.from_record(record, LutNetlist.from_blif(record["blif"])))
    return dataclasses.replace(net, luts=net.luts.adding(results))


def build(folder: Path) -> tuple[iotable.TableNetwork, Path, torch.Tensor]:
    """The network (with mapping results for its small tables), its bundle in ``folder`` and a batch of inputs."""
    torch.manual_seed(0)
    model = Small().eval()
    net = direct_results(iotable.precompute(model, input_domain=S2, example_input=torch.zeros(1, 2, 6)))
    assert len(net.luts) >= 2
    codes = torch.randint(0, 4, (64, 2, 6), generator=torch.Generator().manual_seed(1))
    x = torch.tensor(S2.values, dtype=torch.float32)[codes]
    return net, iotable.save(net, folder / "small"), x


def described(obj: object) -> dict:
    """The manifest the object encodes to, without the fields that name files or versions."""
    manifest, _ = _Encoder().bundle(obj, golden=False)
    return {k: v for k, v in manifest.items() if k not in ("library_version", "files", "golden", "format_version")}


class Sweep:
    """Trials on one work copy of the bundle: only manifest.json and manifest.sha256 change between trials."""

    def __init__(self, net: iotable.TableNetwork, path: Path, x: torch.Tensor, work: Path) -> None:
        self.net, self.x = net, x
        self.expected = net.run(x)
        self.description = described(net)
        self.work = Path(shutil.copytree(path, work))
        self.manifest = (path / "manifest.json").read_bytes()
        self.checksum = (path / "manifest.sha256").read_bytes()

    def alter(self, offset: int, flip: int, *, stamped: bool) -> bytes:
        data = bytearray(self.manifest)
        data[offset] ^= flip
        (self.work / "manifest.json").write_bytes(bytes(data))
        checksum = self.checksum
        if stamped:
            checksum = f"{hashlib.sha256(bytes(data)).hexdigest()}  manifest.json\n".encode()
        (self.work / "manifest.sha256").write_bytes(checksum)
        return bytes(data)

    def trial(self, offset: int, flip: int, *, stamped: bool, check: bool = False) -> str:
        """One altered manifest: ``refused``, ``same``, or what went wrong (the first word says which)."""
        self.alter(offset, flip, stamped=stamped)
        verdict = self._load_and_run()
        if check:
            out, err = io.StringIO(), io.StringIO()
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                status = cli(["check", str(self.work)])
            if status != 1 or "Traceback" in err.getvalue():
                verdict += f" / check passed ({status})"
        return verdict

    def _load_and_run(self) -> str:
        try:
            loaded = iotable.load(self.work)
        except iotable.errors.BundleError:
            return "refused"
        except Exception as exc:  # what the sweep exists to find
            return f"internal error at load: {type(exc).__name__}: {exc}"
        try:
            got = loaded.run(self.x)
        except iotable.IOTableError as exc:
            return f"library error at run: {type(exc).__name__}: {exc}"
        except Exception as exc:
            return f"internal error at run: {type(exc).__name__}: {exc}"
        if got.shape != self.expected.shape or not torch.equal(got, self.expected):
            return "output change"
        description = described(loaded)
        if _canonical(description) != _canonical(self.description):
            path, held, made = _difference(self.description, description, "")
            found = INFORMATION.search(path)
            if found:
                field = re.sub(r"\[\d+\]", "[]", found.group(0).lstrip("."))  # the field, not which node or layer
                return f"information change: {field}"
            return f"metadata change: {path} {held!r} -> {made!r}"
        return "same"

    def integers(self) -> list[tuple[str | int, ...]]:
        """The path (keys and list indices) of every integer in the manifest (not true/false)."""
        found: list[tuple[str | int, ...]] = []

        def walk(value: object, path: tuple[str | int, ...]) -> None:
            if isinstance(value, dict):
                for key, item in value.items():
                    walk(item, (*path, key))
            elif isinstance(value, list):
                for k, item in enumerate(value):
                    walk(item, (*path, k))
            elif isinstance(value, int) and not isinstance(value, bool):
                found.append(path)

        walk(json.loads(self.manifest), ())
        return found

    def replaced(self, path: tuple[str | int, ...], value: int) -> str:
        """The manifest with the integer at ``path`` replaced by ``value``, stamped with a new checksum: the
        verdict (as :meth:`trial`)."""
        manifest = json.loads(self.manifest)
        record = manifest
        for key in path[:-1]:
            record = record[key]
        record[path[-1]] = value
        data = json.dumps(manifest, indent=1).encode()
        (self.work / "manifest.json").write_bytes(data)
        (self.work / "manifest.sha256").write_bytes(f"{hashlib.sha256(data).hexdigest()}  manifest.json\n".encode())
        return self._load_and_run()

    def restore(self) -> None:
        (self.work / "manifest.json").write_bytes(self.manifest)
        (self.work / "manifest.sha256").write_bytes(self.checksum)


def run(offsets: list[int], flips: tuple[int, ...], *, stamped: bool, check: bool) -> Counter[str]:
    """Counts of verdicts over ``offsets`` x ``flips`` on a freshly built bundle."""
    with tempfile.TemporaryDirectory() as folder:
        net, path, x = build(Path(folder))
        sweep = Sweep(net, path, x, Path(folder) / "work")
        counts: Counter[str] = Counter()
        for offset in offsets:
            for flip in flips:
                counts[sweep.trial(offset, flip, stamped=stamped, check=check)] += 1
        return counts


def run_values(values: tuple[int, ...] = HUGE) -> Counter[str]:
    """Counts of verdicts, each integer of a freshly built bundle's manifest replaced by each of ``values``."""
    with tempfile.TemporaryDirectory() as folder:
        net, path, x = build(Path(folder))
        sweep = Sweep(net, path, x, Path(folder) / "work")
        counts: Counter[str] = Counter()
        for where in sweep.integers():
            for value in values:
                verdict = sweep.replaced(where, value)
                counts[verdict if verdict == "refused" else f"{verdict} at {where}"] += 1
        return counts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--every", type=int, default=1, help="every n-th byte (default: all)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as folder:
        _, path, _ = build(Path(folder))
        size = len((path / "manifest.json").read_bytes())
    offsets = list(range(0, size, args.every))
    flips = (0x01, 0x20)
    print(f"manifest of {size} bytes; {len(offsets)} offsets x {len(flips)} flips per mode")
    bad = 0
    for stamped in (False, True):
        counts = run(offsets, flips, stamped=stamped, check=not stamped)
        mode = "stamped (checksum written anew)" if stamped else "raw (checksum as saved)"
        print(f"\n{mode}: {sum(counts.values())} trials")
        for verdict, n in counts.most_common():
            print(f"  {n:6d}  {verdict}")
            silent = verdict.startswith(("internal", "output", "metadata")) or "check passed" in verdict
            bad += n if silent or (not stamped and verdict != "refused") else 0
    counts = run_values()
    print(f"\nvalues (each integer replaced by {HUGE}): {sum(counts.values())} trials")
    for verdict, n in counts.most_common():
        print(f"  {n:6d}  {verdict}")
        bad += n if verdict != "refused" else 0
    print(f"\n{bad} trial(s) broke the promise")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
