"""Analysis at scale: load a synthetic 1M-candidate run (without `source`) and render its
trajectory plot.

Usage: python -m experiments.bench.analysis_load [--n 1000000] [--workloads 10]
       [--islands 4] [--run-dir DIR] [--keep]

The run is written with the engine's own lineage writer (one writer per workload, as the
island hosts write, flushing every 50,000 rows), with ~2 KB sources, real-looking statuses,
parents within each island and `created_at` advancing. Then a fresh process, as a notebook
would be, times `analysis.load_run(RUN, columns=<every candidate column but source>)` and
`analysis.plot_trajectories(...)` saved as a PNG (Agg). Prints one JSON object; target: load
plus plot in 10 s or less.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import random
import shutil
import tempfile
import time
from datetime import UTC, datetime, timedelta

from evo.lineage import CANDIDATE_SCHEMA, LineageWriter
from experiments.bench.lineage_write import make_sources

_STATUSES = (
    ["correct"] * 55 + ["mismatch"] * 15 + ["compile_error"] * 10 + ["runtime_error"] * 8
    + ["timeout"] * 2 + ["rejected"] * 5 + ["generation_failure"] * 5
)  # fmt: skip


def write_run(run_dir: str, n: int, workloads: int, islands: int, seed: int = 0) -> None:
    """`n` candidate rows over `workloads` x `islands` islands, one writer per workload."""
    rng = random.Random(seed)
    sources = make_sources(2048, rng)
    start = datetime(2026, 11, 22, tzinfo=UTC)
    per_workload = [n // workloads + (k < n % workloads) for k in range(workloads)]
    for k, count in enumerate(per_workload):
        workload = f"builtin:synthetic_{k:02d}"
        eager = rng.uniform(0.2, 3.0)
        writer = LineageWriter(run_dir, "candidates", f"builtin_synthetic_{k:02d}",
                               flush_rows=50_000, flush_seconds=1e9)  # fmt: skip
        quality = [rng.uniform(0.4, 0.9) for _ in range(islands)]
        for i in range(count):
            isl, step = i % islands, i // islands
            island = f"{workload}|triton|{isl}"
            status = "correct" if step == 0 else rng.choice(_STATUSES)
            quality[isl] *= 1.0 + max(0.0, rng.gauss(0.0, 0.002))  # slow drift upwards
            rt = eager / (quality[isl] * rng.uniform(0.8, 1.05)) if status == "correct" else None
            parent = f"bench/{island}/{rng.randrange(max(step, 1)):06d}" if step else None
            writer.append(
                {
                    "run_id": "bench",
                    "candidate_id": f"bench/{island}/{step:06d}",
                    "source_hash": f"{rng.getrandbits(64):016x}",
                    "workload": workload,
                    "backend": "triton",
                    "island": island,
                    "step": step,
                    "parent_ids": [parent] if parent else [],
                    "operator": "seed"
                    if step == 0
                    else rng.choice(["llm_mutate", "llm_crossover"]),
                    "model": "" if step == 0 else "m1",
                    "llm_call_id": "" if step == 0 else f"call-{k}-{i}",
                    "source": sources[i % len(sources)],
                    "status": status,
                    "reason": "ok" if status == "correct" else f"{status}: synthetic",
                    "precision": "fp32",
                    "atol": 1e-4,
                    "rtol": 1e-4,
                    "comparable": True,
                    "protocol_version": 3,
                    "runtime_ms": rt,
                    "runtime_iqr_ms": rt and rt * 0.01,
                    "baseline_eager_ms": eager,
                    "baseline_compile_ms": eager * 0.9,
                    "speedup_vs_eager": rt and eager / rt,
                    "speedup_vs_compile": rt and eager * 0.9 / rt,
                    "sol_ms": eager * 0.2,
                    "sol_fraction": rt and eager * 0.2 / rt,
                    "audit": False,
                    "fitness": rt and eager / rt,
                    "metrics": {"code_size": 2048.0, "rounds": 7.0},
                    "max_abs_err": 1e-6,
                    "max_rel_err": 1e-5,
                    "device": "NVIDIA H100 80GB HBM3",
                    "versions": {"torch": "2.11.0", "triton": "3.6.0"},
                    "eval_seconds": rng.uniform(2.0, 12.0),
                    "created_at": start + timedelta(seconds=0.01 * i),
                    "is_migrant": False,
                }
            )
            writer.maybe_flush()
        writer.close()


def measure(run_dir: str, png: str) -> dict:
    """In a fresh process: load without `source`, then the trajectory plot to a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    t0 = time.perf_counter()
    import analysis

    t1 = time.perf_counter()
    columns = [c for c in CANDIDATE_SCHEMA.names if c != "source"]
    run = analysis.load_run(run_dir, columns=columns)
    t2 = time.perf_counter()
    fig = analysis.plot_trajectories(run.candidates)
    fig.savefig(png, dpi=100)
    t3 = time.perf_counter()
    return {
        "rows": len(run.candidates),
        "import_s": round(t1 - t0, 2),
        "load_s": round(t2 - t1, 2),
        "plot_s": round(t3 - t2, 2),
        "load_and_plot_s": round(t3 - t1, 2),
        "png_bytes": os.path.getsize(png),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--workloads", type=int, default=10)
    ap.add_argument("--islands", type=int, default=4)
    ap.add_argument("--run-dir", default="", help="reuse (or write) this run directory")
    ap.add_argument("--keep", action="store_true", help="keep the temporary run directory")
    args = ap.parse_args()
    tmp = "" if args.run_dir else tempfile.mkdtemp(prefix="analysis-bench-")
    run_dir = args.run_dir or tmp
    t = time.perf_counter()
    if not os.path.isdir(os.path.join(run_dir, "candidates")):
        write_run(run_dir, args.n, args.workloads, args.islands)
    write_s = time.perf_counter() - t
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        figures = pool.apply(measure, (run_dir, os.path.join(run_dir, "trajectory.png")))
    print(
        json.dumps(
            {
                "candidates": args.n,
                "workloads": args.workloads,
                "islands_per_workload": args.islands,
                "write_s": round(write_s, 1),
                **figures,
                "target_s": 10.0,
                "met": figures["load_and_plot_s"] <= 10.0,
                "cpus": os.cpu_count(),
                "load_avg_1min": round(os.getloadavg()[0], 1),
                "run_dir": run_dir if (args.keep or not tmp) else "(removed)",
            },
            indent=2,
        )
    )
    if tmp and not args.keep:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
