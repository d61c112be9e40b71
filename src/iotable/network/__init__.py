"""Table networks: a model's tables and graph (:mod:`.network`), built by :mod:`.precompute`, verified
against the model, and restricted to observed rows (:mod:`.observe`)."""

from .network import TableNetwork, build_network
from .verify import VerifyReport, verify

__all__ = ["TableNetwork", "VerifyReport", "build_network", "verify"]
