"""Where a CUDA candidate's verdict spends its time: prebuild, then evaluations, per phase.

Builds the named builtin CUDA test candidates in parallel (as the fitness worker does), then
evaluates each once running as `nobody` and once as the judge's own user, printing seconds per
protocol phase. A load phase of tens of seconds means the prebuilt extension was rebuilt.

Usage: python -m experiments.bench.cuda_load row_sum scaled_gelu [--ext DIR]
"""

from __future__ import annotations

import argparse
import time
from collections import defaultdict
from pathlib import Path

from fitness import processes
from fitness.compile import device_arch, prebuild_many
from fitness.judge import EvalOptions, evaluate
from fitness.workloads import resolve_workload

CANDIDATES = Path(__file__).resolve().parents[2] / "tests" / "gpu_candidates"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("names", nargs="+", help="builtin workloads with a tests/gpu_candidates file")
    ap.add_argument("--ext", default="/tmp/evo-ext")
    args = ap.parse_args()
    paths = [CANDIDATES / f"builtin_{n}__cuda.py" for n in args.names]
    t = time.perf_counter()
    builds = prebuild_many([p.read_text() for p in paths], args.ext, device_arch(), jobs=8)
    print(f"prebuild of {len(paths)}: {time.perf_counter() - t:.1f} s", flush=True)
    for p, b in zip(paths, builds, strict=True):
        print(f"  {p.name}: ok={b.ok} {b.seconds:.1f} s {b.reason}", flush=True)
    spent: dict[str, float] = defaultdict(float)
    orig = processes.Child.recv

    def timed_recv(self, phase, timeout):
        t0 = time.perf_counter()
        msg = orig(self, phase, timeout)
        spent[f"{phase}:{msg.kind}"] += time.perf_counter() - t0
        return msg

    processes.Child.recv = timed_recv
    for name, path in zip(args.names, paths, strict=True):
        for user in ("nobody", ""):
            spent.clear()
            t = time.perf_counter()
            opts = EvalOptions(
                device="cuda", backend="cuda", extension_dir=args.ext, samples=30,
                baselines=False, sandbox_user=user,
            )  # fmt: skip
            r = evaluate(path.read_text(), resolve_workload(f"builtin:{name}"), opts)
            top = sorted(spent.items(), key=lambda kv: -kv[1])[:6]
            print(
                f"{name} as {user or 'judge user'}: {r.status.value} "
                f"{time.perf_counter() - t:.1f} s, median {r.runtime_ms} ms; "
                + ", ".join(f"{k} {v:.2f} s" for k, v in top),
                flush=True,
            )


if __name__ == "__main__":
    main()
