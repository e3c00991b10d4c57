"""Compiler seeds for a run (`seed_kernels: inductor`): torch.compile's Triton as first members.

Each workload is compiled once per run on a fitness worker's GPU (the workers share the
work), before any evaluation. The seeds go to RUN/artifacts/seeds/, so a resumed run restarts
its islands from the very same sources; a seed that could not be made is a `seed` event with
its reason. Seeds that call library kernels are kept: the judge records them `rejected`
unless the experiment allows library GEMMs (guardrails.allow_library_gemm).
"""

from __future__ import annotations

import hashlib
import json
import sys
import time
from dataclasses import replace

import ray

from evo.config import RunConfig
from evo.rundir import RunDir
from evo.workset import RunWorkload
from fitness.errors import EvoError

PER_WORKER = 2  # compilations at once on one fitness worker


def seed_path(workload: str, rd: RunDir | None = None) -> str:
    """Where a workload's compiler seeds are kept: its name made a file name, with a hash of
    the name (two paths may flatten alike). With `rd`, an existing file of the older scheme
    (the flat name alone) is found too."""
    flat = workload.replace(":", "_").replace("/", "_")
    path = f"artifacts/seeds/{flat}-{hashlib.sha1(workload.encode()).hexdigest()[:8]}.json"
    legacy = f"artifacts/seeds/{flat}.json"
    return legacy if rd is not None and not rd.exists(path) and rd.exists(legacy) else path


def add_compiler_seeds(
    cfg: RunConfig,
    rd: RunDir,
    workers: list,
    work: list[RunWorkload],
    event,
    quiet: bool,
    resume: bool = False,
) -> list[RunWorkload]:
    """`work` with each workload's Triton seeds extended by its compiler seeds. A backend left
    with no seed and no model to write one is dropped (a `seed` event says so), and so is a
    workload left with no backend; none left at all is an error. A resume compiles nothing:
    its islands restart from the seeds the run began with (a workload whose compilation had
    failed stays without them, as its checkpoint has it)."""
    if cfg.seed_kernels != "inductor" or "triton" not in cfg.backends:
        return work
    if not workers and not resume:
        raise EvoError(
            "seed_kernels: inductor needs a GPU fitness worker: torch.compile "
            "writes Triton for CUDA tensors only"
        )
    todo = []
    for r in work:
        if resume or rd.exists(seed_path(r.name, rd)):
            continue
        if r.has_shapes:
            # Inductor specializes to the one shape it compiled; the judge also checks a
            # workload's SHAPES, where such a seed would read out of bounds.
            why = "compiler seeds hold one shape, and this workload's SHAPES are checked too"
            event("seed", "", {"workload": r.name, "made": False, "reason": why})
            continue
        todo.append(r.name)
    _compile(cfg, rd, workers, todo, event, quiet)
    out = []
    for r in work:
        path = seed_path(r.name, rd)  # none: not compiled, or compilation failed
        record = json.loads(rd.read_text(path)) if rd.exists(path) else {"seeds": []}
        seeds = dict(r.seeds)
        made = [
            {"source": s["source"], "description": _description(s)}
            for s in record.get("seeds") or []
            if s.get("source")
        ]
        seeds["triton"] = [*seeds.get("triton", []), *made]
        if not seeds["triton"] and not cfg.llm.active:
            del seeds["triton"]
            if resume:
                continue
            event(
                "seed",
                "",
                {
                    "workload": r.name,
                    "dropped": "triton",
                    "reason": "no compiler seed, and no model to write one",
                },
            )
        if seeds:
            out.append(replace(r, seeds=seeds))
    if not out:
        raise EvoError("no workload has a seed to start from (see the run's seed events)")
    return out


def _description(seed: dict) -> str:
    text = f"torch.compile (Inductor, mode {seed['mode']})"
    return text + (f"; {seed['reason']}" if seed.get("reason") else "")


def _compile(cfg: RunConfig, rd: RunDir, workers: list, names: list[str], event, quiet) -> None:
    """Compile `names` across the workers (a few at once on each: nothing is timed yet)."""
    if not names:
        return
    kb_root = cfg.kernelbench.root if cfg.kernelbench else None
    queue = list(names)
    pending: dict = {}  # ref -> (name, worker index)
    busy = [0] * len(workers)

    def submit() -> None:  # at most PER_WORKER at once on each: Inductor's autotuner times
        while queue and min(busy) < PER_WORKER:
            k = busy.index(min(busy))
            name = queue.pop(0)
            req = {"workload": name, "kernelbench_root": kb_root}
            pending[workers[k].compiler_seeds.remote(req)] = (name, k)
            busy[k] += 1

    submit()
    t0, done = time.monotonic(), 0
    while pending:
        ready, _ = ray.wait(list(pending), num_returns=1)
        name, k = pending.pop(ready[0])
        busy[k] -= 1
        submit()
        try:
            got = ray.get(ready[0])
        except ray.exceptions.RayError as e:
            got = {"seeds": None, "error": f"the fitness worker failed: {e}"}
        seeds = got.get("seeds") or []
        for s in seeds:
            detail = {"workload": name, "mode": s["mode"], "made": bool(s["source"])}
            if s.get("reason"):
                detail["reason"] = s["reason"]
            event("seed", "", detail)
        if got.get("error"):
            event("seed", "", {"workload": name, "made": False, "reason": got["error"]})
        if seeds or not got.get("error"):  # a failed compilation is not kept (a new run retries)
            rd.write_text(seed_path(name), json.dumps({"workload": name, **got}))
        done += 1
        if not quiet:
            made = sum(1 for s in seeds if s.get("source"))
            print(
                f"evo: compiler seeds {done}/{len(names)} ({time.monotonic() - t0:.0f} s): "
                f"{name}: {made} made" + (f"; {got['error'][:120]}" if got.get("error") else ""),
                file=sys.stderr,
            )
