"""Verdicts per minute on one GPU: distinct real Triton candidates, verdict cache off.

Each candidate runs the full protocol (reference, correctness rounds, JIT compile, 100 timed
samples, re-checks) in fresh processes. Baselines are left out: a run times them once per
workload and then reads them from the cache.

Usage: python -m experiments.bench.throughput [--n 36] [--budget-s S] [--out F]

Each verdict is printed to stderr as it lands. With --budget-s, no candidate starts after S
seconds, and the rate is that of the verdicts that finished.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections import Counter

from experiments.bench.variants import candidate_batch
from fitness.worker import EvalRequest, FitnessService

# Baselines are timed once per workload and cached, so a verdict in a run reuses them: leave
# them out here rather than let the first candidate of each workload pay for them.
FAST = {"baselines": False}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=36)
    ap.add_argument("--out", default="")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--budget-s", type=float, default=0.0)
    args = ap.parse_args()
    batch = candidate_batch(args.n)
    service = FitnessService(device=args.device, cache=False)
    # Warm: the fork server, and the baselines of each workload (cached, as in a real run).
    t = time.perf_counter()
    warm = [EvalRequest(source=batch[0][1], workload=batch[0][0], options=FAST)]
    service.evaluate_many(warm)
    warm_s = time.perf_counter() - t
    reqs = [EvalRequest(source=src, workload=w, options=FAST) for w, src in batch]
    t = time.perf_counter()
    results = []
    for k, req in enumerate(reqs):  # one at a time (Triton: nothing to compile ahead)
        if args.budget_s and time.perf_counter() - t > args.budget_s:
            break
        r = service.evaluate_many([req])[0]
        results.append(r)
        el = time.perf_counter() - t
        print(
            f"[{k + 1}/{len(reqs)}] {el:6.1f}s {req.workload} {r['status']} "
            f"{r['eval_seconds']:.1f}s {r['reason'][:80]}",
            file=sys.stderr,
            flush=True,
        )
    wall = time.perf_counter() - t
    statuses = Counter(r["status"] for r in results)
    per = [r["eval_seconds"] for r in results]
    summary = {
        "candidates": len(results),
        "distinct_sources": len({r["source_hash"] for r in results}),
        "wall_s": round(wall, 2),
        "verdicts_per_min": round(len(results) / wall * 60, 2),
        "median_eval_s": round(statistics.median(per), 3),
        "statuses": dict(statuses),
        "warmup_s": round(warm_s, 1),
        "device": results[0]["device"],
        "versions": results[0]["versions"],
    }
    print(json.dumps(summary, indent=1))
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"summary": summary, "results": results}, f)


if __name__ == "__main__":
    main()
