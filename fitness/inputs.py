"""Inputs and weights, the same in every process: seeded draws from the workload and redraws.

The reference child and the candidate child build identical inputs from the judge's seeds
without exchanging them; weights follow KernelBench's convention (same seed, same names).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch


@dataclass
class Round:
    """One call of the model on one set of inputs: seed, distribution, shape (None = main)."""

    seed: int
    dist: str = "workload"
    shape: int | None = None


def make_inputs(mod, rnd: Round, device: str) -> list:
    """The workload's inputs for a seed, redrawn from `rnd.dist`; the same in any process.

    Factories run on the target device (fast for KernelBench-size tensors) and are seeded,
    so the reference and the candidate child draw identical values without exchanging them.
    """
    torch.manual_seed(rnd.seed)
    with torch.device(device):
        raw = mod.get_inputs()
        g = torch.Generator(device=device).manual_seed(rnd.seed % (2**62) + 7)
        out = []
        for x in raw:
            if isinstance(x, torch.Tensor):
                x = x.to(device)
                if x.is_floating_point() and rnd.dist != "workload":
                    x = _redraw(x, rnd.dist, g)
            out.append(x)
    return out


def _redraw(x: torch.Tensor, dist: str, g: torch.Generator) -> torch.Tensor:
    """New values at the workload's own scale (times 0.5-2), so honest rounding stays in range."""
    nonneg = bool((x >= 0).all()) if x.numel() else False
    dev = x.device
    base = float(x.float().std()) if x.numel() > 1 else 1.0
    base = base if math.isfinite(base) and base > 0 else 1.0
    scale = base * math.exp(torch.empty((), device=dev).uniform_(-0.7, 0.7, generator=g).item())
    y = torch.randn(x.shape, generator=g, device=dev)
    if dist == "heavy":  # a Gaussian scale mixture: Student-t-like tails
        y *= torch.exp(0.5 * torch.randn(x.shape, generator=g, device=dev))
    elif dist != "normal":
        raise ValueError(f"unknown input distribution {dist!r}")
    y *= scale
    return (y.abs() if nonneg else y).to(x.dtype)


def build_model(mod, cls, device: str, seed: int = 42, state_dict=None) -> torch.nn.Module:
    """KernelBench's convention: same seed before construction; same weights where names match."""
    init = mod.get_init_inputs()
    torch.manual_seed(seed)
    if device == "cuda":
        torch.cuda.manual_seed(seed)
    model = cls(*init)
    if state_dict is not None:
        own = model.state_dict()
        if own.keys() == state_dict.keys() and all(
            own[k].shape == state_dict[k].shape for k in own
        ):
            model.load_state_dict(state_dict)
    return model.to(device)
