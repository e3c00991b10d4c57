"""The driver's analysis stage: new island bests are profiled and advised on.

A new best's profile is captured by a fitness worker (on the GPU it owns, queued between two
evaluations, so no timing runs beside it), stored under RUN/artifacts/profiles/, and read by
the profiler-analysis actor (the rule analyst; or, with `analyst.llm`, the run's first model
through the drafter). The recommendation goes back to the member's island, where its
lineage's next children follow it, and into an `analysis` event. Everything here is
asynchronous: a slow profile never holds a verdict back.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable

import ray

from evo.config import RunConfig
from evo.rundir import RunDir
from fitness.profile import safe_id
from operators.analyst import analyst_actor_class


class Advisor:
    """Profiles and recommendations for the new bests of each island (at most
    `analyst.max_per_island` each, one at a time per island)."""

    def __init__(self, cfg: RunConfig, rd: RunDir, pool, event: Callable, drafter=None):
        self.cfg, self.rd, self.pool, self.event = cfg, rd, pool, event
        self.drafter = drafter if cfg.analyst.llm else None
        self.actor = analyst_actor_class().remote()
        self.count: dict[str, int] = defaultdict(int)
        self.busy: set[str] = set()  # islands with a profile or recommendation under way
        self.jobs: dict = {}  # ObjectRef or Future -> (stage, workload, island, id, path, hash)
        # One analysis per source: the same kernel (every island's seed) is profiled once.
        self.known: dict[str, tuple[dict, str]] = {}  # source hash -> (advice, profile path)
        self.waiting: dict[str, list[tuple[str, str, str]]] = defaultdict(list)
        self.ready: list[tuple[str, str, str, dict]] = []

    def restore(self, events: list[dict]) -> list[tuple[str, str, dict]]:
        """The advice a resumed run already had (its `analysis` events): the per-island counts
        are rebuilt, and (island, candidate_id, recommendation) returned for the hosts."""
        out = []
        for d in events:
            if "candidate_id" not in d or "island" not in d:
                continue
            if not d.get("reused"):
                self.count[d["island"]] += 1
            if "recommendation" in d:
                out.append((d["island"], d["candidate_id"], d["recommendation"]))
                if d.get("source_hash"):
                    self.known[d["source_hash"]] = (d["recommendation"], d.get("profile", ""))
        return out

    def submit(self, w: str, island: str, prop: dict, verdict: dict) -> None:
        """Profile `prop` (a new best of `island`) unless its island has had its share; a
        source already analysed (or under way) gets that analysis."""
        digest = prop.get("source_hash", "")
        if digest in self.known:
            rec, path = self.known[digest]
            self._done(w, island, prop["candidate_id"], rec, path, digest, reused=True)
            return
        if digest in self.waiting:
            self.waiting[digest].append((w, island, prop["candidate_id"]))
            return
        if island in self.busy or self.count[island] >= self.cfg.analyst.max_per_island:
            return
        self.count[island] += 1
        self.busy.add(island)
        self.waiting[digest] = []
        req = {
            "source": prop["source"],
            "workload": w,
            "backend": prop["backend"],
            "precision": self.cfg.fitness.precision,
            "kernelbench_root": self.cfg.kernelbench.root if self.cfg.kernelbench else None,
            "result": verdict,
            "ncu": self.cfg.analyst.ncu,
        }
        k = min(range(self.pool.n), key=lambda i: self.pool.load[i])
        ref = self.pool.workers[k].profile.remote(req)
        self.jobs[ref] = ("profile", w, island, prop["candidate_id"], "", digest)

    def poll(self) -> list[tuple[str, str, str, dict]]:
        """Recommendations that are ready: (workload, island, candidate_id, recommendation)."""
        for job in list(self.jobs):
            if isinstance(job, ray.ObjectRef):
                if not ray.wait([job], timeout=0)[0]:
                    continue
            elif not job.done():
                continue
            stage, w, island, cid, path, digest = self.jobs.pop(job)
            try:
                value = ray.get(job) if isinstance(job, ray.ObjectRef) else job.result()
            except Exception as e:  # noqa: BLE001 - a failed analysis is an event, not a stop
                self._failed(island, cid, stage, f"{type(e).__name__}: {e}", digest)
                continue
            if stage == "profile":
                if value["profile"] is None:
                    self._failed(island, cid, stage, value["error"], digest)
                    continue
                path = f"artifacts/profiles/{safe_id(cid)}.json"
                self.rd.write_text(path, value["profile"])
                nxt = (
                    self.drafter.advise(value["profile"])
                    if self.drafter
                    else self.actor.recommend.remote(value["profile"])
                )
                self.jobs[nxt] = ("recommend", w, island, cid, path, digest)
                continue
            self.busy.discard(island)
            self.known[digest] = (value, path)
            self._done(w, island, cid, value, path, digest)
            for other in self.waiting.pop(digest, []):
                self._done(*other, value, path, digest, reused=True)
        out, self.ready = self.ready, []
        return out

    def _done(self, w, island, cid, rec, path, digest, reused=False) -> None:
        detail = {"candidate_id": cid, "island": island, "source_hash": digest,
                  "profile": path, "recommendation": rec}  # fmt: skip
        if reused:
            detail["reused"] = True
        self.event("analysis", island, detail)
        self.ready.append((w, island, cid, rec))

    def _failed(self, island: str, cid: str, stage: str, error: str, digest: str) -> None:
        self.busy.discard(island)
        self.waiting.pop(digest, None)
        detail = {"candidate_id": cid, "island": island, "stage": stage, "error": error[-800:]}
        self.event("analysis", island, detail)

    def close(self) -> None:
        try:
            ray.kill(self.actor)
        except Exception:  # noqa: BLE001 - already gone
            pass
