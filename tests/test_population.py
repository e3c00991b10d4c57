"""Population: dedup, the cap with elites, the bounded failure pool, exact state."""

import json

import pytest

from evo.population import Member, Population


def member(
    cid: str, fitness: float | None = 1.0, step: int = 0, status: str = "correct", **kw
) -> Member:
    return Member(
        candidate_id=cid,
        source_hash=kw.pop("source_hash", f"h-{cid}"),
        source=kw.pop("source", f"# {cid}\n"),
        status=status,
        fitness=fitness,
        island="i0",
        step=step,
        **kw,
    )


def ids(ms: list[Member]) -> list[str]:
    return [m.candidate_id for m in ms]


def test_duplicate_hash_is_refused_whether_member_failure_or_evicted():
    pop = Population(cap=1, elites=0, failure_pool=2)
    assert pop.add(member("a", 1.0))
    assert not pop.add(member("a2", 9.0, source_hash="h-a"))
    assert pop.add(member("f", None, status="compile_error"))
    assert not pop.add(member("f2", 5.0, source_hash="h-f"))
    assert pop.add(member("b", 2.0, step=1))  # evicts a
    assert ids(pop.members) == ["b"]
    assert pop.seen("h-a") and not pop.add(member("a3", 9.0, source_hash="h-a"))
    assert not pop.seen("h-never")


def test_over_cap_the_worst_member_is_evicted():
    pop = Population(cap=3, elites=1, failure_pool=0)
    for i, f in enumerate([1.0, 3.0, 2.0, 0.5, 2.5]):
        pop.add(member(f"m{i}", f, step=i))
    assert sorted(ids(pop.members)) == ["m1", "m2", "m4"]
    assert ids(pop.best(2)) == ["m1", "m4"]


def test_elites_survive_and_ties_evict_the_oldest_non_elite():
    pop = Population(cap=2, elites=1, failure_pool=0)
    for i in range(3):
        pop.add(member(f"m{i}", 1.0, step=i))
    assert ids(pop.members) == ["m0", "m2"]  # m0 is the (oldest) elite, m1 the oldest other

    pop = Population(cap=3, elites=2, failure_pool=0)
    pop.add(member("top", 10.0, step=0))
    pop.add(member("second", 9.0, step=1))
    for i in range(2, 30):
        pop.add(member(f"m{i}", float(i % 5), step=i))
    assert {"top", "second"} <= set(ids(pop.members))
    assert len(pop.members) == 3


def test_failures_go_to_a_bounded_fifo_pool_not_the_members():
    pop = Population(cap=5, elites=1, failure_pool=2)
    statuses = ["compile_error", "mismatch", "timeout", "runtime_error", "rejected"]
    for i, s in enumerate(statuses):
        assert pop.add(member(f"f{i}", None, step=i, status=s))
    assert pop.members == []
    assert ids(pop.failures) == ["f3", "f4"]
    assert pop.best() == []


def test_a_correct_member_without_fitness_ranks_last():
    pop = Population(cap=3, elites=0, failure_pool=0)
    pop.add(member("none", None))
    pop.add(member("low", 0.1, step=1))
    pop.add(member("neg", -5.0, step=2))
    assert ids(pop.best(3)) == ["low", "neg", "none"]


def test_state_round_trip_is_exact_and_json_serializable():
    pop = Population(cap=3, elites=1, failure_pool=2)
    for i in range(6):
        pop.add(member(f"m{i}", float(i % 4), step=i, metrics={"sol_fraction": 0.1 * i}))
    pop.add(member("f0", None, step=7, status="mismatch", parent_ids=("m1", "m2")))
    pop.members[0].children = 3
    state = json.loads(json.dumps(pop.get_state()))

    copy = Population(cap=99, elites=0, failure_pool=0)
    copy.set_state(state)
    assert copy.get_state() == pop.get_state()
    assert copy.members == pop.members and copy.failures == pop.failures
    assert copy.failures[0].parent_ids == ("m1", "m2")
    assert copy.seen("h-m0") and "m0" not in ids(copy.members)  # evicted yet remembered
    for p in (pop, copy):
        p.add(member("late", 2.5, step=9))
    assert copy.get_state() == pop.get_state()


def test_member_dict_round_trip_and_status_validation():
    m = member("x", 1.5, metrics={"runtime_ms": 0.2}, parent_ids=("p",), is_migrant=True)
    d = json.loads(json.dumps(m.to_dict()))
    assert Member.from_dict({**d, "unknown_future_key": 1}) == m
    with pytest.raises(ValueError):
        member("bad", status="great")


@pytest.mark.parametrize("cap,elites,pool", [(0, 0, 0), (2, 3, 0), (2, -1, 0), (2, 1, -1)])
def test_invalid_sizes_are_refused(cap, elites, pool):
    with pytest.raises(ValueError):
        Population(cap=cap, elites=elites, failure_pool=pool)
