"""Migration: islands trade their best members along a topology.

A migrant is a copy marked `is_migrant`, with its own id and the original as its one parent.
Migrants are never migrated again, so a member travels one hop and a ring cannot flood every
island with one lineage. Keeping a child on its parent's island is the caller's job.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from evo.population import Member, Population

TOPOLOGIES = ("ring", "all_to_all", "none")


def targets(topology: str, islands: list[str], source: str) -> list[str]:
    """The islands `source` sends migrants to.

    ring: the next island in list order, wrapping; all_to_all: every other island; none: [].
    """
    if topology not in TOPOLOGIES:
        raise ValueError(
            f"unknown migration topology {topology!r}; choices: {', '.join(TOPOLOGIES)}"
        )
    if source not in islands:
        raise ValueError(f"island {source!r} is not one of {islands}")
    if topology == "ring":
        nxt = islands[(islands.index(source) + 1) % len(islands)]
        return [] if nxt == source else [nxt]
    if topology == "all_to_all":
        return [i for i in islands if i != source]
    return []


def pick_migrants(pop: Population, rate: int) -> list[Member]:
    """The best `rate` correct members that did not arrive as migrants themselves."""
    return [m for m in pop.best(len(pop.members)) if not m.is_migrant][: max(rate, 0)]


def as_migrant(m: Member, target_island: str, new_id: str) -> Member:
    """A copy of `m` for `target_island`: a new id, `m` as its parent, no offspring yet."""
    return dataclasses.replace(
        m,
        candidate_id=new_id,
        island=target_island,
        is_migrant=True,
        parent_ids=(m.candidate_id,),
        metrics=dict(m.metrics),
        children=0,
    )


def migrate(
    pops: dict[str, Population],
    topology: str,
    rate: int,
    new_id: Callable[[str], str],
) -> list[tuple[str, str, Member]]:
    """One migration round over all islands (in `pops` order); returns (from, to, migrant).

    Migrants are picked from every island before any arrives, so a round moves members one hop.
    A target that has already seen a migrant's source_hash skips it; `new_id(target)` is called
    only for migrants that will be added, so no id is spent on a skipped one.
    """
    islands = list(pops)
    outgoing = {src: pick_migrants(pops[src], rate) for src in islands}
    accepted: list[tuple[str, str, Member]] = []
    for src in islands:
        for dst in targets(topology, islands, src):
            for m in outgoing[src]:
                if pops[dst].seen(m.source_hash):
                    continue
                migrant = as_migrant(m, dst, new_id(dst))
                pops[dst].add(migrant)
                accepted.append((src, dst, migrant))
    return accepted
