"""The driver of a run: island hosts and fitness workers on Ray, budgets, checkpoints, resume
(what a checkpoint holds and how a run comes back from it: `evo.recovery`).

Steady state, no generation barrier: each island keeps `population.in_flight` children in
flight; a verdict is folded into its island as soon as it lands, and the island proposes again.
In deterministic mode an island's verdicts are folded in step order and it proposes only right
after a fold, so its proposals depend on nothing but the seed and the verdicts; a resume then
replays the lineage and continues exactly where an uninterrupted run would be.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
import uuid
from collections import defaultdict
from datetime import UTC, datetime

import ray

from evo.advice import Advisor
from evo.budget import Budget, BudgetExceeded
from evo.candidate import failed_verdict, verdict_from_row
from evo.config import RunConfig, config_yaml, load_config_text, with_absolute_paths
from evo.drafting import Drafter
from evo.island import IslandHost
from evo.lineage import LineageWriter
from evo.pool import WORKER_DIED, FitnessPool
from evo.progress import LiveView, Progress
from evo.recovery import (
    checkpoint_state,
    host_restoration,
    plan_resume,
    recorded_analyses,
    recorded_run_id,
    saved_population,
    steps_taken,
)
from evo.rundir import RunDir
from evo.seeding import add_compiler_seeds
from evo.workset import run_workloads
from fitness.errors import EvoError
from fitness.judge import source_hash

ADVICE_GRACE_S = 120.0  # how long a finished run waits for the analyses under way
STALL_LIMIT = 8  # drafts in a row with nothing to judge before an island stops proposing


class Engine:
    """One run (or resume) of a config in a run directory."""

    def __init__(
        self,
        cfg: RunConfig,
        run_dir: str,
        resume: bool = False,
        quiet: bool = False,
        operator=None,
        worker_cls=None,
        workers: int | None = None,
    ):
        """`operator` and `worker_cls` replace the offline operator and the fitness service
        (the engine-overhead benchmark plugs no-op ones in; a run never does)."""
        self.cfg, self.quiet, self.resume = cfg, quiet, resume
        self.operator, self.worker_cls, self.workers = operator, worker_cls, workers
        self.rd = RunDir(run_dir)
        self.run_id = ""
        self.stop_reason = ""
        self.progress = Progress()
        self._stop = threading.Event()
        self.spent_workloads: set[str] = set()  # their own evaluation cap is spent
        self.epochs: dict[str, int] = {}  # deterministic mode: migrations done per workload
        self._extra_shapes: dict[str, list[dict]] = {}  # a geomean metric's other shapes
        self.hosts: dict = {}  # workload -> its island host (none until the run has started)
        self.drafter = self.advisor = None
        self.unadmitted: list[dict] = []  # proposed, then refused by a budget: kept for resume

    def run(self, from_run: str | None = None) -> dict:
        self.rd.lock()
        try:
            return self._run(from_run)
        finally:
            self.rd.unlock()

    def _run(self, from_run: str | None) -> dict:
        ckpt = self.rd.latest_checkpoint() if self.resume else None
        if self.resume and ckpt is None and not self.cfg.deterministic:
            raise EvoError(f"{self.rd.uri}: no committed checkpoint to resume from")
        self.run_id = (
            ckpt["run_id"]
            if ckpt
            else (recorded_run_id(self.rd) if self.resume else uuid.uuid4().hex[:8])
        )
        if not self.resume:
            if self.rd.exists("candidates"):
                raise EvoError(f"{self.rd.uri} already holds a run; use `evo resume` on it")
            self.rd.write_text("config.yaml", config_yaml(with_absolute_paths(self.cfg)))
        b = self.cfg.budgets
        self.budget = Budget(
            max_evals=b.max_evals,
            wall_seconds=b.wall_seconds,
            llm_dollars=b.llm_dollars,
            llm_tokens=b.llm_tokens,
            gpu_seconds=b.gpu_seconds,
            per_workload_max_evals=b.per_workload_max_evals,
        )
        if ckpt:
            self.budget.set_state(ckpt["budget"])
        self.events = LineageWriter(self.rd.uri, "events", "driver")
        self._start_ray()
        self.pool = FitnessPool(
            self.run_id, self.cfg.fitness.device, self.workers, worker_cls=self.worker_cls
        )
        try:
            work = run_workloads(self.cfg)
            if self.worker_cls is None:  # torch.compile's Triton as seeds (seed_kernels: inductor)
                gpus = self.pool.workers if self.pool.gpu else []
                work = add_compiler_seeds(
                    self.cfg, self.rd, gpus, work, self._event, self.quiet, self.resume
                )
        except BaseException:  # the events written so far (the seeds') are kept
            self._shutdown()
            raise
        seeds = {r.name: r.seeds for r in work}
        self._extra_shapes = {r.name: r.extra_shapes for r in work}
        cfg_d = self.cfg.to_dict()
        # The hosts' operator leaves alone the tunables of the target that does not run here.
        gpu = ray.cluster_resources().get("GPU", 0) > 0 and self.cfg.fitness.device != "cpu"
        cfg_d["fitness"]["device"] = "cuda" if gpu else "cpu"
        # The hosts write the lineage: they get the credentials and endpoints of the run
        # directory's store from the driver's environment (`AWS_*`, `EVO_S3_ENDPOINT`).
        store_env = {
            k: v for k, v in os.environ.items() if k.startswith("AWS_") or k == "EVO_S3_ENDPOINT"
        }
        self._host_cls = ray.remote(num_cpus=0.1)(IslandHost)
        self._host_env = {"env_vars": store_env} if store_env else None
        self._host_args = {w: (s, cfg_d) for w, s in seeds.items()}
        self.hosts = {w: self._new_host(w) for w in seeds}
        self.islands = {
            w: [n for n in ray.get(h.summary.remote())["next_step"]] for w, h in self.hosts.items()
        }
        placement = {"workers": self.pool.n, "gpu": self.pool.gpu, "hosts": len(self.hosts)}
        if self.worker_cls is None:  # where each fitness worker runs: host and GPU
            infos = ray.get([w.info.remote() for w in self.pool.workers])
            placement["fitness"] = [
                {"host": i["host"], "gpus": i["cuda_visible_devices"]} for i in infos
            ]
        self._event("placement", "", placement)
        self.drafter = None
        if self.cfg.llm.active and self.operator is None:
            self.drafter = Drafter(self.cfg, self.rd.uri, self.run_id, self.budget)
            if self.pool.gpu and self.worker_cls is None:  # device facts for the prompts
                facts = self.pool.workers[0].device_facts.remote(self.cfg.fitness.precision)
                self.drafter.device = ray.get(facts)
        self.advisor = None
        a = self.cfg.analyst
        if a.enabled and a.max_per_island > 0 and self.operator is None and not self.worker_cls:
            if self.cfg.deterministic:  # a profile's numbers differ from run to run
                self._event("analysis", "", {"off": "deterministic mode"})
            else:
                self.advisor = Advisor(self.cfg, self.rd, self.pool, self._event, self.drafter)
        resubmit, readmit = self._restore(ckpt, from_run)
        if self.advisor and self.resume:
            self._restore_advice()
        self._install_signals()
        try:
            self._loop(resubmit, readmit)
            result = self._result()
        finally:
            self._shutdown()
        return result

    def _new_host(self, w: str):
        seeds, cfg_d = self._host_args[w]
        name = f"evo-islands-{self.run_id}-{list(self._host_args).index(w)}"
        return self._host_cls.options(name=name, runtime_env=self._host_env).remote(
            self.run_id, self.rd.uri, w, seeds, cfg_d, self.operator
        )

    def _call(self, w: str, method: str, *args):
        """A call on a workload's island host; a host that died is restored, then called again."""
        try:
            return ray.get(getattr(self.hosts[w], method).remote(*args))
        except ray.exceptions.RayActorError as e:
            self._restore_host(w, e)
            return ray.get(getattr(self.hosts[w], method).remote(*args))

    def _restore_host(self, w: str, error: Exception) -> None:
        """A dead island host comes back from the last checkpoint plus the rows recorded
        after it; rows it had not flushed are lost (at most a few seconds' worth), and the
        steps of children still in flight are not handed out again."""
        self._event("fault", "", {"host": w, "error": str(error)[-800:]})
        self.hosts[w] = host = self._new_host(w)
        state, rows = host_restoration(self.rd, self.run_id, w)
        if state is not None:
            ray.get(host.set_state.remote(state))
        ray.get(host.fold_rows.remote(rows))
        if self.recorded:
            ray.get(host.set_recorded.remote(list(self.recorded)))
        taken = [p for isl in self.islands[w] for p in self.in_flight[isl]]
        taken += [p for p in self.unadmitted if p["workload"] == w]
        ray.get(host.advance_steps.remote(steps_taken(taken)))
        restored = {"host": w, "checkpoint": state is not None, "folded": len(rows)}
        self._event("restore", "", restored)

    def _start_ray(self) -> None:
        if ray.is_initialized():
            return
        if self.cfg.address:
            ray.init(address=self.cfg.address, log_to_driver=False)
        else:
            ray.init(include_dashboard=False, log_to_driver=False)

    # -- resume
    def _restore(self, ckpt: dict | None, from_run: str | None) -> tuple[list[dict], list[dict]]:
        """Bring islands back. Returns the children to submit again (in flight when the run
        stopped, never recorded) and those to admit again (proposed when a budget stopped the
        run, so never reserved or judged: a resume with a larger budget judges them, and an
        island's steps keep no gap)."""
        self.recorded: dict[str, dict] = {}
        if from_run:
            self._seed_from(from_run)
        if not self.resume:
            return [], []
        plan = plan_resume(self.rd, ckpt, self.cfg.deterministic)
        if plan.recorded is not None:  # a replay
            self.recorded = plan.recorded
            ids = list(self.recorded)
            ray.get([h.set_recorded.remote(ids) for h in self.hosts.values()])
        for w, h in self.hosts.items():
            if w in plan.hosts:
                state, later = plan.hosts[w]
                ray.get(h.set_state.remote(state))
                ray.get(h.fold_rows.remote(later))
        self.budget.set_evals(plan.evals)
        self._event("resume", "", plan.event)
        return plan.again, plan.readmit

    def _seed_from(self, run: str) -> None:
        saved = saved_population(run, list(self.hosts), self.cfg.population.cap)
        for w, h in self.hosts.items():
            n = ray.get(h.seed_from.remote(saved[w]))
            self._event("seeded", "", {"workload": w, "from": run, "members": n})

    # -- the loop
    def _loop(self, resubmit: list[dict], readmit: list[dict]) -> None:
        k = self.cfg.population.in_flight
        det = self.cfg.deterministic
        self.pending: dict = {}  # ObjectRef -> ([(workload, proposal)], (worker, handle))
        self.outbox: list[tuple] = []  # (workload, proposal, request) not yet sent
        self.in_flight: dict[str, list[dict]] = defaultdict(list)  # island -> proposals
        self.buffer: dict[str, dict[int, tuple]] = defaultdict(dict)  # det: step -> item
        self.next_fold: dict[str, int] = {isl: 0 for w in self.hosts for isl in self.islands[w]}
        self.proposed: dict[str, int] = defaultdict(int)
        self.folded: dict[str, int] = defaultdict(int)  # verdicts folded per workload
        self.quota = self._quotas() if det else {}
        self.streak: dict[str, int] = defaultdict(int)  # drafts in a row with nothing to judge
        self.stalled: set[str] = set()
        for p in resubmit:
            if p["source"]:
                self._submit(p["workload"], p)
            else:  # a child that was still being drafted: ask the model again
                self._draft(p["workload"], p)
        for p in readmit:  # one refused (kept again) does not stop another workload's
            self._admit(p["workload"], p)
        for w in self.hosts:
            for isl in self.islands[w]:
                self._propose(w, isl, k - len(self.in_flight[isl]))
            if det:
                self._fold_ready(w)
        self._send()
        last_ckpt = time.monotonic()
        with LiveView(self) as live:
            while self.pending or (self.drafter and self.drafter.busy):
                if self._stop.is_set():
                    self.stop_reason = self.stop_reason or "signal"
                    break
                ready = []
                if self.pending:
                    wait = 0.05 if self.drafter and self.drafter.busy else 0.5
                    ready, rest = ray.wait(list(self.pending), num_returns=1, timeout=wait)
                    if ready and rest:  # take every verdict that has landed, in one batch
                        ready += ray.wait(rest, num_returns=len(rest), timeout=0)[0]
                else:
                    time.sleep(0.05)
                if self.drafter:
                    self._drafted(det, k)
                self._landed(ready, det, k)
                if self.advisor:
                    self._advised()
                self._send()
                if time.monotonic() - last_ckpt > self.cfg.checkpoint_seconds:
                    self.checkpoint()
                    last_ckpt = time.monotonic()
                live()
            if not self.stop_reason:
                spent = self.quota and all(self.proposed[i] >= q for i, q in self.quota.items())
                self.stop_reason = (
                    "budget: max_evals" if spent else "no island has anything left to propose"
                )
            self._drain_advice(live)
            self.checkpoint()

    def _landed(self, refs: list, det: bool, k: int) -> None:
        """Fold a batch of verdicts: one integrate and one propose call per island host."""
        batch: dict[str, list] = defaultdict(list)
        for ref in refs:
            items, (worker, handle) = self.pending.pop(ref)
            if self.pool.workers[worker] is handle:  # a replaced worker's load starts afresh
                self.pool.done(worker, len(items))
            try:
                verdicts = ray.get(ref)
            except ray.exceptions.RayError as e:
                died = isinstance(e, ray.exceptions.RayActorError)
                what = WORKER_DIED if died else "fitness service fault"
                reason = f"{what}: {type(e).__name__}"
                verdicts = [failed_verdict("runtime_error", reason, prop) for _, prop in items]
                ids = [prop["candidate_id"] for _, prop in items]
                detail = {"worker": worker, "error": str(e)[-1500:], "candidate_ids": ids}
                self._event("fault", items[0][1]["island"], detail)
                if died and self.pool.workers[worker] is handle:  # not yet replaced
                    self.pool.replace(worker)
            for (w, prop), verdict in zip(items, verdicts, strict=True):
                self._account(verdict)
                batch[w].append((prop, verdict))
        self._fold_batch(batch, det, k)

    def _fold_batch(self, batch: dict[str, list], det: bool, k: int) -> None:
        """Verdicts (None: a drafted duplicate, nothing to fold) into their islands, then
        new proposals in their place."""
        if det:
            for w, items in batch.items():
                for prop, verdict in items:
                    self.buffer[prop["island"]][prop["step"]] = (prop, verdict)
                self._fold_ready(w)
            return
        for w, items in batch.items():
            judged = [(p, v) for p, v in items if v is not None]
            if not judged:
                continue
            new = self._call(w, "integrate", judged)
            if self.advisor:
                by_id = {p["candidate_id"]: (p, v) for p, v in judged}
                for best in new:
                    self.advisor.submit(w, best["island"], *by_id[best["candidate_id"]])
        interval = max(1, self.cfg.migration.interval)
        for w, items in batch.items():
            before = self.folded[w]
            self.folded[w] += len(items)
            if self.folded[w] // interval > before // interval:
                self._migrate(w)
            for prop, _ in items:
                self._drop(prop["island"], prop)
            wants = {isl: k - len(self.in_flight[isl]) for isl in {p["island"] for p, _ in items}}
            self._propose_many(w, wants)

    def _restore_advice(self) -> None:
        """A resumed run keeps the advice it had (the `analysis` events are the record: a
        recommendation may have come after the last checkpoint) and its profiles' counts."""
        by_island = {isl: w for w, isls in self.islands.items() for isl in isls}
        for island, cid, rec in self.advisor.restore(recorded_analyses(self.rd)):
            if island in by_island:
                self._call(by_island[island], "set_recommendation", island, cid, rec)

    def _drain_advice(self, live) -> None:
        """Analyses under way when the run ends are waited for (their recommendations go into
        the final checkpoint), unless a signal stopped the run."""
        deadline = time.monotonic() + ADVICE_GRACE_S
        while self.advisor and self.advisor.jobs and time.monotonic() < deadline:
            if self._stop.is_set():
                return
            time.sleep(0.1)
            self._advised()
            live()

    def _advised(self) -> None:
        """Recommendations that came back go to their members' islands."""
        for w, island, cid, rec in self.advisor.poll():
            self._call(w, "set_recommendation", island, cid, rec)

    def _quotas(self) -> dict[str, int]:
        """Deterministic mode splits the evaluation budget between islands in a fixed way, so
        which children get judged does not depend on which verdict landed first."""
        total = self.cfg.budgets.max_evals
        names = [isl for w in self.hosts for isl in self.islands[w]]
        if total is None:
            return {}
        share, extra = divmod(total, len(names))
        return {isl: share + (1 if j < extra else 0) for j, isl in enumerate(names)}

    def _drop(self, isl: str, prop: dict) -> None:
        self.in_flight[isl] = [p for p in self.in_flight[isl] if p is not prop]

    def _fold_ready(self, w: str) -> None:
        """Deterministic mode: fold each island's verdicts in step order and propose right
        after each fold (so what an island proposes depends on nothing but its verdicts);
        migrate at step epochs, once every island has folded the epoch's steps (an island
        with nothing left to fold or propose does not hold the others back)."""
        k = self.cfg.population.in_flight
        m = self.cfg.migration
        islands = self.islands[w]
        migrating = _trades(m) and len(islands) > 1
        moved = True
        while moved:
            moved = False
            for isl in islands:
                while True:
                    s = self.next_fold[isl]
                    if migrating and s >= (self.epochs.get(w, 0) + 1) * m.interval:
                        break
                    if s not in self.buffer[isl]:
                        break
                    prop, verdict = self.buffer[isl].pop(s)
                    record = prop["candidate_id"] not in self.recorded
                    if verdict is not None:  # None: a drafted duplicate, no row
                        self._call(w, "integrate", [(prop, verdict)], record)
                    self.next_fold[isl] += 1
                    self._drop(isl, prop)
                    self._propose(w, isl, k - len(self.in_flight[isl]))
                    moved = True
            if migrating:
                edge = (self.epochs.get(w, 0) + 1) * m.interval
                if all(self.next_fold[i] >= edge or not self.in_flight[i] for i in islands):
                    if any(self.next_fold[i] >= edge for i in islands):
                        self._migrate(w)
                        self.epochs[w] = self.epochs.get(w, 0) + 1
                        moved = True

    def _migrate(self, w: str) -> None:
        m = self.cfg.migration
        if not _trades(m) or len(self.islands[w]) < 2:
            return
        self._call(w, "migrate", m.topology, m.rate)

    def _propose_many(self, w: str, wants: dict[str, int]) -> None:
        if self.stop_reason or w in self.spent_workloads:
            return
        wants = {isl: n for isl, n in wants.items() if n > 0 and isl not in self.stalled}
        if not wants:
            return
        props = self._call(w, "propose_many", wants)
        for i, prop in enumerate(props):
            self.proposed[prop["island"]] += 1
            if not self._admit(w, prop):
                self.unadmitted += props[i + 1 :]
                return

    def _propose(self, w: str, isl: str, n: int) -> None:
        if self.stop_reason or w in self.spent_workloads or isl in self.stalled:
            return
        quota = self.quota.get(isl)
        if quota is not None:
            n = min(n, quota - self.proposed[isl])
        if n <= 0:
            return
        props = self._call(w, "propose", isl, n)
        for i, prop in enumerate(props):
            self.proposed[isl] += 1
            if prop["candidate_id"] in self.recorded:  # replay: the recorded verdict stands
                rec = self.recorded[prop["candidate_id"]]
                if not prop["source"]:  # an LLM request: the recorded draft stands too
                    prop.update(source=rec["source"], source_hash=rec["source_hash"])
                if rec["source_hash"] != prop["source_hash"]:
                    raise EvoError(
                        f"replay diverged at {prop['candidate_id']}: the lineage holds another "
                        "child there (was the run deterministic, with the same config?)"
                    )
                self.in_flight[isl].append(prop)
                self.buffer[isl][prop["step"]] = (prop, verdict_from_row(rec))
                continue
            if not self._admit(w, prop):
                self.unadmitted += props[i + 1 :]
                return

    def _admit(self, w: str, prop: dict) -> bool:
        """Reserve the child's evaluation and queue it; False once a budget says stop (the
        child is then kept in `unadmitted`). A request for an LLM child is drafted first (see
        `_drafted`)."""
        if not prop["source"]:
            self._draft(w, prop)
            return True
        try:
            self.budget.reserve_eval(w)
        except BudgetExceeded as e:
            self.unadmitted.append(prop)
            self._budget_stop(e.kind, w)
            return False
        self._submit(w, prop)
        return True

    def _draft(self, w: str, prop: dict) -> None:
        self.drafter.submit(w, prop)
        self.in_flight[prop["island"]].append(prop)

    def _drafted(self, det: bool, k: int) -> None:
        """Finished drafts: a source is deduplicated, then judged; a failure is recorded as a
        generation_failure; a duplicate gets no row (and, in deterministic mode, its step is
        passed over in order)."""
        done = self.drafter.done()
        if not done:
            return
        batch: dict[str, list] = defaultdict(list)
        fresh: dict[str, list] = defaultdict(list)
        for w, prop, draft in done:
            prop.update(
                source=draft.source or "",
                source_hash=source_hash(draft.source) if draft.source else "",
                model=draft.model,
                llm_call_id=draft.llm_call_id,
                extra={
                    **{k: v for k, v in prop["extra"].items() if k != "request"},
                    "description": f"{draft.operator} by {draft.model}",
                },
            )
            if draft.ok:
                fresh[w].append(prop)
                continue
            if draft.reason.startswith("reply unusable"):  # not a provider outage
                self._fruitless(prop["island"], draft.reason)
            self.progress.statuses["generation_failure"] += 1
            batch[w].append((prop, failed_verdict("generation_failure", draft.reason, prop)))
            if draft.reason.startswith("budget: "):  # the model may not be asked again
                self._budget_stop(draft.reason.split(":")[1].strip() or "llm_dollars")
        for w, props in fresh.items():
            dups = self._call(w, "seen_many", [(p["island"], p["source_hash"]) for p in props])
            refused = False  # once a budget refuses one, the rest wait for a resume too
            for prop, dup in zip(props, dups, strict=True):
                if dup:
                    self._fruitless(prop["island"], "a duplicate of a candidate it holds")
                    batch[w].append((prop, None))
                    continue
                self._drop(prop["island"], prop)  # in flight again once submitted
                if refused:
                    self.unadmitted.append(prop)
                    continue
                self.streak[prop["island"]] = 0
                refused = not self._admit(w, prop)
        self._fold_batch(batch, det, k)  # failures and duplicates land like verdicts

    def _fruitless(self, island: str, why: str) -> None:
        """A draft that gives nothing to judge (a duplicate, a reply without usable code). Such
        drafts cost no evaluation, so an island whose model keeps repeating itself (or never
        answers with code) would ask again for ever: after STALL_LIMIT in a row it proposes no
        more. A failed call (an outage) does not count; nor does anything in deterministic
        mode, where each island's proposals are bounded by its quota."""
        if self.cfg.deterministic:  # bounded by the islands' quotas, and kept in step order
            return
        self.streak[island] += 1
        if self.streak[island] >= STALL_LIMIT and island not in self.stalled:
            self.stalled.add(island)
            self._event("stalled", island, {"drafts": self.streak[island], "last": why[:300]})

    def _submit(self, w: str, prop: dict) -> None:
        req = {
            "source": prop["source"],
            "workload": w,
            "backend": prop["backend"],
            "precision": self.cfg.fitness.precision,
            "kernelbench_root": self.cfg.kernelbench.root if self.cfg.kernelbench else None,
            "options": self._eval_options(),
            "shapes": self._extra_shapes.get(w, []),
            "guardrails": {"allow_library_gemm": self.cfg.guardrails.allow_library_gemm},
        }
        self.outbox.append((w, prop, req))
        self.in_flight[prop["island"]].append(prop)

    def _send(self) -> None:
        """The proposals made since the last call, to the workers in one call each."""
        if not self.outbox:
            return
        out, self.outbox = self.outbox, []
        for ref, k, handle, positions in self.pool.submit([req for _, _, req in out]):
            self.pending[ref] = ([out[p][:2] for p in positions], (k, handle))

    def _eval_options(self) -> dict:
        f = self.cfg.fitness
        opts = {"timeout": f.timeout}
        if f.samples:
            opts["samples"] = f.samples
        return opts

    def _account(self, verdict: dict) -> None:
        self.progress.evaluated += 1
        self.progress.statuses[verdict.get("status", "?")] += 1
        secs = float(verdict.get("eval_seconds") or 0.0)
        self.progress.busy_s += secs
        if self.pool.gpu:
            self.budget.add_gpu_seconds(secs)
        kind = self.budget.exhausted()
        if kind:
            self._budget_stop(kind)

    def _budget_stop(self, kind: str, workload: str = "") -> None:
        """A spent budget stops the run, except a workload's own cap, which stops only it."""
        if kind == "per_workload_max_evals":
            if workload not in self.spent_workloads:
                self.spent_workloads.add(workload)
                self._event("budget_stop", "", {"kind": kind, "workload": workload})
            return
        if self.stop_reason:
            return
        self.stop_reason = f"budget: {kind}"
        self._event("budget_stop", "", {"kind": kind, **self.budget.snapshot()})

    # -- checkpoints and the end
    def checkpoint(self) -> int:
        states = [self._call(w, "get_state") for w in self.hosts]
        state = checkpoint_state(
            self.rd,
            self.run_id,
            dict(zip(self.hosts, states, strict=True)),
            self.budget.get_state(),
            [p for props in self.in_flight.values() for p in props],
            self.unadmitted,
        )
        n = self.rd.write_checkpoint(state)
        self._event("checkpoint", "", {"number": n, "in_flight": len(state["in_flight"])})
        self.events.flush()
        return n

    def _shutdown(self) -> None:
        """Workers first (they hold the GPUs), then the hosts' last rows, then the hosts."""
        if self.drafter:
            self.drafter.close()
        if self.advisor:
            self.advisor.close()
        for wkr in self.pool.workers:
            try:
                ray.kill(wkr)
            except Exception:  # noqa: BLE001 - already gone
                pass
        try:
            ray.get([h.close.remote() for h in self.hosts.values()])
            self.events.close()
        finally:
            for h in self.hosts.values():
                ray.kill(h)

    def _result(self) -> dict:
        best = {}
        for w in list(self.hosts):
            s = self._call(w, "summary")
            vals = [v for v in s["best"].values() if v is not None]
            best[w] = max(vals) if vals else None
        return {
            "run_id": self.run_id,
            "run_dir": self.rd.uri,
            "stop": self.stop_reason,
            "evaluated": self.progress.evaluated,
            "best": best,
            "statuses": dict(self.progress.statuses),
        }

    def _event(self, kind: str, island: str, detail: dict) -> None:
        self.events.append(
            {
                "run_id": self.run_id,
                "kind": kind,
                "island": island,
                "detail": json.dumps(detail, sort_keys=True, default=str),
                "created_at": datetime.now(UTC),
            }
        )

    def _install_signals(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: self._stop.set())


def _trades(m) -> bool:
    """Whether islands trade at all: migration within a backend, or translation across."""
    return (m.topology != "none" and m.rate > 0) or m.cross_backend


def run_config(cfg: RunConfig, run_dir: str, from_run: str | None = None, quiet: bool = False):
    return Engine(cfg, run_dir, quiet=quiet).run(from_run)


def resume(run_dir: str, max_evals: int | None = None, quiet: bool = False) -> dict:
    rd = RunDir(run_dir)
    if not rd.exists():
        raise EvoError(f"run directory {run_dir} does not exist")
    if not rd.exists("config.yaml"):
        raise EvoError(f"{run_dir}: no config.yaml; is this a run directory?")
    over = {"run_dir": run_dir}
    if max_evals is not None:
        over["budgets.max_evals"] = max_evals
    cfg = load_config_text(rd.read_text("config.yaml"), rd.path("config.yaml"), over)
    return Engine(cfg, run_dir, resume=True, quiet=quiet).run()
