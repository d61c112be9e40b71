"""A trained variant of a sweep and its content fingerprint.

A :class:`Variant` is one trained model to build tables from: a torch module with the arguments
:func:`iotable.precompute` takes for it, or a bundle :func:`iotable.save` wrote. Its fingerprint is a digest of
everything its tables depend on: for a module, :func:`iotable.front.cachekey.module_key` (its classes' code, its
attributes, parameters and buffers) and the precompute arguments, by value; for a bundle, its ``manifest.json``
(which holds the checksum of every array file, checked by :func:`iotable.load`). A sweep's records carry the
fingerprint, so that a record is reused only for the very variant it was measured on.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from torch import nn

from .._util.trust import Untrusted, read_bounded
from ..errors import IOTableError, OptionError

__all__ = ["Variant"]

_MANIFEST_LIMIT = 64 << 20  # the largest manifest.json read to fingerprint a bundle
_PRECOMPUTE = frozenset({"input_domain", "example_input", "max_rows", "host", "input_layout", "memory_budget"})


@dataclass(frozen=True)
class Variant:
    """One trained model of a sweep: a torch module with :func:`iotable.precompute`'s arguments, or a bundle.

    Attributes:
        name: how the sweep's table and plot call it (unique within a sweep).
        model: a ``torch.nn.Module`` (in eval mode), or the path of a network bundle.
        precompute: keyword arguments of :func:`iotable.precompute` for a module (``input_domain`` at least;
            ``example_input``, ``max_rows``, ``host``, ``input_layout``, ``memory_budget``); none for a bundle.
        inputs: a batch of input values that :func:`iotable.verify` checks the tables on (modules only), and
            that ``scorer`` may use; ``None``: no verification.
        scorer: ``scorer(net) -> float``, the accuracy of the table network (higher is better), e.g. the
            fraction of a test split ``net.run`` classifies right; ``None``: no accuracy objective.

    Example:
        >>> model = torch.nn.Sequential(torch.nn.Linear(4, 3), iotable.nn.Quantize(2)).eval()
        >>> v = Variant("tiny", model, precompute={"input_domain": iotable.Domain.uniform(2)})
        >>> len(v.fingerprint())
        64
    """

    name: str
    model: Any
    precompute: Mapping[str, Any] = field(default_factory=dict)
    inputs: Any = None
    scorer: Callable[[Any], float] | None = None

    @property
    def is_bundle(self) -> bool:
        """Whether the variant is a saved bundle (a path) rather than a live module."""
        return isinstance(self.model, (str, os.PathLike))

    def check(self) -> None:
        """Refuse a variant the sweep cannot build, before any work (:class:`~iotable.errors.OptionError`)."""
        what = f"sweep: variant {self.name!r}"
        if not isinstance(self.name, str) or not self.name or any(c in self.name for c in "\0\n\r"):
            msg = f"sweep: a variant's name must be a non-empty string on one line, received {self.name!r}"
            raise OptionError(msg)
        if self.scorer is not None and not callable(self.scorer):
            msg = f"{what}: scorer must be a callable scorer(net) -> float, received {type(self.scorer).__name__}"
            raise OptionError(msg)
        if self.is_bundle:
            if self.precompute or self.inputs is not None:
                msg = (
                    f"{what}: a bundle's tables are built already: received precompute= or inputs= with the bundle "
                    f"{os.fspath(self.model)!r}; give the torch module instead to verify it"
                )
                raise OptionError(msg)
            if not (Path(self.model) / "manifest.json").is_file():
                msg = f"{what}: expected a network bundle directory (with manifest.json), received {self.model!r}"
                raise OptionError(msg)
            return
        if not isinstance(self.model, nn.Module):
            msg = (
                f"{what}: expected a torch.nn.Module or the path of a bundle (iotable.save), received "
                f"{type(self.model).__name__}"
            )
            raise OptionError(msg)
        unknown = sorted(set(self.precompute) - _PRECOMPUTE)
        if "input_domain" not in self.precompute or unknown:
            msg = (
                f"{what}: precompute= must hold input_domain and at most {sorted(_PRECOMPUTE)}, received "
                f"{sorted(self.precompute)}; pass the arguments iotable.precompute takes for this model"
            )
            raise OptionError(msg)

    def fingerprint(self) -> str:
        """The hex digest of the variant's content (see the module docstring); the same in every process."""
        from ..front.cachekey import module_key, value_bytes

        digest = hashlib.sha256()
        if self.is_bundle:
            path = Path(self.model) / "manifest.json"
            try:
                manifest = read_bounded(path, limit=_MANIFEST_LIMIT, owned=False)
            except (Untrusted, OSError) as exc:
                msg = f"sweep: variant {self.name!r}: the bundle's manifest cannot be read ({exc}); save it again"
                raise OptionError(msg) from None
            digest.update(b"bundle\0" + manifest)
            return digest.hexdigest()
        try:
            digest.update(b"module\0" + module_key(self.model, layer=self.name))
            digest.update(value_bytes(dict(self.precompute), layer=self.name, what="precompute="))
        except IOTableError as exc:
            msg = f"sweep: variant {self.name!r}: cannot fingerprint the model ({exc})"
            raise OptionError(msg) from None
        return digest.hexdigest()

    def inputs_digest(self) -> str | None:
        """A digest of the verification inputs (``None`` without any)."""
        from ..front.cachekey import value_bytes

        if self.inputs is None:
            return None
        return hashlib.sha256(value_bytes(self.inputs, layer=self.name, what="inputs=")).hexdigest()

    def scorer_digest(self) -> str | None:
        """A digest of the scorer's code and the values it closes over (``None``: none, or not readable by value:
        then the accuracy is measured again on every run rather than trusted from a record)."""
        from ..front.cachekey import value_bytes

        if self.scorer is None:
            return None
        try:
            return hashlib.sha256(value_bytes(self.scorer, layer=self.name, what="scorer=")).hexdigest()
        except IOTableError:
            return None
