"""Bundles: a table network (or one layer's tables) saved once and loaded many times, without the model.

A bundle is a directory: ``manifest.json`` (the format name and version, the library version, the domains,
the interlayer graph, every layer's plan and per-table metadata, the network input shape, the sha256,
dtype, shape and size of every array file, and golden vectors), ``manifest.sha256`` (the sha256 of
``manifest.json``'s bytes, in ``sha256sum`` format) and arrays as ``.npy`` files (format version 1.0, C
order, no pickled objects): table outputs, the input codes and packed addresses of partial tables, the
graph's index maps, the weights of host modules, the golden vectors and the LUT netlists of the mapping
results a network holds (``net.luts``, from :func:`iotable.synth.cost`). ``docs/bundle.md`` describes every
field, so that any language that reads JSON and ``.npy`` can read a bundle.

Nothing on disk is trusted. Saving and loading run one validator: ``save`` decodes the manifest it is about
to write, in memory, exactly as ``load`` will, and refuses (before writing a byte) what ``load`` would
refuse; then it writes into a temporary sibling directory, syncs every file and renames it over the target.
Loading checks the manifest's checksum, bounds (size, nesting, file names, domain sizes), then every array
file (path inside the bundle with no symlink, ``.npy`` 1.0 header, dtype, shape, size, sha256), then every
field: types, the graph's invariants (:meth:`Graph.check`), graph against tables and plans, and that the
manifest is exactly what the objects it describes encode to (so no field can say something the runtime
does not do). Last, the network runs on its golden inputs and must reproduce the golden values. Every
problem is a :class:`BundleError` naming the file or field. Nothing is unpickled, and no model code runs:
host modules (layers run with torch) are stored as their class name and weights, and the caller hands the
module back with ``load(path, host_modules={name: module})``.

This module holds the two verbs; the pieces live apart: the format (encoding and the one validator,
``iotable.bundle.manifest``), checked access to JSON values (``iotable.bundle.jsonfields``), host modules
(``iotable.bundle.hosts``) and the files on disk (``iotable.bundle.files``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from torch import nn

from ..errors import BundleError
from ..network.network import TableNetwork
from ..tabulate.layers import LayerTables
from .files import (
    MANIFEST,
    _disk_error,
    _path_text,
    _read_files,
    _read_manifest,
    _target,
    _write,
)
from .files import (
    MAX_DEPTH as MAX_DEPTH,  # the bounds on what a manifest may make a reader do (docs/bundle.md)
)
from .files import (
    MAX_MANIFEST_BYTES as MAX_MANIFEST_BYTES,
)
from .manifest import FORMAT, FORMAT_VERSION, _Decoder, _Encoder

__all__ = ["FORMAT", "FORMAT_VERSION", "BundleError", "load", "save"]


# -- save -------------------------------------------------------------------------------------------------


def save(obj: TableNetwork | LayerTables, path: str | os.PathLike[str]) -> Path:
    """Write a table network (or one layer's :class:`LayerTables`) to the bundle directory ``path``.

    Everything is checked before the first byte is written, with the loader's own checks: the manifest is
    decoded in memory as :func:`load` decodes it, and a network is run on generated inputs of its input
    domain, whose results are stored as golden vectors that :func:`load` and ``iotable check`` reproduce.
    The bundle is then written into a temporary sibling directory, synced, and renamed over ``path``. An
    existing bundle at ``path`` is replaced atomically; any other existing file or non-empty directory is
    refused. Host modules are stored as their class name and weights (``state_dict`` arrays), not their
    code: pass them back to :func:`load` (``host_modules=``). The LUT mapping results a network holds (from
    :meth:`TableNetwork.cost`, or from the bundle it was loaded from) are stored with it, and :func:`load`
    checks every stored netlist on every row of its table.

    Args:
        obj: a :class:`~iotable.network.TableNetwork` from :func:`iotable.precompute` on a whole model, or
            the :class:`LayerTables` of one layer.
        path: the bundle directory to create or replace.

    Returns:
        The bundle's path.

    Raises:
        BundleError: ``path`` is a file, a foreign directory or not a usable path, ``obj`` cannot be stored
            without pickle or would not load back, or the disk refuses the write (full, no permission).

    Example:
        >>> import pathlib, tempfile
        >>> folder = pathlib.Path(tempfile.mkdtemp())
        >>> model = torch.nn.Sequential(torch.nn.Linear(4, 2), iotable.nn.Quantize(2)).eval()
        >>> net = precompute(model, input_domain=Domain.uniform(1), example_input=torch.zeros(1, 4))
        >>> path = save(net, folder / "net")
        >>> sorted(p.name for p in path.iterdir())
        ['golden', 'graph', 'manifest.json', 'manifest.sha256', 'tables']
    """
    target = _target(path)
    manifest, arrays = _Encoder().bundle(obj)
    try:
        _Decoder(manifest, arrays, MANIFEST).bundle(None)
    except BundleError as exc:
        msg = f"save: refusing to write {target}, which load would refuse: {exc}"
        raise BundleError(msg) from None
    try:
        _write(target, manifest, arrays)
    except OSError as exc:
        raise _disk_error(f"save: cannot write the bundle {target}", exc) from None
    return target


# -- writing ----------------------------------------------------------------------------------------------


# -- load -------------------------------------------------------------------------------------------------


def load(
    path: str | os.PathLike[str], *, host_modules: Mapping[str, nn.Module] | None = None
) -> TableNetwork | LayerTables:
    """Read a bundle written by :func:`save`: a :class:`~iotable.network.TableNetwork` or :class:`LayerTables`.

    Nothing is taken on trust. The manifest's checksum (``manifest.sha256``) and bounds are checked first,
    then every file the manifest names (path inside the bundle with no symlink, ``.npy`` header, dtype,
    shape, size, sha256), then every field (types, the graph's invariants, the graph against the tables
    and plans, the manifest being exactly what those encode to); a network then reproduces its golden
    vectors. The tables are memory-mapped read-only. No model code runs and nothing is unpickled;
    ``net.run(x)`` equals the saved network's bit for bit.

    A bundle stores a host module's class name and weights, not its code. Pass the module for each host
    node in ``host_modules``: its parameters and buffers are set from the bundle (the keys and shapes must
    match). Without it, the network loads, and running it raises :class:`BundleError` naming the node.

    Args:
        path: the bundle directory.
        host_modules: network bundles: a module per host node name (``net.graph.nodes_of("host")``).

    Returns:
        The network or layer that was saved.

    Raises:
        BundleError: a missing, damaged, edited or inconsistent file or manifest field, a bound exceeded,
            or an unfit host module; the message names the file or field.

    Bundles of ``format_version`` 1 (no manifest checksum, no golden vectors) load with every other check.

    Example:
        >>> import pathlib, tempfile
        >>> conv = torch.nn.Conv1d(2, 2, kernel_size=2, groups=2, bias=False)
        >>> layer = precompute(conv, input_domain=Domain.uniform(1))
        >>> path = save(layer, pathlib.Path(tempfile.mkdtemp()) / "conv")
        >>> loaded = load(path)
        >>> loaded[1] == layer[1], loaded.plan.units == layer.plan.units
        (True, True)
    """
    return open_bundle(path, host_modules=host_modules)[0]


def open_bundle(
    path: str | os.PathLike[str], *, host_modules: Mapping[str, nn.Module] | None = None
) -> tuple[TableNetwork | LayerTables, dict[str, Any]]:
    """:func:`load`, also returning the manifest (for the command line)."""
    root = Path(_path_text(path, "load"))
    if host_modules is not None and (
        not isinstance(host_modules, Mapping) or not all(isinstance(k, str) for k in host_modules)
    ):
        msg = (
            "load: host_modules must map host node names to modules, e.g. {'fc': model.fc}; received "
            f"{type(host_modules).__name__}"
        )
        raise BundleError(msg)
    try:
        is_dir = root.is_dir()
        exists = is_dir or root.exists()
    except OSError as exc:
        raise _disk_error(f"load: cannot use the path {str(root)[:200]!r}", exc) from None
    if not is_dir:
        what = "is not a directory" if exists else "does not exist"
        msg = f"load: {root} {what}; expected a bundle directory written by iotable.save"
        raise BundleError(msg)
    manifest = _read_manifest(root)
    arrays = _read_files(root, manifest)
    obj = _Decoder(manifest, arrays, str(root / MANIFEST)).bundle(host_modules)
    return obj, manifest


# -- array files ------------------------------------------------------------------------------------------
