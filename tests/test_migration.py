"""Migration: topologies, migrants as marked copies, one hop only, no duplicates."""

import pytest

from evo.migration import as_migrant, migrate, pick_migrants, targets
from evo.population import Member, Population


def member(cid: str, fitness: float, island: str, step: int = 0, **kw) -> Member:
    return Member(
        candidate_id=cid,
        source_hash=kw.pop("source_hash", f"h-{cid}"),
        source=f"# {cid}\n",
        status="correct",
        fitness=fitness,
        island=island,
        step=step,
        **kw,
    )


def islands(spec: dict[str, list[float]]) -> dict[str, Population]:
    pops = {}
    for name, fitnesses in spec.items():
        pops[name] = Population(cap=10, elites=1, failure_pool=2)
        for i, f in enumerate(fitnesses):
            pops[name].add(member(f"{name}-{i}", f, name, step=i))
    return pops


class Ids:
    """new_id for migrate: a per-island sequence, recording every call."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def __call__(self, island: str) -> str:
        self.calls.append(island)
        return f"{island}-mig{len(self.calls)}"


def test_targets_per_topology():
    names = ["a", "b", "c"]
    assert targets("ring", names, "a") == ["b"]
    assert targets("ring", names, "c") == ["a"]
    assert targets("ring", ["a"], "a") == []
    assert targets("all_to_all", names, "b") == ["a", "c"]
    assert targets("none", names, "a") == []
    with pytest.raises(ValueError, match="ring"):
        targets("star", names, "a")
    with pytest.raises(ValueError):
        targets("ring", names, "z")


def test_pick_migrants_takes_the_best_that_did_not_migrate_themselves():
    pop = islands({"a": [1.0, 4.0, 3.0, 2.0]})["a"]
    pop.add(member("visitor", 9.0, "a", is_migrant=True))
    assert [m.candidate_id for m in pick_migrants(pop, 2)] == ["a-1", "a-2"]
    assert pick_migrants(pop, 0) == []


def test_as_migrant_is_a_marked_copy():
    original = member("a-0", 2.0, "a", step=4, metrics={"sol_fraction": 0.4}, children=3)
    m = as_migrant(original, "b", "b-7")
    assert (m.candidate_id, m.island, m.is_migrant, m.parent_ids) == ("b-7", "b", True, ("a-0",))
    assert (m.source_hash, m.source, m.fitness, m.step) == ("h-a-0", "# a-0\n", 2.0, 4)
    assert m.children == 0
    m.metrics["sol_fraction"] = 0.9
    assert original.metrics == {"sol_fraction": 0.4} and not original.is_migrant
    assert (original.candidate_id, original.island) == ("a-0", "a")


def test_ring_moves_each_island_best_one_hop():
    pops = islands({"a": [1.0, 100.0], "b": [2.0, 3.0], "c": [5.0]})
    ids = Ids()
    moved = migrate(pops, "ring", 1, ids)
    assert [(src, dst, m.parent_ids) for src, dst, m in moved] == [
        ("a", "b", ("a-1",)),
        ("b", "c", ("b-1",)),
        ("c", "a", ("c-0",)),
    ]
    assert ids.calls == ["b", "c", "a"]
    arrived = pops["b"].best()[0]
    assert arrived.is_migrant and arrived.island == "b" and arrived.candidate_id == "b-mig1"
    assert pops["a"].best()[0].candidate_id == "a-1"  # the original stays home

    # Round two: b's best is a's migrant, which must not travel on to c; hashes a target
    # already holds (a-1 at b, b-1 at c, c-0 at a) are skipped.
    moved = migrate(pops, "ring", 2, ids)
    assert [(src, dst, m.parent_ids) for src, dst, m in moved] == [
        ("a", "b", ("a-0",)),
        ("b", "c", ("b-0",)),
    ]
    assert "h-a-1" not in {m.source_hash for m in pops["c"].members}


def test_a_target_that_holds_the_hash_skips_the_migrant():
    pops = islands({"a": [5.0, 4.0], "b": [1.0]})
    pops["b"].add(member("b-same", 0.5, "b", step=1, source_hash="h-a-0"))
    ids = Ids()
    moved = migrate(pops, "ring", 2, ids)
    assert [(s, d, m.parent_ids) for s, d, m in moved] == [
        ("a", "b", ("a-1",)),
        ("b", "a", ("b-0",)),
    ]
    assert ids.calls == ["b", "a"]  # no id spent on the skipped migrant


def test_all_to_all_and_none():
    pops = islands({"a": [1.0], "b": [2.0], "c": [3.0]})
    moved = migrate(pops, "all_to_all", 1, Ids())
    assert len(moved) == 6
    assert all(len(p.members) == 3 for p in pops.values())

    pops = islands({"a": [1.0], "b": [2.0]})
    before = {k: p.get_state() for k, p in pops.items()}
    assert migrate(pops, "none", 3, Ids()) == []
    assert {k: p.get_state() for k, p in pops.items()} == before
