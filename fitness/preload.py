"""Imported once by the fork server: pays the first-use costs every child would otherwise pay.

The flop counter's and the profiler's first use cost 1-3 s each on the CPU. Nothing here
touches CUDA, so children still create their own CUDA context.
"""

import torch
from torch.profiler import ProfilerActivity, profile
from torch.utils.flop_counter import FlopCounterMode


def _warm() -> None:
    a = torch.ones(4, 4)
    with FlopCounterMode(display=False):
        torch.mm(a, a)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        torch.mm(a, a)
    prof.events()


_warm()
