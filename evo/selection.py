"""Parent selection strategies: swappable objects whose state is saved, so resume is exact.

Every random choice comes from the `random.Random` passed to `select`; a strategy holds only
bookkeeping (offspring counts, the MAP-Elites archive), which `get_state` / `set_state` carry.
Strategies see correct members only: `Population.members` never holds a failure.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from typing import Any

from evo.population import Member, Population, fitness_key, ranked

# Fitness-proportional weights clip fitness here, so a zero or negative fitness keeps a tiny
# chance instead of breaking the roulette.
FITNESS_FLOOR = 1e-6

# code_size bins are even in log(len(source)) between these two lengths (characters); shorter
# sources go to the first bin, longer ones to the last.
CODE_SIZE_RANGE = (1_000, 16_000)

# "bound": arithmetic intensity (metrics flops / min_bytes) below this is memory-bound (bin 0),
# at or above it compute-bound (bin 1). 20 FLOP/byte is the H100's FP32 peak over its DRAM
# bandwidth (67e12 / 3.35e12), the ridge of the FP32 roofline.
RIDGE_FLOP_PER_BYTE = 20.0

# The bin of a member that lacks a descriptor's metric: a niche of its own, never mixed in.
MISSING_BIN = -1


class SelectionStrategy:
    """Picks parents from an island's population; subclasses define `_pick`.

    `on_child` counts offspring per candidate id (kept here, so a parent that travelled as a
    copy is still counted, and mirrored onto `Member.children`).
    """

    name: str = ""

    def __init__(self) -> None:
        self.children: dict[str, int] = {}

    def select(self, pop: Population, rng: random.Random, k: int = 1) -> list[Member]:
        """`k` parents, distinct while the population has enough members."""
        if not pop.members:
            raise ValueError("cannot select from a population with no correct members")
        if k < 1:
            raise ValueError(f"k must be at least 1, got {k}")
        return self._pick(pop, rng, k)

    def _pick(self, pop: Population, rng: random.Random, k: int) -> list[Member]:
        raise NotImplementedError

    def on_child(self, parent: Member) -> None:
        n = self.offspring(parent) + 1
        self.children[parent.candidate_id] = n
        parent.children = n

    def offspring(self, m: Member) -> int:
        return self.children.get(m.candidate_id, m.children)

    def observe(self, m: Member) -> None:
        """A new member arrived; only MAP-Elites cares."""

    def get_state(self) -> dict[str, Any]:
        return {"name": self.name, "params": self._params(), "children": dict(self.children)}

    def set_state(self, state: dict[str, Any]) -> None:
        if state.get("name") != self.name:
            raise ValueError(f"state of strategy {state.get('name')!r} given to {self.name!r}")
        self._load_params(state["params"])
        self.children = {str(k): int(v) for k, v in state["children"].items()}

    def _params(self) -> dict[str, Any]:
        raise NotImplementedError

    def _load_params(self, params: dict[str, Any]) -> None:
        raise NotImplementedError


def _draw_distinct(
    members: list[Member], k: int, pick_one: Callable[[list[Member]], Member]
) -> list[Member]:
    """Call `pick_one` k times on a shrinking pool; refill it once every member was drawn."""
    out: list[Member] = []
    pool = list(members)
    for _ in range(k):
        if not pool:
            pool = list(members)
        chosen = pick_one(pool)
        pool.remove(chosen)
        out.append(chosen)
    return out


class Tournament(SelectionStrategy):
    """Each parent is the fittest of `size` members drawn at random without replacement."""

    name = "tournament"

    def __init__(self, size: int = 3) -> None:
        super().__init__()
        if size < 1:
            raise ValueError(f"tournament size must be at least 1, got {size}")
        self.size = size

    def _pick(self, pop: Population, rng: random.Random, k: int) -> list[Member]:
        def one(pool: list[Member]) -> Member:
            entrants = rng.sample(pool, min(self.size, len(pool)))
            return ranked(entrants)[0]

        return _draw_distinct(pop.members, k, one)

    def _params(self) -> dict[str, Any]:
        return {"size": self.size}

    def _load_params(self, params: dict[str, Any]) -> None:
        self.size = int(params["size"])


class FitnessProportional(SelectionStrategy):
    """Roulette wheel: weight = fitness / (1 + penalty * children).

    Fitness is clipped at FITNESS_FLOOR; the penalty spreads offspring over more parents.
    """

    name = "fitness_proportional"

    def __init__(self, penalty: float = 0.5) -> None:
        super().__init__()
        if penalty < 0:
            raise ValueError(f"penalty must be >= 0, got {penalty}")
        self.penalty = penalty

    def weight(self, m: Member) -> float:
        return max(fitness_key(m), FITNESS_FLOOR) / (1.0 + self.penalty * self.offspring(m))

    def _pick(self, pop: Population, rng: random.Random, k: int) -> list[Member]:
        def one(pool: list[Member]) -> Member:
            return rng.choices(pool, weights=[self.weight(m) for m in pool])[0]

        return _draw_distinct(pop.members, k, one)

    def _params(self) -> dict[str, Any]:
        return {"penalty": self.penalty}

    def _load_params(self, params: dict[str, Any]) -> None:
        self.penalty = float(params["penalty"])


def descriptor_bin(name: str, m: Member, bins: int) -> int:
    """The bin of member `m` along descriptor `name`, in [0, bins) or MISSING_BIN.

    - sol_fraction: metrics["sol_fraction"] in [0, 1], `bins` even bins (clipped).
    - code_size: len(source), `bins` bins even in log size over CODE_SIZE_RANGE (clipped).
    - bound: 0 memory-bound, 1 compute-bound, from metrics flops / min_bytes against
      RIDGE_FLOP_PER_BYTE (always two bins).
    - any other name: metrics[name] read as a fraction in [0, 1], binned like sol_fraction;
      whoever writes such a metric normalizes it.
    """
    if name == "code_size":
        lo, hi = CODE_SIZE_RANGE
        x = math.log(max(len(m.source), 1) / lo) / math.log(hi / lo)
        return min(bins - 1, max(0, math.floor(x * bins)))
    if name == "bound":
        flops, nbytes = m.metrics.get("flops"), m.metrics.get("min_bytes")
        if flops is None or not nbytes:
            return MISSING_BIN
        return int(flops / nbytes >= RIDGE_FLOP_PER_BYTE)
    value = m.metrics.get(name)
    if value is None or math.isnan(value):
        return MISSING_BIN
    return min(bins - 1, max(0, math.floor(float(value) * bins)))


class MapElites(SelectionStrategy):
    """MAP-Elites: niches by binned descriptors; the archive keeps the fittest member per niche.

    `select` picks a random occupied niche, then its elite. The archive is this strategy's own
    population: a niche's elite stays selectable after the island's cap evicts it, since it is
    what keeps the niche alive. Members the island added without `observe` are folded in at
    each `select`. Parents beyond the number of occupied niches are drawn uniformly from the
    island's other members.
    """

    name = "map_elites"

    def __init__(
        self,
        descriptors: tuple[str, ...] | list[str] = ("sol_fraction", "code_size"),
        bins: int = 4,
    ) -> None:
        super().__init__()
        if not descriptors:
            raise ValueError("map_elites needs at least one descriptor")
        if bins < 1:
            raise ValueError(f"bins must be at least 1, got {bins}")
        self.descriptors = tuple(descriptors)
        self.bins = bins
        self.archive: dict[tuple[int, ...], Member] = {}

    def niche(self, m: Member) -> tuple[int, ...]:
        return tuple(descriptor_bin(d, m, self.bins) for d in self.descriptors)

    def observe(self, m: Member) -> None:
        """Keep `m` if it is correct and fitter than its niche's elite (ties keep the elite).

        Observing the elite itself again (the island's object after a restore) relinks the
        archive to that object, so offspring counts land on the member the island holds.
        """
        if not m.is_correct:
            return
        key = self.niche(m)
        elite = self.archive.get(key)
        if (
            elite is None
            or elite.candidate_id == m.candidate_id
            or fitness_key(m) > fitness_key(elite)
        ):
            self.archive[key] = m

    def _pick(self, pop: Population, rng: random.Random, k: int) -> list[Member]:
        for m in pop.members:
            self.observe(m)
        niches = sorted(self.archive)
        chosen = [self.archive[n] for n in rng.sample(niches, min(k, len(niches)))]
        if len(chosen) < k:
            picked = {m.candidate_id for m in chosen}
            rest = [m for m in pop.members if m.candidate_id not in picked] or pop.members
            chosen += _draw_distinct(rest, k - len(chosen), rng.choice)
        return chosen

    def get_state(self) -> dict[str, Any]:
        state = super().get_state()
        state["archive"] = [
            {"niche": list(n), "member": m.to_dict()} for n, m in sorted(self.archive.items())
        ]
        return state

    def set_state(self, state: dict[str, Any]) -> None:
        super().set_state(state)
        self.archive = {tuple(e["niche"]): Member.from_dict(e["member"]) for e in state["archive"]}

    def _params(self) -> dict[str, Any]:
        return {"descriptors": list(self.descriptors), "bins": self.bins}

    def _load_params(self, params: dict[str, Any]) -> None:
        self.descriptors = tuple(params["descriptors"])
        self.bins = int(params["bins"])


STRATEGIES: dict[str, type[SelectionStrategy]] = {
    s.name: s for s in (Tournament, FitnessProportional, MapElites)
}


def make_strategy(name: str, **params: Any) -> SelectionStrategy:
    """A strategy by its config name, e.g. make_strategy("tournament", size=4)."""
    cls = STRATEGIES.get(name)
    if cls is None:
        raise ValueError(
            f"unknown selection strategy {name!r}; choices: {', '.join(sorted(STRATEGIES))}"
        )
    try:
        return cls(**params)
    except TypeError as e:
        raise ValueError(f"bad parameters for selection strategy {name!r}: {e}") from None
