"""The timed call: one protocol for warm-up, correctness, timing and baselines alike."""

from __future__ import annotations

import time

import torch

# About 0.5 ms of GPU time: the host enqueues the flush, the start event and the whole call
# while it runs, so launch overhead stays out of the sample. In the engine (Ray actors on the
# same host) 0.15 ms was too short for some calls (2026-11-22).
SPIN_CYCLES = 1_000_000


class Clock:
    """One call, timed the same way in every phase: L2 flush, then CUDA events.

    The sample is from a start event to an end event recorded on the stream right after the
    call returns. Once the stream has reached its end, a mark event is recorded, then a
    device-wide sync, then a last event: the gap from the mark to the last event is work that
    outlived the stream (side streams, deferred work), which the judge compares with the gap of
    the calibration loop. Measuring from the mark, not from the stream's end, leaves out the
    host's wake-up after a long wait, which grows with the call and is not the candidate's.
    """

    def __init__(self, device: str, l2_bytes: int):
        self.cuda = device == "cuda"
        if self.cuda:
            self.flush_buf = torch.empty(
                max(2 * l2_bytes, 1 << 20), dtype=torch.uint8, device="cuda"
            )
            self.start = torch.cuda.Event(enable_timing=True)
            self.end = torch.cuda.Event(enable_timing=True)
            self.mark = torch.cuda.Event(enable_timing=True)
            self.after = torch.cuda.Event(enable_timing=True)
        self._sync = torch.cuda.synchronize
        self._spin = torch.cuda._sleep
        self._now = time.perf_counter
        self.host_ms = float("nan")

    def wait(self, cycles: int, *_args) -> None:
        """A device wait of `cycles` GPU cycles in place of a call (calibration)."""
        self._spin(cycles)

    def call(self, fn, args) -> tuple[object, float, float]:
        """(output, sample ms, ms between the stream's end and the device-wide end, host
        wake-up left out). Also sets `host_ms`: the host's ms from the start event's record to
        the call's return (on a GPU, above the spin's length, launch overhead reached the
        sample)."""
        if self.cuda:
            # A short spin first lets the host enqueue the call before the start event runs,
            # so host-side launch overhead is not counted (as in a pipelined do_bench loop).
            self._spin(SPIN_CYCLES)
            self.flush_buf.zero_()
            self.start.record()
            h = self._now()
            out = fn(*args)
            h = (self._now() - h) * 1e3
            self.end.record()
            self.end.synchronize()
            self.mark.record()
            self._sync()
            self.after.record()
            self.after.synchronize()
            self.host_ms = h
            return out, self.start.elapsed_time(self.end), self.mark.elapsed_time(self.after)
        t0 = self._now()
        out = fn(*args)
        self.host_ms = (self._now() - t0) * 1e3
        return out, self.host_ms, 0.0


def alias(x):
    """A second tensor over x's storage with its own version counter (None for non-tensors)."""
    if not isinstance(x, torch.Tensor):
        return None
    a = torch.empty(0, dtype=x.dtype, device=x.device)
    return a.set_(x.untyped_storage(), x.storage_offset(), x.size(), x.stride())


def noop(*args):
    return None
