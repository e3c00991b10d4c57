"""The engine's own cost: candidate round trips per second with nothing else to do.

The same island hosts, worker pool, lineage writer and driver loop as `evo run`, with a no-op
operator (a child is its parent plus a unique constant) and a no-op fitness actor (every child
is `correct` at once) plugged in through `Engine(operator=..., worker_cls=...)`. What is left
is proposal, dispatch, the verdict's way back, integration and the Parquet rows.

Usage: python -m experiments.bench.engine_overhead [--n 20000] [--islands 4] [--in-flight 64]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import tempfile
import time

import ray

from evo.config import load_config_dict
from evo.engine import Engine
from evo.lineage import read_table


class NoopOperator:
    """A child is its parent plus a unique constant: distinct sources, no real work."""

    name = "noop"

    def mutate(self, source: str, rng: random.Random, hint: dict | None = None) -> str:
        return f"{source}\n_NOOP_{rng.getrandbits(64):016x} = 0\n"

    def crossover(self, a: str, b: str, rng: random.Random) -> None:
        return None

    def describe(self, before: str, after: str) -> str:
        return "noop"


class NoopFitness:
    """Every child is correct, at once (the fitness worker's place in the pool)."""

    def __init__(self, device: str = "auto"):
        self.device = device

    def evaluate_many(self, requests: list[dict]) -> list[dict]:
        return [self.evaluate(r) for r in requests]

    def evaluate(self, request: dict) -> dict:
        return {"status": "correct", "reason": "noop", "speedup_vs_eager": 1.0,
                "runtime_ms": 1.0, "metrics": {}, "versions": {}, "comparable": False,
                "audit": False, "eval_seconds": 0.0}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=20000)
    ap.add_argument("--islands", type=int, default=4)
    ap.add_argument("--in-flight", type=int, default=64)
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False)
    cfg = load_config_dict(
        {
            "name": "overhead",
            "workloads": ["builtin:scaled_gelu"],
            "population": {"islands": args.islands, "in_flight": args.in_flight, "cap": 64},
            "migration": {"interval": 1000},
            "budgets": {"max_evals": args.n},
            "checkpoint_seconds": 30,
        }
    )
    run_dir = tempfile.mkdtemp(prefix="evo-overhead-")
    eng = Engine(
        cfg, run_dir, quiet=True, operator=NoopOperator(), worker_cls=NoopFitness,
        workers=args.workers,
    )  # fmt: skip
    t = time.perf_counter()
    res = eng.run()
    wall = time.perf_counter() - t
    made = read_table(run_dir, "candidates", columns=["created_at"]).column("created_at")
    rows = len(made)
    stamps = sorted(t.timestamp() for t in made.to_pylist())
    steady = (rows - 1) / (stamps[-1] - stamps[0]) if rows > 1 else 0.0
    out = {
        "candidates": res["evaluated"],
        "rows": rows,
        "wall_s": round(wall, 2),
        "round_trips_per_s": round(res["evaluated"] / wall, 1),  # start-up included
        "steady_round_trips_per_s": round(steady, 1),  # first row to last row
        "islands": args.islands,
        "in_flight_per_island": args.in_flight,
        "fitness_workers": args.workers,
        "cpus": os.cpu_count(),
        "run_dir": run_dir,
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
