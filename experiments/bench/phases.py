"""Where one evaluation spends its time: seconds per protocol phase, as the judge sees them.

Usage: python -m experiments.bench.phases builtin:softmax [--device cuda] [--repeats 2]
"""

from __future__ import annotations

import argparse
import time
from collections import defaultdict

from fitness import processes
from fitness.judge import EvalOptions, evaluate, workload_for_device
from fitness.workloads import resolve_workload


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("workload")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args()
    w = workload_for_device(resolve_workload(args.workload), args.device)
    src = w.seed_path.read_text()
    spent: dict[str, float] = defaultdict(float)
    orig = processes.Child.recv

    def timed_recv(self, phase, timeout):
        t = time.perf_counter()
        msg = orig(self, phase, timeout)
        spent[f"{phase}:{msg.kind}"] += time.perf_counter() - t
        return msg

    processes.Child.recv = timed_recv
    for i in range(args.repeats):
        spent.clear()
        t = time.perf_counter()
        r = evaluate(src, w, EvalOptions(device=args.device, baselines=False))
        total = time.perf_counter() - t
        print(f"run {i}: {r.status.value} {total:.2f} s  median {r.runtime_ms} ms")
        for k, v in sorted(spent.items(), key=lambda kv: -kv[1])[:8]:
            print(f"   {k:24s} {v:7.3f} s")


if __name__ == "__main__":
    main()
