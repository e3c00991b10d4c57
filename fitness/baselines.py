"""Eager and torch.compile baselines, timed by the candidates' protocol and cached on disk."""

from __future__ import annotations

import secrets
import shutil
import tempfile
import time
from pathlib import Path

from fitness.cache import JsonCache, default_cache_dir, digest
from fitness.inputs import Round
from fitness.lockstep import TimingRefused, run_ticks
from fitness.precision import Precision
from fitness.processes import Child, ChildFailed
from fitness.results import PROTOCOL_VERSION, EvalResult
from fitness.sandbox import Job
from fitness.workloads import Workload

# Baselines given the policy's freedom, next to the fp32 ones (EVALUATION.md, Precision).
POLICY_BASELINE = {
    Precision.TF32: "eager_tf32",
    Precision.BF16: "eager_bf16",
    Precision.FP16: "eager_fp16",
}


def baseline_key(workload: Workload, mode: str, opts, versions: dict, device: str) -> str:
    return digest(
        "baseline", workload.source, workload.overrides, mode, device, versions,
        opts.samples, opts.warmup, PROTOCOL_VERSION,
    )  # fmt: skip


def time_baseline(workload: Workload, mode: str, opts) -> dict:
    """Median and IQR of the workload's own Model in `mode`, in a fresh child like a candidate's."""
    tmp = Path(tempfile.mkdtemp(prefix="evo-base-"))
    job = Job.for_workload(
        workload,
        role="candidate",
        device=opts.device,
        rounds=[Round(seed=0)],
        rechecks=[],
        timing_seed=int(time.time_ns() % 2**31),
        tmpdir=str(tmp),
        model=mode,
    )
    child = Child(job, int(opts.memory_limit_gb * 2**30))
    try:
        child.recv("baseline", opts.timeout)
        child.send("setup")
        _expect(child, "ready", opts.timeout)
        child.send("load")
        _expect(child, "loaded", max(opts.timeout, opts.build_timeout))
        child.send("warmup", n=opts.warmup + (3 if mode == "compile" else 0))
        _expect(child, "warmed", max(opts.timeout, opts.build_timeout))
        seeds = [secrets.randbelow(2**31 - 1) + 1 for _ in range(opts.samples)]
        ticks = run_ticks(child, seeds, lambda c, kind, _: _expect(c, kind, opts.timeout))
    finally:
        child.kill()
        shutil.rmtree(tmp, ignore_errors=True)
    return {"ms": ticks.median, "iqr_ms": ticks.iqr, "mode": mode}


def _expect(child: Child, kind: str, timeout: float):
    msg = child.recv("baseline", timeout)
    if msg.kind != kind:
        raise ChildFailed("died", f"baseline: {msg.fields.get('error', msg.kind)}")
    return msg


def cached_baseline(workload: Workload, mode: str, opts, res: EvalResult) -> float | None:
    cache = JsonCache(default_cache_dir(), "baselines")
    key = baseline_key(workload, mode, opts, res.versions, res.device)
    hit = cache.get(key)
    if hit is None:
        try:
            hit = time_baseline(workload, mode, opts)
        except (ChildFailed, TimingRefused) as e:
            res.metrics[f"baseline_{mode}_error"] = 1.0
            res.log += f"\nbaseline {mode} failed: {e}"
            return None
        cache.put(key, hit)
    return hit["ms"]


def attach_baselines(res: EvalResult, workload: Workload, opts) -> None:
    """Fill the baseline and speedup fields of a timed result."""
    if res.runtime_ms is None:
        return
    eager = cached_baseline(workload, "eager", opts, res)
    res.baseline_eager_ms = eager
    if eager:
        res.speedup_vs_eager = eager / res.runtime_ms
    if opts.compile_baseline:
        comp = cached_baseline(workload, "compile", opts, res)
        res.baseline_compile_ms = comp
        if comp:
            res.speedup_vs_compile = comp / res.runtime_ms
    mode = POLICY_BASELINE.get(opts.precision)
    if mode and opts.device == "cuda":
        ms = cached_baseline(workload, mode, opts, res)
        if ms:
            res.metrics[f"baseline_{mode}_ms"] = ms
            res.metrics["speedup_vs_eager_policy"] = ms / res.runtime_ms
