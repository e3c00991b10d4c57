"""Profile capture: a candidate's kernel table and, on CUDA, Nsight Compute metrics.

`capture_profile` runs the candidate in a Python subprocess of its own (a candidate may crash
or hang), built the way the fitness service builds it (`fitness.inputs`), profiles a few
forward calls with torch.profiler, and, where `ncu` is on PATH and the device is CUDA, runs the
same script once more under `ncu --csv`. The result is an `operators.analyst.Profile`.

Left out: source-level (per line) metrics and ncu's section rules; the metrics asked for are
the ones the rule analyst reads (fitness.ncu).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from fitness.isolation import ENV_KEEP, run_bounded
from fitness.ncu import NCU_METRICS, parse_ncu_csv, unsupported_metrics
from fitness.profile import KernelRow, NcuKernel, Profile, Roofline
from fitness.results import EvalResult
from fitness.workloads import Workload, resolve_workload

_REPO_ROOT = Path(__file__).resolve().parents[1]
_MAX_KERNEL_ROWS = 30
_STDERR_TAIL = 3000

_TRITON_KERNEL = re.compile(r"@triton\.jit\b[^\n]*\n(?:\s*@[^\n]*\n)*\s*def\s+(\w+)")
_CUDA_KERNEL = re.compile(
    r"__global__\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?(?:[\w:<>]+\s+)*?void\s+(\w+)"
)


class ProfileError(RuntimeError):
    """Capture failed: the candidate crashed, timed out, or the profiler did.

    The message names what failed and ends with the tail of the child's stderr.
    """


# ---------------------------------------------------------------- capture (parent side)


def kernel_names(source: str) -> list[str]:
    """Names of the kernels a candidate defines: @triton.jit functions, CUDA __global__s."""
    names = _TRITON_KERNEL.findall(source) + _CUDA_KERNEL.findall(source)
    return list(dict.fromkeys(names))


def capture_profile(
    source: str,
    workload: Workload | str,
    device: str,
    ncu: bool | None = None,
    *,
    result: EvalResult | None = None,
    precision: str = "fp32",
    warmup: int = 2,
    calls: int = 3,
    ncu_launches: int = 8,
    timeout_s: float = 300.0,
    env: dict | None = None,
    run_as: str = "",
) -> Profile:
    """Profile `source` (a candidate file's text) on `workload` in a subprocess.

    `workload` is a fitness.workloads.Workload or a name for resolve_workload. With `result`
    (the candidate's EvalResult) the roofline takes the judge's runtime and flops; otherwise
    the child counts the reference Model's flops and times the calls itself. `ncu`: True
    requires Nsight Compute, None uses it where it is on PATH and the device is CUDA.
    `env` is added to the child's environment (e.g. the CUDA build directory the judge
    used, so a CUDA candidate is not built again). `run_as`: a root caller runs the candidate
    as this user, with no network, as the judge does (ncu's counters may then need the
    driver's profiling permission for that user: without it the profile carries a note and
    no ncu metrics). The child's environment holds no secrets either way. Raises
    ProfileError when the candidate crashes or times out.
    """
    if isinstance(workload, str):
        workload = resolve_workload(workload)
    device = "cuda" if device.startswith("cuda") else "cpu"
    own = kernel_names(source)
    with tempfile.TemporaryDirectory(prefix="evo-profile-") as tmp:
        cand = Path(tmp) / "candidate.py"
        cand.write_text(source)
        job = {
            "workload_path": str(workload.path),
            "overrides": dict(workload.overrides),
            "candidate_path": str(cand),
            "device": device,
            "warmup": warmup,
            "calls": calls,
            "count_flops": result is None,
            "out_path": str(Path(tmp) / "profile_out.json"),
            "mode": "torch",
        }
        job["env"] = dict(env or {})
        job["run_as"] = run_as
        _run_child(job, tmp, timeout_s, prefix=[])
        raw = json.loads(_read_own(Path(job["out_path"])))
        profile = _profile_from_child(raw, workload.name, own, result, precision)
        if device == "cuda":
            ncu_bin = shutil.which("ncu")
            if ncu and ncu_bin is None:
                raise ProfileError("ncu was requested but is not on PATH")
            if ncu_bin and ncu is not False:
                profile.ncu, notes = _ncu_capture(ncu_bin, job, tmp, own, ncu_launches, timeout_s)
                profile.notes += notes
        elif ncu:
            profile.notes.append("ncu skipped: the device is not CUDA")
    return profile


def _profile_from_child(
    raw: dict, workload: str, own: list[str], result: EvalResult | None, precision: str
) -> Profile:
    rows = [KernelRow(**r) for r in raw["kernels"]]
    for row in rows:
        row.own = any(name in row.name for name in own)
    if result is not None:
        roofline = Roofline.from_result(result, precision)
    else:
        roofline = Roofline.build(
            raw.get("flops", 0), raw.get("min_bytes", 0), raw["device"], precision, raw["ms"]
        )
    notes = []
    if raw["interpreted"]:
        notes.append("Triton ran under TRITON_INTERPRET: the table lists host ops, not kernels")
    return Profile(
        workload=workload,
        device=raw["device"],
        device_kind=raw["device_kind"],
        calls=raw["calls"],
        kernels=rows,
        roofline=roofline,
        interpreted=raw["interpreted"],
        notes=notes,
    )


def _ncu_capture(
    ncu_bin: str, job: dict, tmp: str, own: list[str], launches: int, timeout_s: float
) -> tuple[list[NcuKernel], list[str]]:
    """Run the job under ncu; metrics this ncu lacks are dropped and the run retried once.

    ncu is optional: its failures become notes on the profile, never an exception.
    """
    job = dict(job, mode="ncu", warmup=1, calls=1)
    metrics = list(NCU_METRICS)
    log = Path(tmp) / "ncu.csv"
    for attempt in range(2):
        log.unlink(missing_ok=True)
        prefix = [ncu_bin, "--csv", "--print-units", "base", "--log-file", str(log)]
        prefix += ["--metrics", ",".join(metrics), "--launch-count", str(launches)]
        if own:
            prefix += ["--kernel-name", "regex:" + "|".join(re.escape(n) for n in own)]
        prefix += ["--target-processes", "all"]
        error = ""
        try:
            stderr = _run_child(job, tmp, timeout_s, prefix=prefix)
        except ProfileError as exc:
            stderr = error = str(exc)
        table = _read_own(log) if log.exists() else ""
        missing = unsupported_metrics(table + "\n" + stderr, metrics)
        if attempt == 0 and missing and len(missing) < len(metrics):
            metrics = [m for m in metrics if m not in missing]
            continue
        kernels = parse_ncu_csv(table)
        notes = (
            [f"ncu lacks {len(missing)} metrics: {', '.join(sorted(missing))}"] if missing else []
        )
        if error and not kernels:
            return [], notes + [f"ncu failed: {error[-400:]}"]
        return kernels, notes + ([] if kernels else ["ncu reported no kernels"])
    return [], ["ncu failed"]


def _run_child(job: dict, tmp: str, timeout_s: float, prefix: list[str]) -> str:
    """Run the child (under `prefix`, e.g. ncu); returns its stderr, raises ProfileError."""
    job_path = Path(tmp) / f"job_{job['mode']}.json"
    _write_own(job_path, json.dumps(job))
    env = {k: v for k, v in os.environ.items() if k in ENV_KEEP or k.startswith("NV")}
    env.update(job.get("env", {}), HOME=tmp, TMPDIR=tmp, TRITON_CACHE_DIR=f"{tmp}/triton")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(_REPO_ROOT), env.get("PYTHONPATH")]))
    cmd = prefix + [sys.executable, "-m", "fitness.profiling", str(job_path)]
    # ncu must run as the user its target runs as: a target that drops privileges under a
    # root ncu loses ncu's injection and hangs (seen on the H100). So ncu itself enters the
    # sandbox, and the child, no longer root, leaves its privileges alone.
    preexec = (lambda: _sandbox(job, Path(tmp))) if prefix else None
    try:
        code, stderr = run_bounded(cmd, tmp, env, timeout_s, preexec)
    except (OSError, subprocess.SubprocessError) as e:  # the sandbox could not be entered
        raise ProfileError(f"could not start the profiling child: {e}") from None
    if code is None:
        raise ProfileError(
            f"profiling timed out after {timeout_s:g} s; stderr tail:\n{_tail(stderr)}"
        )
    if code != 0:
        raise ProfileError(f"profiling child exited with {code}; stderr tail:\n{_tail(stderr)}")
    return stderr


def _write_own(path: Path, text: str) -> None:
    """Write a file afresh in a folder the sandbox user owns: never through a link it left."""
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    with os.fdopen(fd, "w") as f:
        f.write(text)


def _read_own(path: Path) -> str:
    """Read what the child wrote, refusing a link (it could point at a file of root's)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError as e:
        raise ProfileError(f"cannot read {path.name}: {e}") from None
    with os.fdopen(fd, errors="replace") as f:
        return f.read()


def _tail(text: str) -> str:
    return (text or "").strip()[-_STDERR_TAIL:]


# ---------------------------------------------------------------- the child


def _child_main(job_path: str) -> None:
    """Build inputs and model as fitness does, warm up, then profile (or just run, for ncu)."""
    import importlib.util
    import statistics
    import time

    import torch
    from torch.profiler import ProfilerActivity, profile, record_function

    from fitness.inputs import Round, build_model, make_inputs
    from fitness.workloads import import_workload_module

    job = json.loads(Path(job_path).read_text())
    tmp = Path(job_path).parent
    _walls(job, tmp)  # before torch starts any thread: the walls fork
    _warm(job["device"])
    _drop(job, tmp)
    device = job["device"]
    mod = import_workload_module(Path(job["workload_path"]), job["overrides"])
    spec = importlib.util.spec_from_file_location("candidate_module", job["candidate_path"])
    cand = importlib.util.module_from_spec(spec)
    sys.modules["candidate_module"] = cand
    spec.loader.exec_module(cand)
    reference = build_model(mod, mod.Model, device)
    model = build_model(mod, cand.ModelNew, device, state_dict=reference.state_dict())
    inputs = make_inputs(mod, Round(seed=0), device)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    out: dict[str, Any] = {}
    with torch.no_grad():
        if job["count_flops"]:
            from torch.utils.flop_counter import FlopCounterMode

            counter = FlopCounterMode(display=False)
            with counter:
                ref_out = reference(*inputs)
            outs = ref_out if isinstance(ref_out, list | tuple) else [ref_out]
            tensors = list(inputs) + list(outs) + list(reference.parameters())
            out["flops"] = int(counter.get_total_flops())
            out["min_bytes"] = sum(
                t.numel() * t.element_size() for t in tensors if isinstance(t, torch.Tensor)
            )
        del reference
        for _ in range(job["warmup"]):
            model(*inputs)
        sync()
        if job["mode"] == "ncu":
            for _ in range(job["calls"]):
                model(*inputs)
            sync()
            return
        times = []
        for _ in range(job["calls"]):
            t0 = time.perf_counter()
            model(*inputs)
            sync()
            times.append((time.perf_counter() - t0) * 1e3)
        activities = [ProfilerActivity.CPU]
        if device == "cuda":
            activities.append(ProfilerActivity.CUDA)
        with profile(activities=activities) as prof:
            for _ in range(job["calls"]):
                with record_function("evo::forward"):
                    model(*inputs)
            sync()
    out.update(
        kernels=_kernel_table(prof.key_averages(), device),
        device=torch.cuda.get_device_name() if device == "cuda" else "cpu",
        device_kind=device,
        calls=job["calls"],
        ms=statistics.median(times),
        interpreted=os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"),
    )
    Path(job["out_path"]).write_text(json.dumps(out))


def _warm(device: str) -> None:
    """Import (and, on the CPU, run once) what the profile needs before the child drops its
    privileges, as the judge's fork server does: the interpreter's own library may sit where
    the sandbox user cannot read it."""
    import sysconfig  # noqa: F401 - triton and torch import it lazily

    import torch
    from torch.utils.flop_counter import FlopCounterMode

    try:
        import triton  # noqa: F401
        import triton.language  # noqa: F401
    except ImportError:
        pass
    a = torch.ones(4, 4)
    with FlopCounterMode(display=False):
        torch.mm(a, a)
    if device != "cuda":  # on a GPU the profiler's start initialises CUPTI: left to the run
        import warnings

        from torch.profiler import ProfilerActivity, profile

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with profile(activities=[ProfilerActivity.CPU]) as prof:
                torch.mm(a, a)
            prof.key_averages()


def _sandbox(job: dict, tmp: Path) -> None:
    """As root, before any candidate code: the judge's walls, then the sandbox user."""
    _walls(job, tmp)
    _drop(job, tmp)


def _walls(job: dict, tmp: Path) -> None:
    """The judge's OS walls (fitness.containment: a root of its own, private scratch, a PID
    namespace, no network), where a root caller asks for a sandbox user. They fork, so they
    go up before anything starts a thread."""
    if not job.get("run_as") or os.geteuid() != 0:
        return
    from types import SimpleNamespace

    from fitness.containment import contain

    needs = [p for p in (job.get("workload_path"), job.get("candidate_path")) if p]
    # The profile's folder stays the host's: the child writes its results there.
    walls = SimpleNamespace(
        tmpdir=str(tmp), env_extra={"TORCH_EXTENSIONS_DIR": _ext(job)}, private_workdir=False
    )
    contain(walls, needs)
    os.chdir(tmp)


def _drop(job: dict, tmp: Path) -> None:
    """Become `run_as` (the judge's sandbox user), owning only the profile's own folder (and
    the CUDA build it reads)."""
    if job.get("run_as") and os.geteuid() == 0:
        _drop_privileges(job["run_as"], [str(tmp), _ext(job)])


def _ext(job: dict) -> str:
    return job.get("env", {}).get("TORCH_EXTENSIONS_DIR", "")


def _drop_privileges(run_as: str, dirs: list[str]) -> None:
    """No network, `dirs` handed to `run_as`, then become that user (a no-op unless root)."""
    if os.geteuid() != 0:
        return
    import pwd

    from fitness.isolation import _chown_tree, _unshare_network

    try:
        user = pwd.getpwnam(run_as)
    except KeyError:
        return
    _unshare_network()
    for root in dirs:
        if root and os.path.isdir(root):
            _chown_tree(root, user.pw_uid, user.pw_gid)
    os.setgroups([])
    os.setgid(user.pw_gid)
    os.setuid(user.pw_uid)


def _kernel_table(events: Any, device: str) -> list[dict]:
    """Rows of key_averages(): device kernels on CUDA, aten ops with self time on the CPU."""
    rows = []
    for e in events:
        if e.key.startswith(("evo::", "ProfilerStep", "[memory]")):
            continue
        is_kernel = "CUDA" in str(getattr(e, "device_type", ""))
        self_dev = float(getattr(e, "self_device_time_total", 0) or 0)
        if device == "cuda" and not is_kernel:
            continue
        own_time = self_dev if device == "cuda" else float(e.self_cpu_time_total)
        rows.append(
            {
                "name": e.key,
                "calls": int(e.count),
                "device_us": round(own_time, 3),
                "self_us": round(own_time, 3),
                "host_us": round(float(e.cpu_time_total), 3),
            }
        )
    rows.sort(key=lambda r: -r["device_us"])
    return rows[:_MAX_KERNEL_ROWS]


if __name__ == "__main__":
    _child_main(sys.argv[1])
