"""Budgets: each kind, reservations under concurrency, and counts that survive a resume."""

import json
import random
import threading

import pytest

from evo.budget import Budget, BudgetExceeded


class FakeClock:
    """A time source the test moves by hand."""

    def __init__(self, now: float = 100.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def raises_kind(kind: str, fn, *args) -> None:
    with pytest.raises(BudgetExceeded) as info:
        fn(*args)
    assert info.value.kind == kind


def test_max_evals_counts_reservations_and_releases():
    b = Budget(max_evals=3)
    for w in ("w1", "w2", "w1"):
        b.reserve_eval(w)
    raises_kind("max_evals", b.reserve_eval, "w3")
    raises_kind("max_evals", b.check)
    assert b.exhausted() == "max_evals"
    b.release_eval("w2")  # a duplicate: never evaluated
    assert b.exhausted() is None
    b.reserve_eval("w3")
    assert b.snapshot()["evals_per_workload"] == {"w1": 2, "w2": 0, "w3": 1}
    with pytest.raises(ValueError):
        b.release_eval("w2")


def test_per_workload_cap_refuses_that_workload_only():
    b = Budget(per_workload_max_evals=2)
    b.reserve_eval("w1")
    b.reserve_eval("w1")
    raises_kind("per_workload_max_evals", b.reserve_eval, "w1")
    b.reserve_eval("w2")
    assert b.exhausted() is None
    b.check()


def test_wall_seconds_follow_the_clock():
    clock = FakeClock()
    b = Budget(wall_seconds=10, clock=clock)
    clock.now += 9.5
    b.check()
    clock.now += 0.5
    assert b.exhausted() == "wall_seconds"
    raises_kind("wall_seconds", b.check)


def test_gpu_seconds():
    b = Budget(gpu_seconds=10)
    b.add_gpu_seconds(6)
    assert b.exhausted() is None
    b.add_gpu_seconds(4)
    raises_kind("gpu_seconds", b.check)


def test_llm_reservations_count_before_they_settle():
    b = Budget(llm_dollars=1.0, llm_tokens=1000)
    first = b.reserve_llm(0.6, 100)
    raises_kind("llm_dollars", b.reserve_llm, 0.5, 100)  # nothing spent yet, 0.6 reserved
    first.cancel()
    second = b.reserve_llm(0.5, 100)
    second.settle(0.3, 80)
    with pytest.raises(ValueError):
        second.settle(0.3, 80)
    with pytest.raises(ValueError):
        second.cancel()
    snap = b.snapshot()
    assert snap["llm_dollars"] == pytest.approx(0.3) and snap["llm_tokens"] == 80
    assert snap["llm_dollars_reserved"] == 0 and snap["llm_tokens_reserved"] == 0
    raises_kind("llm_tokens", b.reserve_llm, 0.1, 921)
    b.reserve_llm(0.7, 920).settle(0.7, 920)
    assert b.exhausted() == "llm_dollars"
    raises_kind("llm_dollars", b.check)


def test_llm_tokens_fully_used_stop_the_run():
    b = Budget(llm_tokens=500)
    b.reserve_llm(0.0, 500).settle(0.0, 500)
    raises_kind("llm_tokens", b.check)


def test_concurrent_reservations_never_overshoot_the_cap():
    cap, price = 10.0, 0.25
    b = Budget(llm_dollars=cap)
    start = threading.Barrier(16)
    held, settled, lock = [], [], threading.Lock()

    def hold_five() -> None:
        start.wait()
        for _ in range(5):
            try:
                r = b.reserve_llm(price, 10)
            except BudgetExceeded:
                continue
            with lock:
                held.append(r)

    threads = [threading.Thread(target=hold_five) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(held) == 40  # 80 attempts, room for exactly cap / price
    for r in held:
        r.cancel()

    def spend(seed: int) -> None:
        rng = random.Random(seed)
        start.wait()
        while True:
            try:
                r = b.reserve_llm(price, 10)
            except BudgetExceeded:
                return
            actual = rng.uniform(0.05, price)
            r.settle(actual, 10)
            with lock:
                settled.append(actual)

    threads = [threading.Thread(target=spend, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(settled) <= cap
    assert sum(settled) > cap - price  # the last refusal came with nothing else in flight
    assert b.snapshot()["llm_dollars"] == pytest.approx(sum(settled))
    assert b.snapshot()["llm_dollars_reserved"] == pytest.approx(0.0)


def test_state_round_trip_continues_the_counts():
    clock = FakeClock()
    b = Budget(max_evals=5, wall_seconds=10, llm_dollars=2.0, gpu_seconds=60, clock=clock)
    for w in ("w1", "w1", "w2"):
        b.reserve_eval(w)
    b.reserve_llm(1.0, 300).settle(0.75, 250)
    b.reserve_llm(1.0, 300)  # open when the checkpoint is taken: not saved
    b.add_gpu_seconds(12.5)
    clock.now += 7
    state = json.loads(json.dumps(b.get_state()))
    assert state == {
        "evals": {"w1": 2, "w2": 1},
        "llm_dollars": 0.75,
        "llm_tokens": 250,
        "gpu_seconds": 12.5,
        "wall_seconds": 7.0,
    }

    later = FakeClock(5000.0)
    resumed = Budget(max_evals=5, wall_seconds=10, llm_dollars=2.0, gpu_seconds=60, clock=later)
    resumed.set_state(state)
    resumed.reserve_eval("w2")
    resumed.reserve_eval("w3")
    raises_kind("max_evals", resumed.reserve_eval, "w3")
    raises_kind("llm_dollars", resumed.reserve_llm, 1.5, 0)
    resumed.reserve_llm(1.25, 0).cancel()
    later.now += 2.9
    assert resumed.snapshot()["wall_seconds"] == pytest.approx(9.9)
    later.now += 0.1
    raises_kind("wall_seconds", resumed.check)


def test_set_evals_replaces_the_counts():
    b = Budget(max_evals=4, per_workload_max_evals=3)
    b.reserve_eval("w1")
    b.set_evals({"w2": 3})
    raises_kind("per_workload_max_evals", b.reserve_eval, "w2")
    b.reserve_eval("w1")
    raises_kind("max_evals", b.reserve_eval, "w3")
    assert b.snapshot()["evals_per_workload"] == {"w2": 3, "w1": 1}


def test_negative_limits_and_costs_are_refused():
    with pytest.raises(ValueError, match="llm_dollars"):
        Budget(llm_dollars=-1)
    with pytest.raises(ValueError):
        Budget().reserve_llm(-0.1, 0)


def test_no_dollars_stay_reserved_once_every_reservation_is_closed():
    """Reserving and releasing amounts like 0.1 leaves float residue in a running sum; with no
    reservation open the reserved amount is exactly zero."""
    b = Budget(llm_dollars=1.0)
    rs = [b.reserve_llm(d, 0) for d in (0.1, 0.2, 0.3, 0.07)]
    for r in rs[:-1]:
        r.cancel()
    rs[-1].settle(0.05, 10)
    assert b.snapshot()["llm_dollars_reserved"] == 0.0
