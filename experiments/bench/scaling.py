"""Fitness-service scaling: the same batch of distinct candidates on 1, 2, 4 FitnessWorkers.

    python -m experiments.bench.scaling [--workers 1 2 4] [--n 48] [--device cuda] [--out F]
                                        [--small]

The workers are the ones `evo run` uses (evo.pool.FitnessPool: one FitnessService actor per
GPU, fed one request per call, least-loaded first), on a Ray cluster (`--address`, or an
embedded one that sees this machine's GPUs). The candidates are real Triton variants of the
builtin seeds (experiments.bench.variants), no two alike, judged with the verdict cache off
(each is compiled and judged from scratch) and without baselines (a run times those once per
workload). Every worker first judges one warm-up candidate outside the timed window.

Reports, per worker count: verdicts, wall time, verdicts per minute, and the efficiency
rate(N) / (N * rate(1)).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter

FAST = {"baselines": False}


def measure(batch: list[tuple[str, str]], warm: list[tuple[str, str]], n: int, device: str) -> dict:
    import ray

    from evo.pool import FitnessPool

    pool = FitnessPool(f"scaling{n}", device, workers=n)
    try:
        info = ray.get([w.info.remote() for w in pool.workers])
        # Warm-up: every worker judges one candidate of its own (fork server, JIT caches).
        ray.get([w.evaluate_many.remote([_req(*warm[k])]) for k, w in enumerate(pool.workers)])
        t0 = time.perf_counter()
        refs = [ref for ref, *_ in pool.submit([_req(w, s) for w, s in batch])]
        verdicts = [v for r in ray.get(refs) for v in r]
        wall = time.perf_counter() - t0
    finally:
        for w in pool.workers:
            ray.kill(w)
    return {
        "workers": n,
        "verdicts": len(verdicts),
        "wall_s": round(wall, 2),
        "per_min": round(60 * len(verdicts) / wall, 2),
        "statuses": dict(Counter(v["status"] for v in verdicts)),
        "placement": [i.get("cuda_visible_devices", "") for i in info],
    }


SMALL: dict[str, dict] = {}  # --small: workload -> its first SHAPES entry


def _req(workload: str, source: str) -> dict:
    return {
        "source": source,
        "workload": workload,
        "options": FAST,
        "overrides": SMALL.get(workload, {}),
    }


def main(argv: list[str] | None = None) -> list[dict]:
    import ray

    from experiments.bench.variants import candidate_batch

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--n", type=int, default=48, help="timed candidates per worker count")
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument("--address", default=None, help="a Ray cluster (default: an embedded one)")
    ap.add_argument("--out", default="", help="JSON rows, rewritten after each worker count")
    ap.add_argument(
        "--small",
        action="store_true",
        help="judge each workload at its first (small) SHAPES entry: seconds per verdict, so "
        "the fixed per-candidate costs (processes, JIT) dominate",
    )
    args = ap.parse_args(argv)
    most = max(args.workers)
    batch = candidate_batch()
    if len(batch) < args.n + most:
        raise SystemExit(f"only {len(batch)} distinct candidates; ask for --n {len(batch) - most}")
    warm, timed = batch[:most], batch[most : most + args.n]
    if args.small:
        from fitness.workloads import resolve_workload

        for w in {w for w, _ in batch}:
            shapes = resolve_workload(w).shapes
            SMALL[w] = dict(shapes[0]) if shapes else {}
    started = not ray.is_initialized()
    if started:
        ray.init(address=args.address, include_dashboard=False, log_to_driver=False)
    if args.device == "cuda":
        have = int(ray.cluster_resources().get("GPU", 0))
        if have < most:
            raise SystemExit(f"--workers {most} needs {most} GPUs; the cluster has {have}")
    rows = []
    try:
        for n in args.workers:
            row = measure(timed, warm, n, args.device)
            base = rows[0] if rows else row
            row["efficiency"] = round(row["per_min"] / (n / base["workers"] * base["per_min"]), 3)
            rows.append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)
            if args.out:  # what was measured survives a timeout of the next count
                with open(args.out, "w") as f:
                    json.dump(rows, f, indent=2)
    finally:
        if started:
            ray.shutdown()
    print("| workers | verdicts | wall s | verdicts/min | efficiency |")
    print("|---|---|---|---|---|")
    for r in rows:
        cells = [r["workers"], r["verdicts"], r["wall_s"], r["per_min"], r["efficiency"]]
        print("| " + " | ".join(str(c) for c in cells) + " |")
    return rows


if __name__ == "__main__":
    main()
