"""Distinct, real Triton candidates for the builtin workloads: the seeds with other launch configs.

Used by the throughput and scaling benchmarks, which need many candidates that are each
compiled and judged from scratch (no two share a source hash).
"""

from __future__ import annotations

import re

from fitness.judge import source_hash
from fitness.workloads import builtin_names, resolve_workload

MATMUL_GPU_CONFIG = re.compile(
    r"dict\(BLOCK_M=128, BLOCK_N=128, BLOCK_K=32, GROUP_M=8, num_warps=8, num_stages=3\)"
)
MATMUL_CONFIGS = [
    (128, 128, 32, 8, 8, 3),
    (64, 64, 32, 8, 4, 3),
    (128, 64, 32, 8, 4, 3),
    (64, 128, 32, 8, 4, 4),
    (128, 128, 16, 8, 8, 4),
]
WARPS = [None, 2, 4, 8, 16]
BLOCKS = [1024, 512, 2048, 4096, 256]


def variants(name: str, source: str) -> list[str]:
    """The seed and its variants (up to five), each a different launch configuration."""
    out = []
    if MATMUL_GPU_CONFIG.search(source):
        for bm, bn, bk, g, w, s in MATMUL_CONFIGS:
            cfg = (
                f"dict(BLOCK_M={bm}, BLOCK_N={bn}, BLOCK_K={bk}, GROUP_M={g}, "
                f"num_warps={w}, num_stages={s})"
            )
            out.append(MATMUL_GPU_CONFIG.sub(cfg, source))
    elif re.search(r"^BLOCK_SIZE = 1024$", source, re.M):
        out = [
            re.sub(r"^BLOCK_SIZE = 1024$", f"BLOCK_SIZE = {b}", source, flags=re.M) for b in BLOCKS
        ]
    else:
        pattern = re.compile(r"num_warps=(num_warps|_num_warps\(block\))")
        if pattern.search(source):
            out = [source if w is None else pattern.sub(f"num_warps={w}", source) for w in WARPS]
    seen, unique = set(), []
    for v in out or [source]:
        h = source_hash(v)
        if h not in seen:
            seen.add(h)
            unique.append(v)
    return unique


def candidate_batch(limit: int | None = None) -> list[tuple[str, str]]:
    """(workload name, source) pairs over the whole builtin suite, round-robin by workload."""
    per = {
        n: variants(n, resolve_workload(f"builtin:{n}").seed_path.read_text())
        for n in builtin_names()
    }
    batch = []
    for i in range(max(len(v) for v in per.values())):
        for n, vs in per.items():
            if i < len(vs):
                batch.append((f"builtin:{n}", vs[i]))
    return batch[:limit] if limit else batch
