"""Timing noise and agreement with triton.testing.do_bench, for kernels of 1 ms or more.

Noise: the coefficient of variation of our median across 5 evaluations, each in fresh
processes. Agreement: our median over do_bench's median (return_mode="median"), measured in a
fresh process that imports the candidate directly. Usage:
    python -m experiments.bench.timing [--repeats 5] [--out F]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

from fitness.judge import EvalOptions, evaluate
from fitness.workloads import resolve_workload

# (workload, shape overrides): builtin seeds whose default or enlarged shape runs >= 1 ms.
KERNELS = [
    ("builtin:matmul_bias_relu", {}),
    ("builtin:matmul_scale_gelu", {}),
    ("builtin:scaled_gelu", {"ROWS": 16384, "COLS": 32768}),
    ("builtin:rmsnorm", {"ROWS": 131072}),
]

DO_BENCH = r"""
import importlib.util, json, sys, torch, triton
from fitness.workloads import import_workload_module
wl = import_workload_module(__import__("pathlib").Path(sys.argv[1]), json.loads(sys.argv[3]))
spec = importlib.util.spec_from_file_location("cand", sys.argv[2])
cand = importlib.util.module_from_spec(spec); spec.loader.exec_module(cand)
torch.manual_seed(0)
ref = wl.Model(*wl.get_init_inputs()).cuda()
torch.manual_seed(0)
model = cand.ModelNew(*wl.get_init_inputs()).cuda()
model.load_state_dict(ref.state_dict())
x = [t.cuda() if isinstance(t, torch.Tensor) else t for t in wl.get_inputs()]
with torch.no_grad():
    ms = [triton.testing.do_bench(lambda: model(*x), return_mode="median") for _ in range(3)]
print(json.dumps(ms))
"""


def do_bench_ms(workload, seed_path: str, overrides: dict) -> list[float]:
    out = subprocess.run(
        [sys.executable, "-c", DO_BENCH, str(workload.path), seed_path, json.dumps(overrides)],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out", default="")
    ap.add_argument("--only", default="", help="comma-separated workloads of KERNELS to run")
    args = ap.parse_args()
    only = {w for w in args.only.split(",") if w}
    rows = []
    for name, overrides in KERNELS:
        if only and name not in only:
            continue
        w = resolve_workload(name, overrides=overrides or None)
        src = w.seed_path.read_text()
        medians = []
        for _ in range(args.repeats):
            r = evaluate(src, w, EvalOptions(device="cuda", baselines=False))
            assert r.status.value == "correct", r.reason
            medians.append(r.runtime_ms)
        ours = statistics.median(medians)
        cv = statistics.pstdev(medians) / statistics.mean(medians)
        bench = do_bench_ms(w, str(w.seed_path), overrides)
        ref = statistics.median(bench)
        rows.append(
            {
                "workload": name,
                "overrides": overrides,
                "our_medians_ms": medians,
                "cv_percent": round(100 * cv, 3),
                "do_bench_ms": bench,
                "ours_over_do_bench": round(ours / ref, 4),
                "device": r.device,
            }
        )
        print(
            f"{name:28s} ours {ours:8.4f} ms  CV {100 * cv:6.3f}%  "
            f"do_bench {ref:8.4f} ms  ratio {ours / ref:6.4f}",
            flush=True,
        )
        if args.out:  # after every kernel, so a cut-off run keeps what it measured
            with open(args.out, "w") as f:
                json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
