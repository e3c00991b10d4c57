"""The judge's timed loop, seen from the child's side of the pipe: what each call is told.

A child that speaks the protocol itself (a forger) sees exactly these commands, so nothing in
them may say which calls the judge will re-check.
"""

import random

from fitness.judge import EvalOptions, _Protocol
from fitness.lockstep import run_ticks
from fitness.processes import Message
from fitness.results import EvalResult, Status
from fitness.workloads import resolve_workload


class RecordingChild:
    """The judge's end of a pipe to a child that answers every tick at once."""

    def __init__(self):
        self.sent: list[tuple[str, dict]] = []

    def send(self, kind: str, **fields) -> None:
        self.sent.append((kind, fields))


def answer(child: RecordingChild, kind: str, phase: str) -> Message:
    last_kind, last = child.sent[-1]
    if kind == "tick":
        assert last_kind == "tick"
        return Message("tick", {"i": last["i"], "sample": 1.0, "tail": 0.0}, [])
    assert last_kind == "fetch"
    return Message("output", {"index": last["index"]}, [])


def test_every_tick_command_looks_the_same_and_fetches_come_after_the_answer():
    child = RecordingChild()
    seeds = [random.randrange(1, 2**31) for _ in range(20)]
    fetch = {3: 0, 11: 1, 17: 2}
    ticks = run_ticks(child, seeds, answer, fetch=fetch)
    tick_cmds = [f for k, f in child.sent if k == "tick"]
    assert [f["i"] for f in tick_cmds] == list(range(20))
    assert {frozenset(f) for f in tick_cmds} == {frozenset({"i", "seed", "noop", "spin"})}
    assert [f["seed"] for f in tick_cmds] == seeds
    # a fetch names the call just answered, never one still to come
    positions = [n for n, (k, _) in enumerate(child.sent) if k == "fetch"]
    assert [child.sent[p - 1][1]["i"] for p in positions] == sorted(fetch)
    assert [child.sent[p][1]["index"] for p in positions] == [0, 1, 2]
    assert [m.fields["index"] for m in ticks.rechecks] == [0, 1, 2]


def test_rechecked_calls_are_drawn_independently_and_never_none():
    """Each timed call after the first is re-checked with the same chance, at least one in all:
    the count varies, so seeing some re-checks says nothing about the calls still to come."""
    workload = resolve_workload("builtin:matmul")
    counts = set()
    for s in range(200):
        opts = EvalOptions(device="cpu", samples=20, rechecks=3, seed=s).resolved()
        proto = _Protocol("", workload, opts, EvalResult(Status.CORRECT, ""))
        assert proto.recheck_at, s
        assert 0 not in proto.recheck_at and max(proto.recheck_at) < 20
        assert len(proto.rechecks) == len(proto.recheck_at)
        assert [r.seed for r in proto.rechecks] == [proto.tick_seeds[i] for i in proto.recheck_at]
        counts.add(len(proto.recheck_at))
    assert len(counts) >= 4, counts


def _ticks(samples, tails, walls):
    from fitness.lockstep import Ticks

    return Ticks(samples=list(samples), tails=list(tails), walls=list(walls))


def test_work_after_the_streams_end_is_timed_beyond_the_noise_and_refused_when_gross():
    """The sample of record ends at the device-wide end: a tail over the calibration's, less
    the judge's noise allowance, is added to the stream's median; most of the work outside the
    stream is refused by name."""
    import pytest

    from fitness.lockstep import (
        TAIL_NOISE_MS,
        Calibration,
        TimingRefused,
        check_ticks,
        outliving_ms,
    )

    calib = Calibration(_ticks([0.01] * 9, [0.02] * 9, [0.3] * 9))
    honest = _ticks([0.18] * 9, [0.02 + TAIL_NOISE_MS] * 9, [0.6] * 9)
    assert outliving_ms(honest, calib) == 0.0
    check_ticks(honest, calib, gpu=True)

    partial = _ticks([0.5] * 9, [0.02 + TAIL_NOISE_MS + 0.2] * 9, [1.0] * 9)
    assert abs(outliving_ms(partial, calib) - 0.2) < 1e-9
    check_ticks(partial, calib, gpu=True)

    side = _ticks([0.01] * 9, [0.02 + TAIL_NOISE_MS + 1.0] * 9, [1.3] * 9)
    with pytest.raises(TimingRefused, match="work outlives the call"):
        check_ticks(side, calib, gpu=True)


def test_the_judges_overhead_is_read_at_the_claimed_length():
    """The host's overhead grows with the call (a wake-up after a long wait): an honest 1.5 ms
    call whose round trip carries 0.6 ms of it passes; a claim of 0.5 ms for the same round
    trip reads the short-call overhead, and is refused."""
    import pytest

    from fitness.lockstep import Calibration, TimingRefused, check_ticks, per_call_ms

    calib = Calibration(
        _ticks([0.01] * 20, [0.02] * 20, [0.31] * 20),  # overhead 0.3 ms at 0
        [
            _ticks([1.0] * 20, [0.02] * 20, [1.5] * 20),  # 0.5 ms at 1 ms
            _ticks([4.0] * 20, [0.02] * 20, [5.0] * 20),  # 1.0 ms at 4 ms
        ],
    )
    # points (median call, overhead): (0.01, 0.30), (1.0, 0.5), (4.0, 1.0)
    assert abs(calib.overhead(0.0) - 0.3) < 1e-9 and abs(calib.overhead(2.5) - 0.75) < 1e-9
    assert abs(calib.overhead(9.0) - 1.0) < 1e-9
    walls = [2.1] * 20  # 1.5 ms of call and 0.6 ms of overhead
    honest = _ticks([1.5] * 20, [0.02] * 20, walls)
    assert abs(per_call_ms(honest, calib, 1.5) - 1.5) < 0.02  # overhead(1.5) = 0.583
    check_ticks(honest, calib, gpu=True)
    forged = _ticks([0.5] * 20, [0.02] * 20, walls)
    with pytest.raises(TimingRefused, match="timer tampering"):
        check_ticks(forged, calib, gpu=True)


def test_a_few_slow_round_trips_do_not_count_against_an_honest_call():
    """Host noise only adds to a round trip: the judge reads a low quantile of them."""
    from fitness.lockstep import Calibration, check_ticks, per_call_ms

    calib = Calibration(_ticks([0.01] * 100, [0.02] * 100, [0.3] * 100))
    walls = [0.7] * 60 + [1.6] * 40  # 40 calls delayed by the host by 0.9 ms
    ticks = _ticks([0.4] * 100, [0.02] * 100, walls)
    assert abs(per_call_ms(ticks, calib, 0.4) - 0.4) < 0.02  # overhead 0.29
    check_ticks(ticks, calib, gpu=True)


def test_no_ops_between_the_calls_follow_each_call_and_its_fetch():
    """With `between`, a plain no-op tick follows every call (after its re-check fetch, so the
    fetched outputs are the call's own), and its figures are kept apart from the calls'."""
    child = RecordingChild()
    seeds = [random.randrange(1, 2**31) for _ in range(6)]
    spare = [random.randrange(1, 2**31) for _ in range(6)]
    ticks = run_ticks(child, seeds, answer, fetch={2: 0}, between=spare)
    kinds = [(k, f.get("noop")) for k, f in child.sent]
    call, noop, fetch = ("tick", False), ("tick", True), ("fetch", None)
    assert kinds == [call, noop] * 2 + [call, fetch, noop] + [call, noop] * 3
    assert [f["seed"] for k, f in child.sent if k == "tick" and not f["noop"]] == seeds
    assert not set(f["seed"] for k, f in child.sent if k == "tick" and f["noop"]) & set(seeds)
    assert len(ticks.walls) == 6 and len(ticks.noops.walls) == 6 and len(ticks.rechecks) == 1


def test_no_ops_read_during_the_timed_calls_move_the_overhead_within_a_bound():
    """The overhead read before loading drifts: an honest 0.4 ms call whose round trips carry
    0.5 ms more overhead than the first no-ops did is refused on the first reading and passes
    once the interleaved no-ops show the same drift. The move upward is capped, so a gross
    claim is still refused whatever the no-ops read."""
    import pytest

    from fitness.lockstep import MAX_SHIFT_MS, Calibration, TimingRefused, check_ticks

    before = _ticks([0.01] * 100, [0.02] * 100, [0.31] * 100)  # overhead 0.3 ms
    honest = _ticks([0.4] * 100, [0.02] * 100, [1.2] * 100)  # 0.4 ms call, 0.8 ms overhead
    with pytest.raises(TimingRefused, match="timer tampering"):
        check_ticks(honest, Calibration(before), gpu=True)
    drifted = Calibration(before, during=_ticks([0.01] * 100, [0.02] * 100, [0.81] * 100))
    assert abs(drifted.shift - 0.5) < 1e-9
    check_ticks(honest, drifted, gpu=True)

    slowed = Calibration(before, during=_ticks([0.01] * 100, [0.02] * 100, [5.0] * 100))
    assert slowed.shift == MAX_SHIFT_MS
    forged = _ticks([0.4] * 100, [0.02] * 100, [3.0] * 100)  # a 2.2 ms call claiming 0.4
    with pytest.raises(TimingRefused, match="timer tampering"):
        check_ticks(forged, slowed, gpu=True)
    # a drift downward moves the curve down in full: the judge's clock reads more per call
    quieter = Calibration(before, during=_ticks([0.01] * 100, [0.02] * 100, [0.11] * 100))
    assert abs(quieter.shift + 0.2) < 1e-9 and abs(quieter.overhead(0.0) - 0.1) < 1e-9
