"""Shared fixtures: small layers with weights that keep float sums exact."""

from __future__ import annotations

import pytest
import torch


def dyadic_(module: torch.nn.Module, seed: int = 0) -> torch.nn.Module:
    """Give every parameter small multiples of 1/8 so sums are exact in float32, whatever the order."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randint(-8, 9, p.shape, generator=gen).to(p.dtype) / 8)
        for m in module.modules():
            if isinstance(m, (torch.nn.BatchNorm1d, torch.nn.BatchNorm2d)):
                m.running_mean.copy_(torch.randint(-4, 5, m.running_mean.shape, generator=gen) / 4)
                m.running_var.copy_(torch.randint(1, 9, m.running_var.shape, generator=gen) / 4)
    return module


@pytest.fixture
def dyadic():
    return dyadic_
