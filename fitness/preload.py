"""Imported once by the fork server: pays the first-use costs every child would otherwise pay.

The flop counter's first use costs about a second, and on the CPU the profiler's another two.
Nothing here may touch CUDA (a forked child could not initialise it), so on a GPU machine the
profiler, whose start initialises CUPTI, is left to the children.
"""

import os
import warnings

import torch
from torch.utils.flop_counter import FlopCounterMode

from fitness.isolation import die_with_parent


def _warm() -> None:
    a = torch.ones(4, 4)
    with FlopCounterMode(display=False):
        torch.mm(a, a)
    if os.environ.get("TRITON_INTERPRET") == "1":  # a CPU-only fork server
        from torch.profiler import ProfilerActivity, profile

        saved = os.dup(2)  # the profiler's start and stop print USDT lines to stderr
        quiet = os.open(os.devnull, os.O_WRONLY)
        os.dup2(quiet, 2)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                with profile(activities=[ProfilerActivity.CPU]) as prof:
                    torch.mm(a, a)
                prof.events()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            os.close(quiet)


# The server's stdout is the caller's (evo eval --json): nothing of ours may print there.
os.dup2(2, 1)
_warm()

# The fork server dies with its judge, and its children die with it (see isolation), so no
# candidate spins on after a judge that was killed.
die_with_parent()
