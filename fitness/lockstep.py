"""The timed loop, driven call by call from the judge: its clock is the measurement of record.

The judge sends one tick per call, with the seed of that call's fresh inputs, and times the
round trip itself. A child can report a sample, but not one longer than the judge waited, and
not a median far below the judge's own per-call time (the tick's wall time less a no-op
tick's, read before loading and again between the timed calls). Replies sent ahead of their
ticks arrive faster than any real call could run, and are refused. The judge fetches the
outputs of the calls it re-checks only after they have answered, so every tick looks the same
to the child.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from fitness.processes import Child, Message


@dataclass
class Ticks:
    samples: list[float] = field(default_factory=list)  # the child's event times, ms
    tails: list[float] = field(default_factory=list)  # stream end to device-wide end, ms
    hosts: list[float] = field(
        default_factory=list
    )  # the child's host ms per call (told, untrusted)
    walls: list[float] = field(default_factory=list)  # the judge's round trip per call, ms
    rechecks: list[Message] = field(default_factory=list)  # outputs of the re-checked calls
    noops: Ticks | None = None  # no-op ticks interleaved with these calls (run_ticks `between`)

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    @property
    def wall(self) -> float:
        return statistics.median(self.walls)

    @property
    def low_wall(self) -> float:
        """A low quantile of the judge's round trips (10th percentile; the least of a few):
        host noise only ever adds to a round trip, and no call can take less than it runs."""
        if len(self.walls) < 10:
            return min(self.walls)
        return statistics.quantiles(self.walls, n=10)[0]

    @property
    def iqr(self) -> float:
        if len(self.samples) < 2:
            return 0.0
        q = statistics.quantiles(self.samples, n=4)
        return q[2] - q[0]


@dataclass
class Calibration:
    """The timed loop around no-ops, run before any candidate code is loaded (so its figures
    are the judge's own): plain, and, on a GPU, with a device wait of a few lengths in place of
    the call. The host's overhead around a call grows with the call's length (the wake-up
    after a long wait), so the judge reads it at the length the candidate claims.

    The overhead also drifts: read before loading, it moved by a few tenths of a millisecond
    from one evaluation to the next on an H100, enough to refuse honest 0.4 ms kernels (about
    7 % of them, 2026-11-22). So plain no-ops are also interleaved with the timed calls
    (`during`), and the whole curve moves by what they read against the first ones, upward
    by at most MAX_SHIFT_MS: the most a candidate could gain if it could slow no-ops alone.
    """

    base: Ticks
    levels: list[Ticks] = field(default_factory=list)
    during: Ticks | None = None

    @property
    def wall(self) -> float:
        return self.base.wall

    @property
    def shift(self) -> float:
        """How far the overhead moved between the calibration and the timed calls (ms)."""
        if self.during is None or not self.during.walls:
            return 0.0
        then = self.base.low_wall - self.base.median
        now = self.during.low_wall - self.during.median
        return min(now - then, MAX_SHIFT_MS)

    def overhead(self, ms: float) -> float:
        """The judge's round trip less the call itself, for a call of `ms`: linear between the
        calibrated lengths, flat beyond them, moved by the drift the interleaved no-ops read."""
        return self._curve(ms) + self.shift

    def _curve(self, ms: float) -> float:
        pts = sorted((t.median, t.low_wall - t.median) for t in [self.base, *self.levels])
        if ms <= pts[0][0]:
            return pts[0][1]
        for (x0, y0), (x1, y1) in zip(pts, pts[1:]):
            if ms <= x1:
                return y0 + (y1 - y0) * (ms - x0) / (x1 - x0) if x1 > x0 else y1
        return pts[-1][1]


# The most the interleaved no-ops may raise the judge's overhead estimate (ms). The drift
# they correct read between -0.27 and +0.45 ms on an H100 (protocol 4 rows, 2026-11-23).
MAX_SHIFT_MS = 0.5


def per_call_ms(ticks: Ticks, calibration: Calibration, claimed: float) -> float:
    """The judge's own time per call: its low round trip less its overhead for a call of the
    claimed length. A claim shorter than the truth reads a smaller overhead, not a larger one."""
    return max(ticks.low_wall - calibration.overhead(claimed), 0.0)


def run_ticks(
    child: Child,
    seeds: list[int],
    expect: Callable[[Child, str, str], Message],
    noop: bool = False,
    fetch: dict[int, int] | None = None,
    spin: int = 0,
    between: list[int] | None = None,
) -> Ticks:
    """One call per seed, one tick each; `fetch` maps a call to the re-check that reads its
    outputs once it has answered. A `noop` tick with `spin` waits that many GPU cycles in
    place of the call (calibration only). `between` holds the seeds of plain no-op ticks,
    one after each call (and its fetch) until they run out, recorded in `noops`."""
    fetch = fetch or {}
    out = Ticks()
    spare = list(between or [])
    if spare:
        out.noops = Ticks()
    for i, seed in enumerate(seeds):
        _tick(child, expect, out, i, seed, noop, spin)
        if i in fetch:
            child.send("fetch", index=fetch[i])
            out.rechecks.append(expect(child, "output", "time"))
        if spare:
            _tick(child, expect, out.noops, i, spare.pop(), True, 0)
    return out


def _tick(child: Child, expect, out: Ticks, i: int, seed: int, noop: bool, spin: int) -> None:
    t = time.perf_counter()
    child.send("tick", i=i, seed=seed, noop=noop, spin=spin)
    msg = expect(child, "tick", "time")
    out.walls.append((time.perf_counter() - t) * 1e3)
    if msg.fields.get("problem"):
        raise TimingRefused(f"timed call {i + 1}: {str(msg.fields['problem'])[:200]}")
    sample, tail = msg.fields.get("sample"), msg.fields.get("tail")
    if not _plain_number(sample) or not _plain_number(tail) or msg.fields.get("i") != i:
        raise TimingRefused("malformed timing reply")
    out.samples.append(float(sample))
    out.tails.append(float(tail))
    host = msg.fields.get("host")
    out.hosts.append(float(host) if _plain_number(host) else float("nan"))


# The judge's allowance for host noise in the tail (two event records around a sync).
# Before the mark event (fitness/timing.py) the tail held the host's wake-up after the
# stream's end: on an H100 honest kernels measured 0.05-0.15 ms above a no-op's, growing with
# the call's length (2026-11-22).
TAIL_NOISE_MS = 0.05


def tail_excess_ms(ticks: Ticks, calibration: Calibration) -> float:
    """Median tail above the calibration's: what the noise allowance is judged against."""
    return statistics.median(ticks.tails) - statistics.median(calibration.base.tails)


def outliving_ms(ticks: Ticks, calibration: Calibration) -> float:
    """Work per call that ran after the stream's end, beyond the judge's own noise.

    The sample of record ends at the device-wide end (EVALUATION.md), so this is added to the
    stream's median: work on a side stream or deferred past the call is timed, not hidden.
    """
    return max(tail_excess_ms(ticks, calibration) - TAIL_NOISE_MS, 0.0)


class TimingRefused(Exception):
    """The samples cannot be trusted; the message is the one-line reason."""


def check_ticks(ticks: Ticks, calibration: Calibration, gpu: bool) -> tuple[float, float]:
    """Raise TimingRefused unless the samples agree with the judge's own clock; else
    (work that outlived the stream, the judge's ms per call), both in ms."""
    if not ticks.samples or any(s <= 0 for s in ticks.samples):
        raise TimingRefused("timer tampering: malformed timing samples")
    over = sum(s > w + 0.05 for s, w in zip(ticks.samples, ticks.walls))
    if over > len(ticks.samples) // 10:
        raise TimingRefused(
            f"timer tampering: {over} of {len(ticks.samples)} samples are longer than the "
            "judge waited for them"
        )
    # No call answers faster than the fastest no-op did before any candidate code was
    # loaded: load on the machine only ever slows round trips, so the least no-op is the
    # bound (a median refused fast honest calls on a busy machine), and replies sent ahead
    # of their ticks arrive in microseconds.
    fastest = min(calibration.base.walls)
    if ticks.wall < 0.5 * fastest:
        raise TimingRefused(
            "timer tampering: timing replies arrived faster than a call can run "
            f"({ticks.wall:.4g} ms against {fastest:.4g} ms for the fastest no-op)"
        )
    tail = outliving_ms(ticks, calibration)
    if tail > ticks.median:
        raise TimingRefused(
            f"work outlives the call: {tail:.4g} ms per call ran after the stream's end "
            f"(another stream, thread or deferred work) on top of {ticks.median:.4g} ms"
        )
    claimed = ticks.median + tail
    per_call = per_call_ms(ticks, calibration, claimed)
    if not gpu and ticks.noops is not None and ticks.noops.walls:
        # On the interpreter the no-ops between the calls read the host's load at the time
        # of the calls; a busy machine lengthens every round trip alike.
        per_call = min(per_call, max(ticks.low_wall - ticks.noops.low_wall, 0.0))
    # The judge's per-call time carries what the calibration cannot cancel: the host's own
    # work around an honest call, and its scheduling noise. On an H100 honest sub-millisecond
    # kernels measured 0.05-0.25 ms above their events (protocol 3, 2026-11-22), hence 0.3 ms.
    # On the interpreter, a few samples on a shared CPU are noisy: only a gross gap counts.
    factor, slack = (0.8, 0.3) if gpu else (0.25, 1.0)
    if claimed < factor * per_call - slack:
        raise TimingRefused(
            f"timer tampering: reported median {claimed:.4g} ms, but the judge's clock "
            f"shows {per_call:.4g} ms per call"
        )
    return tail, per_call


def _plain_number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and x == x
