"""Islands: small populations of one workload's candidates, hosted together in one Ray actor.

An island is the unit of evolution (workload, backend, index). `IslandHost` holds every island
of one workload: it picks parents, asks the operator for children, folds verdicts into the
populations, writes the lineage rows of its islands, and migrates between them. The driver
decides when to propose and integrate; the host decides what.
"""

from __future__ import annotations

import json
import random
from datetime import UTC, datetime

from evo.candidate import Proposal, candidate_id, candidate_row, fitness_function, score
from evo.lineage import LineageWriter
from evo.migration import as_migrant, pick_migrants, targets
from evo.population import Member, Population
from evo.selection import make_strategy
from fitness.judge import source_hash
from operators.offline import ParamOperator

CROSSOVER_RATE = 0.2  # of offline proposals, when an island holds two or more members
DEFAULT_WEIGHTS = {"mutate": 0.6, "crossover": 0.2, "repair": 0.2, "translate": 0.1}
REPAIRABLE = ("compile_error", "runtime_error", "timeout", "mismatch")
SUMMARY_FIELDS = ("reason", "speedup_vs_eager", "speedup_vs_compile", "sol_fraction",
                  "precision", "recommendation")  # fmt: skip
DEDUP_ATTEMPTS = 8  # proposals tried before a step is given up as a duplicate


def island_name(workload: str, backend: str, index: int) -> str:
    return f"{workload}|{backend}|{index}"


class IslandHost:
    """Every island of one workload. Plain Python; `evo.engine` runs it as a Ray actor."""

    def __init__(
        self, run_id: str, run_dir: str, workload: str, seeds: dict, cfg: dict, operator=None
    ):
        self.run_id, self.workload, self.cfg = run_id, workload, cfg
        pop_cfg, sel = cfg["population"], dict(cfg["selection"])
        self.deterministic = bool(cfg.get("deterministic"))
        self.seed = int(cfg.get("seed", 0))
        # backend -> its seeds, [{"source", "description"}], proposed at steps 0, 1, ...
        self.seeds = {b: list(v) for b, v in seeds.items()}
        self.islands = [
            island_name(workload, b, i) for b in self.seeds for i in range(pop_cfg["islands"])
        ]
        self.pops = {
            name: Population(pop_cfg["cap"], pop_cfg["elites"], pop_cfg["failure_pool"])
            for name in self.islands
        }
        strategy = sel.pop("strategy")
        params = {
            "tournament": {"size": sel["tournament_size"]},
            "fitness_proportional": {"penalty": sel["offspring_penalty"]},
            "map_elites": {"descriptors": tuple(sel["descriptors"]), "bins": sel["bins"]},
        }[strategy]
        self.strategies = {n: make_strategy(strategy, **params) for n in self.islands}
        self.rngs = {n: random.Random(f"{self.seed}/{n}") for n in self.islands}
        self.next_step = dict.fromkeys(self.islands, 0)
        # Hashes of offline children proposed and not yet folded: a child in flight counts
        # for dedup too (two identical children of one parent were both judged on the H100).
        self.pending: dict[str, set[str]] = {n: set() for n in self.islands}
        self.migrations = 0
        self.exported: dict[str, Member] = {}  # island -> its best at the last migration
        target = {"cuda": "gpu", "cpu": "interpreter"}.get(cfg["fitness"].get("device"))
        self.operator = operator or ParamOperator(target=target)
        # With a model configured, a proposal is a request the driver drafts through the LLM
        # operators (evo.drafting); its source comes back later, or a generation_failure.
        llm = cfg.get("llm") or {}
        active = llm.get("spec", "offline") != "offline" or bool(llm.get("models"))
        self.llm = operator is None and active
        self.fitness = fitness_function(cfg["fitness"]["metric"])
        slug = workload.replace(":", "_").replace("/", "_")
        self.rows = LineageWriter(run_dir, "candidates", slug)
        self.recorded: set[str] = set()  # ids already in the lineage (a deterministic replay)
        self.events = LineageWriter(run_dir, "events", slug)

    # -- proposing
    def propose(self, island: str, n: int) -> list[dict]:
        """Up to `n` children of `island` (step 0 is the backend's seed); fewer when the
        operator has nothing new to offer. Each proposal takes the island's next step."""
        out = []
        for _ in range(n):
            prop = self._propose_one(island)
            if prop is None:
                break
            if prop.source:  # an LLM request's source is drafted later
                self.pending[island].add(prop.source_hash)
            out.append(prop.to_dict())
        return out

    def propose_many(self, wants: dict[str, int]) -> list[dict]:
        """`propose` for several islands in one call (one actor round trip)."""
        return [p for island, n in wants.items() for p in self.propose(island, n)]

    def _propose_one(self, island: str) -> Proposal | None:
        backend = island.split("|")[1]
        pop, step = self.pops[island], self.next_step[island]
        rng = self._rng(island, step)
        seeds = self.seeds[backend]
        if step < len(seeds):
            s = seeds[step]
            return self._proposal(island, s["source"], "seed", (), s.get("description", ""))
        if not pop.members and not pop.failures and seeds:
            return None  # a seed's verdict comes first
        if self.llm:
            return self._llm_request(island, rng)
        if not pop.members:
            return None
        strategy = self.strategies[island]
        for _ in range(DEDUP_ATTEMPTS):
            if len(pop.members) >= 2 and rng.random() < CROSSOVER_RATE:
                a, b = strategy.select(pop, rng, k=2)
                child, op, parents = (
                    self.operator.crossover(a.source, b.source, rng),
                    "crossover",
                    (a, b),
                )
            else:
                (a,) = strategy.select(pop, rng, k=1)
                hint = a.summary.get("params_hint") or None
                child, op, parents = self.operator.mutate(a.source, rng, hint), "mutate", (a,)
            if child is None:
                continue
            digest = source_hash(child)
            if pop.seen(digest) or digest in self.pending[island]:
                self._event("duplicate", island, {"step": step, "operator": op})
                continue
            for p in parents:
                strategy.on_child(p)
            desc = self.operator.describe(parents[0].source, child)
            prop = self._proposal(
                island,
                child,
                f"offline_{op}",
                tuple(p.candidate_id for p in parents),
                desc,
                digest,
            )
            prop.recommendation = parents[0].summary.get("recommendation") or ""
            return prop
        return None

    def _llm_request(self, island: str, rng: random.Random) -> Proposal:
        """A child to draft: the operator, its parents and the material of its prompt.

        The operator is drawn by `operators` weight among those that have what they need;
        in an island without a correct member, initial (a kernel written from the
        reference) takes mutate's weight."""
        pop, strategy = self.pops[island], self.strategies[island]
        ops = self.cfg.get("operators") or {}
        attempts = int(ops.get("repair_attempts", 3))
        broken = [
            m
            for m in pop.failures
            if m.status in REPAIRABLE
            and m.children == 0
            and m.metrics.get("repair_attempt", 0) < attempts
        ]
        foreign = self._foreign(island)
        able = {
            "mutate": bool(pop.members),
            "crossover": len(pop.members) >= 2,
            "repair": bool(broken),
            "translate": bool(foreign),
        }
        weights = {k: float(ops.get(k, DEFAULT_WEIGHTS[k])) for k in able if able[k]}
        weights = {k: w for k, w in weights.items() if w > 0}
        if not pop.members:  # nothing to mutate: write one from the reference, or port one
            mutate = float(ops.get("mutate", DEFAULT_WEIGHTS["mutate"]))
            weights = {"initial": mutate, **{k: w for k, w in weights.items() if k != "mutate"}}
        kind = _draw(weights, rng)
        source_backend, repair_attempt = "", 0
        if kind == "repair":
            parents = (rng.choice(broken),)
            parents[0].children += 1
            repair_attempt = int(parents[0].metrics.get("repair_attempt", 0)) + 1
        elif kind == "crossover":
            parents = tuple(strategy.select(pop, rng, k=2))
        elif kind == "translate":
            other = rng.choice(foreign)
            parents = (self.exported[other],)
            source_backend = other.split("|")[1]
        elif kind == "mutate":
            parents = tuple(strategy.select(pop, rng, k=1))
        else:
            parents = ()
        for p in parents:
            if p.is_correct and p.island == island:
                strategy.on_child(p)
        ids = {p.candidate_id for p in parents}
        others = [m for m in pop.best(3) if m.candidate_id not in ids][:2]
        taken = ids | {m.candidate_id for m in others}
        rest = [m for m in pop.members if m.candidate_id not in taken]
        if rest:  # and one from elsewhere in the island, for diversity
            others.append(rng.choice(rest))
        prop = self._proposal(
            island, "", f"llm_{kind}", tuple(p.candidate_id for p in parents), digest="-"
        )
        if parents:
            prop.recommendation = parents[0].summary.get("recommendation") or ""
        prop.extra["request"] = {
            "kind": kind,
            "parents": [_sample(m) for m in parents],
            "inspirations": [_sample(m) for m in others],
            "source_backend": source_backend,
        }
        if repair_attempt:
            prop.extra["repair_attempt"] = repair_attempt
        return prop

    def _foreign(self, island: str) -> list[str]:
        """Islands of this workload on another backend whose best, as of the last migration,
        can be ported here (cross-backend trade, through the translate operator)."""
        backend = island.split("|")[1]
        return [n for n in self.exported if n.split("|")[1] != backend]

    def set_recommendation(self, island: str, candidate_id: str, rec: dict) -> bool:
        """The analyst's advice for a member: its lineage's next children follow it (the
        LLM's mutate prompt shows the text; the offline operator moves the hinted
        parameters). False when the member has left the island."""
        for m in self.pops[island].members:
            if m.candidate_id == candidate_id:
                m.summary["recommendation"] = rec.get("text") or ""
                m.summary["params_hint"] = dict(rec.get("params_hint") or {})
                return True
        return False

    def seen_many(self, items: list[tuple[str, str]]) -> list[bool]:
        """Whether each (island, source_hash) duplicates a candidate its island holds or has
        held: a drafted child is deduplicated before it is judged."""
        out = []
        for island, digest in items:
            dup = self.pops[island].seen(digest)
            if dup:
                self._event("duplicate", island, {"source_hash": digest})
            out.append(dup)
        return out

    def _proposal(self, island, source, operator, parents, desc="", digest="") -> Proposal:
        step = self.next_step[island]
        self.next_step[island] = step + 1
        return Proposal(
            candidate_id=candidate_id(self.run_id, island, step),
            workload=self.workload,
            backend=island.split("|")[1],
            island=island,
            step=step,
            source=source,
            source_hash=digest or source_hash(source),
            operator=operator,
            parent_ids=parents,
            extra={"description": desc} if desc else {},
        )

    def _rng(self, island: str, step: int) -> random.Random:
        """Deterministic mode: a generator per (island, step), so a proposal depends only on
        the population it sees; otherwise the island's own generator (checkpointed)."""
        if self.deterministic:
            return random.Random(f"{self.seed}/{island}/{step}")
        return self.rngs[island]

    # -- integrating
    def integrate(self, items: list[tuple[dict, dict]], record: bool = True) -> list[dict]:
        """Fold judged proposals into their islands; write their rows unless `record` is off
        (rows already in the lineage, folded back on resume). Returns the new island bests
        among them ({island, candidate_id}), for the profiler-analysis actor."""
        before = {n: self._best_id(n) for n in {p["island"] for p, _ in items}}
        for prop_d, verdict in items:
            prop = Proposal.from_dict(prop_d)
            fit, extra = score(self.fitness, verdict, prop)
            row = candidate_row(self.run_id, prop, verdict, fit, extra)
            self._fold(prop.island, row)
            self.next_step[prop.island] = max(self.next_step[prop.island], prop.step + 1)
            if record:
                self.rows.append(row)
        self.rows.maybe_flush()
        self.events.maybe_flush()
        ids = {p["candidate_id"] for p, _ in items}
        return [
            {"island": n, "candidate_id": best}
            for n, old in before.items()
            if (best := self._best_id(n)) != old and best in ids
        ]

    def _best_id(self, island: str) -> str | None:
        top = self.pops[island].best(1)
        return top[0].candidate_id if top and top[0].fitness is not None else None

    def fold_rows(self, rows: list[dict]) -> None:
        """Rows recorded after the last checkpoint, folded back in (resume); nothing written."""
        for row in sorted(rows, key=lambda r: (r["island"], r["step"])):
            if row["island"] in self.pops:
                if row.get("operator") == "llm_repair":  # that failure has had its repair
                    for m in self.pops[row["island"]].failures:
                        if m.candidate_id in (row.get("parent_ids") or ()):
                            m.children = max(m.children, 1)
                self._fold(row["island"], row)
                self.next_step[row["island"]] = max(
                    self.next_step[row["island"]], int(row["step"]) + 1
                )

    def _fold(self, island: str, row: dict) -> None:
        self.pending[island].discard(row["source_hash"])
        m = Member(
            candidate_id=row["candidate_id"],
            source_hash=row["source_hash"],
            source=row["source"],
            status=row["status"],
            fitness=row["fitness"],
            island=island,
            step=int(row["step"]),
            metrics=dict(row.get("metrics") or {}),
            parent_ids=tuple(row.get("parent_ids") or ()),
            is_migrant=bool(row.get("is_migrant")),
            summary={k: row.get(k) for k in SUMMARY_FIELDS if row.get(k) is not None},
        )
        if self.pops[island].add(m) and m.status == "correct":
            self.strategies[island].observe(m)

    # -- migration
    def migrate(self, topology: str, rate: int) -> list[dict]:
        """Copies of each island's best go to its targets (same backend only); each accepted
        migrant gets a row (is_migrant, its source as parent) and an event."""
        if (self.cfg.get("migration") or {}).get("cross_backend"):
            # What other backends' islands may port, fixed until the next migration (so a
            # deterministic run translates the same kernels whichever island folds first).
            self.exported = {
                n: _ported(self.pops[n].best(1)[0]) for n in self.islands if self.pops[n].best(1)
            }
        moved = []
        if topology == "none" or rate == 0:
            self.migrations += 1
            return moved
        by_backend: dict[str, list[str]] = {}
        for name in self.islands:
            by_backend.setdefault(name.split("|")[1], []).append(name)
        self.migrations += 1
        for names in by_backend.values():
            outgoing = {n: pick_migrants(self.pops[n], rate) for n in names}
            for src in names:
                for dst in targets(topology, names, src):
                    for m in outgoing[src]:
                        if self.pops[dst].seen(m.source_hash):
                            continue
                        # Migrants take ids of their own: the island's steps stay its proposals'.
                        cid = f"{self.run_id}/{dst}/m{self.migrations:05d}.{len(moved):03d}"
                        copy = as_migrant(m, dst, cid)
                        copy.step = self.next_step[dst]
                        self.pops[dst].add(copy)
                        self.strategies[dst].observe(copy)
                        detail = {"from": src, "to": dst, "candidate_id": m.candidate_id}
                        moved.append(detail)
                        if copy.candidate_id in self.recorded:
                            continue
                        self.rows.append(self._migrant_row(copy, m))
                        self._event("migration", dst, {**detail, "copy": copy.candidate_id})
        return moved

    def _migrant_row(self, copy: Member, m: Member) -> dict:
        return {
            "run_id": self.run_id,
            "candidate_id": copy.candidate_id,
            "source_hash": copy.source_hash,
            "workload": self.workload,
            "backend": copy.island.split("|")[1],
            "island": copy.island,
            "step": copy.step,
            "parent_ids": [m.candidate_id],
            "operator": "migration",
            "source": copy.source,
            "status": copy.status,
            "reason": f"migrant from {m.island}",
            "fitness": copy.fitness,
            "metrics": dict(copy.metrics),
            "created_at": datetime.now(UTC),
            "is_migrant": True,
        }

    # -- state
    def summary(self) -> dict:
        best = {}
        for n, pop in self.pops.items():
            top = pop.best(1)
            best[n] = top[0].fitness if top else None
        return {"workload": self.workload, "best": best, "next_step": dict(self.next_step)}

    def get_state(self) -> dict:
        self.flush()
        return {
            "pops": {n: p.get_state() for n, p in self.pops.items()},
            "strategies": {n: s.get_state() for n, s in self.strategies.items()},
            "rngs": {n: _rng_state(r) for n, r in self.rngs.items()},
            "next_step": dict(self.next_step),
            "pending": {n: sorted(h) for n, h in self.pending.items()},
            "migrations": self.migrations,
            "exported": {n: m.to_dict() for n, m in self.exported.items()},
        }

    def set_state(self, state: dict) -> None:
        for n, s in state["pops"].items():
            self.pops[n].set_state(s)
        for n, s in state["strategies"].items():
            self.strategies[n].set_state(s)
        for n, s in state["rngs"].items():
            self.rngs[n].setstate(_rng_from(s))
        self.next_step.update(state["next_step"])
        for n, hashes in state.get("pending", {}).items():  # absent before 2026-11-23
            if n in self.pending:
                self.pending[n] = set(hashes)
        self.migrations = state["migrations"]
        self.exported = {n: Member.from_dict(d) for n, d in state.get("exported", {}).items()}

    def seed_from(self, members: list[dict]) -> int:
        """A new run's islands start from a saved population (`evo run --from`)."""
        added = 0
        for d in members:
            backend = d.get("backend") or d["island"].split("|")[1]
            for n in self.islands:
                if n.split("|")[1] != backend:
                    continue
                prop = self._proposal(n, d["source"], "from_run", (d["candidate_id"],))
                verdict = {"status": d["status"], "reason": "seeded from a saved run"}
                row = candidate_row(self.run_id, prop, verdict, d.get("fitness"), {})
                row["metrics"].update(d.get("metrics") or {})
                self._fold(n, row)
                self.rows.append(row)
                added += 1
        return added

    def advance_steps(self, steps: dict[str, int]) -> None:
        """Never hand out these steps again (children in flight when a host was restored)."""
        for island, step in steps.items():
            self.next_step[island] = max(self.next_step[island], step)

    def set_recorded(self, ids: list[str]) -> None:
        self.recorded = set(ids)

    def _event(self, kind: str, island: str, detail: dict) -> None:
        self.events.append(
            {
                "run_id": self.run_id,
                "kind": kind,
                "island": island,
                "detail": json.dumps(detail, sort_keys=True),
                "created_at": datetime.now(UTC),
            }
        )

    def flush(self) -> None:
        self.rows.flush()
        self.events.flush()

    def close(self) -> None:
        self.rows.close()
        self.events.close()


def _rng_state(r: random.Random) -> list:
    version, internal, gauss = r.getstate()
    return [version, list(internal), gauss]


def _rng_from(s: list) -> tuple:
    return (s[0], tuple(s[1]), s[2])


def _sample(m: Member) -> dict:
    """A member as a prompt shows it: its code and its verdict."""
    summary = {k: v for k, v in m.summary.items() if k != "params_hint"}
    return {"source": m.source, "status": m.status, **summary, "label": f"step {m.step}"}


def _ported(m: Member) -> Member:
    """A copy of a member for another backend's islands to port: its own backend's advice
    (and tuning hint) stays behind."""
    copy = Member.from_dict(m.to_dict())
    copy.summary = {
        k: v for k, v in copy.summary.items() if k not in ("recommendation", "params_hint")
    }
    return copy


def _draw(weights: dict[str, float], rng: random.Random) -> str:
    """A key of `weights`, drawn in proportion (in the dict's order, so a seed repeats)."""
    r = rng.random() * sum(weights.values())
    for k, w in weights.items():
        r -= w
        if r < 0:
            return k
    return k
