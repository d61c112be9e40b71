"""The table network's runtime: compiled per-node kernels that evaluate a graph from its tables alone."""

from .runtime import Runtime

__all__ = ["Runtime"]
