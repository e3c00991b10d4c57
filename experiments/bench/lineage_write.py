"""Lineage throughput: candidate rows with ~2 KB sources, written by several island writers.

Usage: python -m experiments.bench.lineage_write [--n 1000000] [--writers 8]
       [--flush-rows 50000] [--chunk 1000] [--run-dir DIR_OR_URI] [--keep]

Rows are appended round-robin in chunks, as islands would, each writer calling `maybe_flush`
after its chunk; the clock covers `append_many`, `maybe_flush` and the final `close` (row
construction is timed apart). Then a fresh process, as a notebook or `evo report` would be,
reads the table back twice: every column but `source`, and every column. Prints one JSON
object; the `_cpu_s` figures are CPU time of the process (all threads), a check on wall
times taken on a shared, loaded machine. Without --run-dir the run lives in a temporary
folder, removed at the end unless --keep.
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
from datetime import UTC, datetime

import pyarrow.compute as pc
import pyarrow.fs as pafs

from evo.lineage import CANDIDATE_SCHEMA, LineageWriter, open_run_dir, read_table

_TEMPLATE = """import torch
import triton
import triton.language as tl


@triton.jit
def {name}_kernel(x_ptr, y_ptr, n_rows, n_cols, stride, BLOCK: tl.constexpr):
    # variant {tag}
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride + cols, mask=mask, other=-float("inf"))
    x = x - tl.max(x, axis=0)
    num = tl.exp(x * {scale})
    den = tl.sum(num, axis=0) + {eps}
    tl.store(y_ptr + row * stride + cols, num / den, mask=mask)


class ModelNew(torch.nn.Module):
    def __init__(self, dim: int = {dim}):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.empty_like(x)
        n_rows, n_cols = x.shape
        block = triton.next_power_of_2(n_cols)
        {name}_kernel[(n_rows,)](
            x, y, n_rows, n_cols, x.stride(0), BLOCK=block, num_warps={warps}, num_stages={stages}
        )
        return y
"""


def make_sources(count: int, rng: random.Random) -> list[str]:
    """Distinct ~2 KB Triton-like sources: one template, varied names, constants, padding."""
    out = []
    for _ in range(count):
        src = _TEMPLATE.format(
            name=f"softmax_{rng.getrandbits(32):08x}",
            tag=f"{rng.getrandbits(128):032x}",
            scale=round(rng.uniform(0.5, 2.0), 6),
            eps=f"{rng.uniform(1e-7, 1e-5):.3e}",
            dim=rng.choice([128, 256, 1024, 4096]),
            warps=rng.choice([1, 2, 4, 8]),
            stages=rng.choice([1, 2, 3, 4]),
        )
        pad = 2048 - len(src)
        if pad > 0:  # a comment block of random words, as mutations leave behind
            words = " ".join(f"{rng.getrandbits(24):06x}" for _ in range(pad // 7))
            src += "\n# " + words[: pad - 3]
        out.append(src)
    return out


def make_rows(start: int, count: int, island: str, sources: list[str], rng: random.Random):
    """`count` candidate rows of one island, with every column kind filled."""
    now = datetime.now(UTC)
    rows = []
    for i in range(start, start + count):
        correct = rng.random() < 0.4
        rt = rng.uniform(0.01, 5.0) if correct else None
        rows.append(
            {
                "run_id": "bench",
                "candidate_id": f"bench/{island}/{i:08d}",
                "source_hash": f"{rng.getrandbits(64):016x}",
                "workload": "builtin:softmax",
                "backend": "triton",
                "island": island,
                "step": i,
                "parent_ids": [f"bench/{island}/{max(i - 1, 0):08d}"],
                "operator": "mutate",
                "model": "offline",
                "llm_call_id": f"call-{i}",
                "source": sources[i % len(sources)],
                "status": "correct" if correct else "mismatch",
                "reason": "ok" if correct else "max_abs_err 3.1e-2 above atol",
                "precision": "fp32",
                "atol": 1e-4,
                "rtol": 1e-4,
                "comparable": True,
                "protocol_version": 3,
                "runtime_ms": rt,
                "runtime_iqr_ms": rt and rt * 0.02,
                "baseline_eager_ms": 1.0,
                "baseline_compile_ms": 0.8,
                "speedup_vs_eager": rt and 1.0 / rt,
                "speedup_vs_compile": rt and 0.8 / rt,
                "sol_ms": 0.005,
                "sol_fraction": rt and 0.005 / rt,
                "audit": False,
                "fitness": rt and 1.0 / rt,
                "metrics": {"code_size": 2048.0},
                "max_abs_err": rng.random() * 1e-5,
                "max_rel_err": rng.random() * 1e-5,
                "device": "NVIDIA H100 80GB HBM3",
                "versions": {"torch": "2.9.0", "triton": "3.6.0"},
                "eval_seconds": rng.uniform(0.5, 3.0),
                "created_at": now,
                "is_migrant": False,
            }
        )
    return rows


def read_figures(run_dir: str, n: int) -> dict:
    """Read the table back without `source` and then whole, timed (wall and CPU)."""
    no_source = [c for c in CANDIDATE_SCHEMA.names if c != "source"]
    t, c = time.perf_counter(), time.process_time()
    slim_rows = read_table(run_dir, "candidates", columns=no_source).num_rows
    slim_s, slim_cpu_s = time.perf_counter() - t, time.process_time() - c
    t, c = time.perf_counter(), time.process_time()
    full = read_table(run_dir, "candidates")
    full_s, full_cpu_s = time.perf_counter() - t, time.process_time() - c
    assert slim_rows == full.num_rows == n, (slim_rows, full.num_rows, n)
    return {
        "source_mb_uncompressed": round(pc.sum(pc.binary_length(full["source"])).as_py() / 1e6),
        "read_without_source_s": round(slim_s, 2),
        "read_without_source_cpu_s": round(slim_cpu_s, 2),
        "read_without_source_rows_per_s": round(n / slim_s),
        "read_with_source_s": round(full_s, 2),
        "read_with_source_cpu_s": round(full_cpu_s, 2),
        "read_with_source_rows_per_s": round(n / full_s),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=1_000_000, help="rows in all")
    ap.add_argument("--writers", type=int, default=8, help="writer ids (islands)")
    ap.add_argument("--flush-rows", type=int, default=50_000)
    ap.add_argument("--chunk", type=int, default=1000, help="rows per append_many")
    ap.add_argument("--run-dir", default="", help="local path or URI (default: a temp dir)")
    ap.add_argument("--keep", action="store_true", help="keep the temporary run directory")
    args = ap.parse_args()
    tmp = "" if args.run_dir else tempfile.mkdtemp(prefix="lineage-bench-")
    run_dir = args.run_dir or tmp
    rng = random.Random(0)
    sources = make_sources(4096, rng)
    islands = [f"island{k}" for k in range(args.writers)]
    writers = [
        LineageWriter(run_dir, "candidates", isl, flush_rows=args.flush_rows, flush_seconds=1e9)
        for isl in islands
    ]
    made = [0] * args.writers
    quota = [args.n // args.writers + (k < args.n % args.writers) for k in range(args.writers)]
    build_s = write_s = write_cpu_s = 0.0
    while any(m < q for m, q in zip(made, quota)):
        for k, w in enumerate(writers):
            count = min(args.chunk, quota[k] - made[k])
            if count <= 0:
                continue
            t = time.perf_counter()
            rows = make_rows(made[k], count, islands[k], sources, rng)
            build_s += time.perf_counter() - t
            t, c = time.perf_counter(), time.process_time()
            w.append_many(rows)
            w.maybe_flush()
            write_s += time.perf_counter() - t
            write_cpu_s += time.process_time() - c
            made[k] += count
    t, c = time.perf_counter(), time.process_time()
    for w in writers:
        w.close()
    write_s += time.perf_counter() - t
    write_cpu_s += time.process_time() - c

    with multiprocessing.get_context("spawn").Pool(1) as pool:
        reads = pool.apply(read_figures, (run_dir, args.n))
    fs, base = open_run_dir(run_dir)
    files = fs.get_file_info(pafs.FileSelector(f"{base}/candidates"))
    parts = [f for f in files if f.base_name.endswith(".parquet")]
    print(
        json.dumps(
            {
                "rows": args.n,
                "writers": args.writers,
                "flush_rows": args.flush_rows,
                "part_files": len(parts),
                "bytes_on_disk_mb": round(sum(f.size for f in parts) / 1e6, 1),
                "row_build_s": round(build_s, 2),
                "append_flush_s": round(write_s, 2),
                "append_flush_cpu_s": round(write_cpu_s, 2),
                "append_rows_per_s": round(args.n / write_s),
                **reads,
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
