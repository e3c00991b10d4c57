"""Compiling ahead: CUDA extensions built in CPU-only children while the GPU times others.

A build runs the candidate's import (its `load_inline`) in a sandboxed child that sees no GPU,
into a per-candidate extension folder keyed by the source hash; the GPU child later imports
the same source with the same flags (the same TORCH_CUDA_ARCH_LIST: torch's default adds
+PTX, which changes the ninja file and rebuilds everything), and ninja finds the library up to
date.
"""

from __future__ import annotations

import functools
import os
import shutil
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from fitness.processes import Child, ChildFailed
from fitness.sandbox import Job


@dataclass(frozen=True)
class BuildResult:
    ok: bool
    seconds: float
    reason: str = ""
    log: str = ""


@functools.cache
def device_arch() -> str:
    """The TORCH_CUDA_ARCH_LIST that both the build and the GPU child use: this GPU's."""
    if os.environ.get("TORCH_CUDA_ARCH_LIST"):
        return os.environ["TORCH_CUDA_ARCH_LIST"]
    import torch

    major, minor = torch.cuda.get_device_capability()
    return f"{major}.{minor}"


def extension_dir_for(extension_dir: str | Path, source_hash: str) -> Path:
    return Path(extension_dir) / source_hash


def prebuild(
    source: str,
    extension_dir: str | Path,
    arch: str,
    timeout: float = 900.0,
    max_jobs: int = 2,
    run_as: str = "nobody",
) -> BuildResult:
    """Build a CUDA candidate's extension with no GPU visible; never raises for its failures."""
    from fitness.judge import source_hash

    t0 = time.monotonic()
    tmp = Path(tempfile.mkdtemp(prefix="evo-build-"))
    (tmp / "candidate.py").write_text(source)
    ext = extension_dir_for(extension_dir, source_hash(source))
    ext.mkdir(parents=True, exist_ok=True)
    job = Job(
        role="build",
        workload_path="",
        overrides={},
        shapes=[],
        device="cuda",
        rounds=[],
        rechecks=[],
        tmpdir=str(tmp),
        candidate_path=str(tmp / "candidate.py"),
        run_as=run_as,
        env_extra={
            "CUDA_VISIBLE_DEVICES": "",
            "TORCH_EXTENSIONS_DIR": str(ext),
            "TORCH_CUDA_ARCH_LIST": arch,
            "MAX_JOBS": str(max_jobs),
        },
    )
    child = Child(job, 16 << 30)
    try:
        msg = child.recv("build", timeout)
        if msg.kind == "hello":
            msg = child.recv("build", timeout)
        if msg.kind == "built":
            return BuildResult(True, time.monotonic() - t0)
        return BuildResult(
            False,
            time.monotonic() - t0,
            msg.fields.get("error", msg.kind),
            msg.fields.get("log", ""),
        )
    except ChildFailed as e:
        return BuildResult(False, time.monotonic() - t0, e.reason)
    finally:
        child.kill()
        shutil.rmtree(tmp, ignore_errors=True)


def prebuild_many(
    sources: list[str], extension_dir: str | Path, arch: str, jobs: int = 8, timeout: float = 900.0
) -> list[BuildResult]:
    """Build several CUDA candidates in parallel (each with a few ninja jobs)."""
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        futures = [pool.submit(prebuild, s, extension_dir, arch, timeout) for s in sources]
        return [f.result() for f in futures]
