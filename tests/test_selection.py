"""Selection strategies: who gets picked, and the same picks after a state round trip."""

import json
import random
from collections import Counter

import pytest

from evo.population import Member, Population
from evo.selection import (
    FitnessProportional,
    MapElites,
    Tournament,
    descriptor_bin,
    make_strategy,
)


def member(cid: str, fitness: float, step: int = 0, **kw) -> Member:
    return Member(
        candidate_id=cid,
        source_hash=f"h-{cid}",
        source=kw.pop("source", f"# {cid}\n"),
        status=kw.pop("status", "correct"),
        fitness=fitness,
        island="i0",
        step=step,
        **kw,
    )


def population(fitnesses: list[float], cap: int = 50) -> Population:
    pop = Population(cap=cap, elites=1, failure_pool=4)
    for i, f in enumerate(fitnesses):
        pop.add(member(f"m{i}", f, step=i))
    return pop


def draw_counts(strategy, pop: Population, n: int, seed: int = 0) -> Counter:
    rng = random.Random(seed)
    return Counter(strategy.select(pop, rng)[0].candidate_id for _ in range(n))


def test_tournament_prefers_fitter_members():
    pop = population([1.0, 2.0, 3.0, 4.0, 5.0])
    counts = draw_counts(Tournament(size=3), pop, 5000)
    # Size 3 of 5: the two worst can never win; the others win 10%, 30%, 60% of the time.
    assert counts["m0"] == counts["m1"] == 0
    assert counts["m2"] < counts["m3"] < counts["m4"]
    assert abs(counts["m4"] / 5000 - 0.6) < 0.03


def test_tournament_parents_are_distinct_when_possible():
    pop = population([1.0, 2.0, 3.0])
    rng = random.Random(1)
    for _ in range(200):
        assert len({m.candidate_id for m in Tournament(size=3).select(pop, rng, k=3)}) == 3
    single = population([1.0])
    assert [m.candidate_id for m in Tournament().select(single, rng, k=2)] == ["m0", "m0"]


def test_fitness_proportional_share_follows_fitness():
    pop = population([1.0, 3.0])
    counts = draw_counts(FitnessProportional(penalty=0.5), pop, 4000)
    assert abs(counts["m0"] / 4000 - 0.25) < 0.03


def test_fitness_proportional_penalty_lowers_a_much_used_parent_share():
    pop = population([2.0, 2.0])
    fresh = draw_counts(FitnessProportional(penalty=0.5), pop, 4000)
    strategy = FitnessProportional(penalty=0.5)
    for _ in range(10):
        strategy.on_child(pop.members[0])
    used = draw_counts(strategy, pop, 4000)
    assert abs(fresh["m0"] / 4000 - 0.5) < 0.03
    assert abs(used["m0"] / 4000 - 1 / 7) < 0.03  # weight 2/(1+5) against 2
    assert pop.members[0].children == 10


def test_fitness_proportional_clips_non_positive_fitness():
    pop = population([0.0, -3.0])
    counts = draw_counts(FitnessProportional(), pop, 2000)
    assert abs(counts["m0"] / 2000 - 0.5) < 0.05


def test_descriptor_bins():
    m = member("x", 1.0, source="x" * 3000, metrics={"sol_fraction": 0.3, "occupancy": 1.0})
    assert descriptor_bin("sol_fraction", m, 4) == 1
    assert descriptor_bin("occupancy", m, 4) == 3  # fractions clip to the last bin
    assert descriptor_bin("code_size", m, 4) == 1  # log(3) / log(16) of the way: 1.58
    assert descriptor_bin("code_size", member("s", 1.0, source="x" * 10), 4) == 0
    assert descriptor_bin("code_size", member("l", 1.0, source="x" * 90_000), 4) == 3
    assert descriptor_bin("bound", m, 4) == -1
    memory = member("mem", 1.0, metrics={"flops": 1e6, "min_bytes": 8e6})
    compute = member("cmp", 1.0, metrics={"flops": 1e12, "min_bytes": 8e6})
    assert descriptor_bin("bound", memory, 4) == 0
    assert descriptor_bin("bound", compute, 4) == 1
    assert descriptor_bin("sol_fraction", memory, 4) == -1


def map_elites_population() -> Population:
    pop = Population(cap=10, elites=1, failure_pool=2)
    for i, (sol, f) in enumerate([(0.1, 1.0), (0.15, 5.0), (0.6, 2.0), (0.9, 0.5), (0.95, 0.1)]):
        pop.add(member(f"m{i}", f, step=i, metrics={"sol_fraction": sol}))
    return pop


def test_map_elites_keeps_one_elite_per_niche_and_selects_across_niches():
    pop = map_elites_population()
    strategy = MapElites(descriptors=("sol_fraction",), bins=4)
    for m in pop.members:
        strategy.observe(m)
    strategy.observe(member("fail", 99.0, status="mismatch", metrics={"sol_fraction": 0.1}))
    elites = {n: m.candidate_id for n, m in strategy.archive.items()}
    assert elites == {(0,): "m1", (2,): "m2", (3,): "m3"}

    counts = draw_counts(strategy, pop, 3000)
    assert set(counts) == {"m1", "m2", "m3"}
    assert all(abs(c / 3000 - 1 / 3) < 0.04 for c in counts.values())


def test_map_elites_folds_in_unobserved_members_and_fills_k_beyond_niches():
    pop = map_elites_population()
    strategy = MapElites(descriptors=("sol_fraction",), bins=1)  # a single niche
    rng = random.Random(3)
    picks = strategy.select(pop, rng, k=3)
    assert picks[0].candidate_id == "m1"  # the elite of the one niche
    assert len({m.candidate_id for m in picks}) == 3


def test_map_elites_archive_keeps_an_elite_the_island_evicted():
    pop = Population(cap=1, elites=0, failure_pool=0)
    strategy = MapElites(descriptors=("sol_fraction",), bins=2)
    for i, (sol, f) in enumerate([(0.1, 1.0), (0.9, 5.0)]):
        m = member(f"m{i}", f, step=i, metrics={"sol_fraction": sol})
        pop.add(m)
        strategy.observe(m)
    assert [m.candidate_id for m in pop.members] == ["m1"]
    assert set(draw_counts(strategy, pop, 200)) == {"m0", "m1"}


@pytest.mark.parametrize(
    "name,params",
    [
        ("tournament", {"size": 2}),
        ("fitness_proportional", {"penalty": 1.0}),
        ("map_elites", {"descriptors": ["sol_fraction", "code_size"], "bins": 3}),
    ],
)
def test_resumed_strategy_makes_the_same_next_choices(name, params):
    def step(pop, strategy, rng, i):
        parents = strategy.select(pop, rng, k=2)
        for p in parents:
            strategy.on_child(p)
        sol = rng.random()
        child = member(f"c{i}", rng.uniform(0, 10), step=i, source="x" * rng.randint(500, 30_000))
        child.metrics["sol_fraction"] = sol
        if pop.add(child):
            strategy.observe(child)
        return [p.candidate_id for p in parents]

    pop = Population(cap=6, elites=1, failure_pool=2)
    pop.add(member("seed", 1.0))
    strategy, rng = make_strategy(name, **params), random.Random(42)
    for i in range(25):
        step(pop, strategy, rng, i)

    saved = json.loads(json.dumps({"pop": pop.get_state(), "sel": strategy.get_state()}))
    rng_state = rng.getstate()
    uninterrupted = [step(pop, strategy, rng, i) for i in range(25, 60)]

    pop2 = Population(cap=1, elites=0, failure_pool=0)
    pop2.set_state(saved["pop"])
    resumed = make_strategy(name)
    resumed.set_state(saved["sel"])
    rng2 = random.Random()
    rng2.setstate(rng_state)
    assert [step(pop2, resumed, rng2, i) for i in range(25, 60)] == uninterrupted
    assert resumed.get_state() == strategy.get_state()
    assert pop2.get_state() == pop.get_state()


def test_offspring_counts_are_part_of_the_state():
    pop = population([2.0, 2.0])
    strategy = FitnessProportional(penalty=2.0)
    for _ in range(5):
        strategy.on_child(Member.from_dict(pop.members[0].to_dict()))  # a copy, as from an actor
    restored = FitnessProportional()
    restored.set_state(json.loads(json.dumps(strategy.get_state())))
    assert restored.penalty == 2.0
    assert restored.weight(pop.members[0]) == pytest.approx(2.0 / 11)
    assert restored.weight(pop.members[1]) == pytest.approx(2.0)


def test_state_of_another_strategy_is_refused():
    with pytest.raises(ValueError, match="tournament"):
        MapElites().set_state(Tournament().get_state())


@pytest.mark.parametrize("name", ["tournament", "fitness_proportional", "map_elites"])
def test_an_empty_or_all_failed_population_cannot_be_selected_from(name):
    pop = Population(cap=4, elites=1, failure_pool=4)
    pop.add(member("f", 9.0, status="compile_error", metrics={"sol_fraction": 0.5}))
    with pytest.raises(ValueError):
        make_strategy(name).select(pop, random.Random(0))
    pop.add(member("ok", 0.01, step=1, metrics={"sol_fraction": 0.5}))
    picks = make_strategy(name).select(pop, random.Random(0), k=3)
    assert {m.candidate_id for m in picks} == {"ok"}


def test_make_strategy_names_the_choices():
    assert isinstance(make_strategy("tournament", size=5), Tournament)
    assert make_strategy("tournament", size=5).size == 5
    assert isinstance(make_strategy("fitness_proportional"), FitnessProportional)
    assert make_strategy("map_elites", bins=2).bins == 2
    with pytest.raises(ValueError, match="fitness_proportional, map_elites, tournament"):
        make_strategy("roulette")
    with pytest.raises(ValueError, match="size"):
        make_strategy("map_elites", size=3)
    with pytest.raises(ValueError):
        make_strategy("tournament", size=0)
