"""One island's population: the evaluated candidates that selection draws parents from.

Correct candidates compete; failed ones sit in a small bounded pool that `repair` draws from
and are never selected otherwise (DESIGN.md, Population). In memory only: persistence is the
lineage writer's and the checkpoint's job, through `get_state` / `set_state`.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

from fitness.results import Status


@dataclass
class Member:
    """What selection needs to know about one evaluated candidate."""

    candidate_id: str
    source_hash: str
    source: str
    status: str  # a fitness.results.Status value
    fitness: float | None
    island: str
    step: int
    metrics: dict[str, float] = field(default_factory=dict)
    parent_ids: tuple[str, ...] = ()
    is_migrant: bool = False
    children: int = 0  # offspring count, for the fitness-proportional penalty
    # The verdict in words, for the LLM operators' prompts: reason, speedups, SOL fraction.
    summary: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.status = Status(self.status).value
        self.parent_ids = tuple(self.parent_ids)

    @property
    def is_correct(self) -> bool:
        return self.status == Status.CORRECT.value

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["parent_ids"] = list(self.parent_ids)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Member:
        """The inverse of `to_dict`; keys this version does not know are ignored."""
        names = {f.name for f in dataclasses.fields(cls)}
        kw = {k: v for k, v in d.items() if k in names}
        kw["metrics"] = dict(kw.get("metrics") or {})
        kw["parent_ids"] = tuple(kw.get("parent_ids") or ())
        return cls(**kw)


def fitness_key(m: Member) -> float:
    """A member's fitness for ranking; a correct member without one ranks last."""
    return -math.inf if m.fitness is None else float(m.fitness)


def ranked(members: list[Member]) -> list[Member]:
    """Best first: higher fitness, then the older (lower step), then insertion order."""
    return sorted(members, key=lambda m: (-fitness_key(m), m.step))


class Population:
    """One island's members: correct candidates compete; failures go to a small bounded pool
    (for repair), never selected otherwise.

    Dedup by source_hash, over members, failures and every hash ever added (an evicted
    candidate is not evaluated again). Elitism: the top `elites` by fitness are never
    evicted; over `cap`, the worst non-elite correct member is evicted (ties: oldest step
    first). A correct member without a fitness ranks below every member with one.
    """

    def __init__(self, cap: int, elites: int, failure_pool: int) -> None:
        if cap < 1:
            raise ValueError(f"population cap must be at least 1, got {cap}")
        if not 0 <= elites <= cap:
            raise ValueError(f"elites must be between 0 and cap ({cap}), got {elites}")
        if failure_pool < 0:
            raise ValueError(f"failure_pool must be >= 0, got {failure_pool}")
        self.cap = cap
        self.elites = elites
        self.failure_pool = failure_pool
        self.members: list[Member] = []
        self.failures: list[Member] = []
        self._seen: set[str] = set()

    def seen(self, source_hash: str) -> bool:
        return source_hash in self._seen

    def add(self, m: Member) -> bool:
        """Add an evaluated candidate; False (and nothing changes) if its hash was seen.

        A correct candidate joins the members (and may be evicted at once if it is the worst
        non-elite over the cap); any other goes to the failure pool, oldest out first.
        """
        if m.source_hash in self._seen:
            return False
        self._seen.add(m.source_hash)
        if m.is_correct:
            self.members.append(m)
            while len(self.members) > self.cap:
                self.members.remove(self._eviction_victim())
        else:
            self.failures.append(m)
            del self.failures[: max(0, len(self.failures) - self.failure_pool)]
        return True

    def _eviction_victim(self) -> Member:
        elite_ids = {id(m) for m in ranked(self.members)[: self.elites]}
        rest = [m for m in self.members if id(m) not in elite_ids]
        return min(rest, key=lambda m: (fitness_key(m), m.step))

    def best(self, k: int = 1) -> list[Member]:
        """The `k` fittest correct members, best first."""
        return ranked(self.members)[:k]

    def get_state(self) -> dict[str, Any]:
        """Everything needed to rebuild this population exactly; JSON-serializable."""
        return {
            "cap": self.cap,
            "elites": self.elites,
            "failure_pool": self.failure_pool,
            "members": [m.to_dict() for m in self.members],
            "failures": [m.to_dict() for m in self.failures],
            "seen": sorted(self._seen),
        }

    def set_state(self, state: dict[str, Any]) -> None:
        self.cap = int(state["cap"])
        self.elites = int(state["elites"])
        self.failure_pool = int(state["failure_pool"])
        self.members = [Member.from_dict(d) for d in state["members"]]
        self.failures = [Member.from_dict(d) for d in state["failures"]]
        self._seen = set(state["seen"])
