"""The fitness service on Ray: one `FitnessWorker` per GPU, fed a stream of candidates.

`FitnessService` is the plain class (usable without Ray); `FitnessWorker` is the same class as
a Ray actor with `num_gpus=1`. Submitted candidates queue in order; CUDA candidates start
building at once in CPU-only children (compile ahead) while the GPU evaluates earlier ones.

On a GPU the judge runs in a process of its own, fed by the service: the judge's clock is the
measurement of record for the wall-clock cross-check, and inside a Ray actor its timed loop
would share the interpreter lock with the actor's threads.
"""

from __future__ import annotations

import itertools
import math
import multiprocessing
import os
import queue
import threading
from concurrent.futures import Future, ProcessPoolExecutor, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field, replace

from fitness import containment
from fitness.cache import JsonCache, default_cache_dir, digest
from fitness.compile import prebuild
from fitness.errors import EvoError
from fitness.guardrails import GuardrailConfig
from fitness.judge import EvalOptions, evaluate, resolve_device, source_hash, workload_for_device
from fitness.neuter import neuter
from fitness.precision import parse_precision
from fitness.results import PROTOCOL_VERSION, EvalResult, Status
from fitness.tolerance import TOLERANCE
from fitness.workloads import Workload, resolve_workload


@dataclass
class EvalRequest:
    """One candidate to judge. `options` overrides EvalOptions fields (samples, timeout, ...)."""

    source: str
    workload: str
    backend: str = "triton"
    precision: str = "fp32"
    overrides: dict = field(default_factory=dict)
    kernelbench_root: str | None = None
    options: dict = field(default_factory=dict)
    guardrails: dict = field(default_factory=dict)
    request_id: str = ""
    # Other shapes (override dicts) to evaluate besides `overrides`, for a geomean fitness:
    # the verdict is the default shape's, with each shape's speedups and their geomeans in
    # `metrics`; the first shape that is not correct gives the verdict instead.
    shapes: list = field(default_factory=list)


def default_extension_dir() -> str:
    """Where CUDA candidates are built: `EVO_EXTENSION_DIR`, else a folder under the system's
    temporary directory. Not under a home directory: a root judge builds and runs candidates as
    an unprivileged user, who cannot enter /root."""
    import tempfile

    path = os.environ.get("EVO_EXTENSION_DIR") or os.path.join(
        tempfile.gettempdir(), f"evokernels-extensions-{os.getuid()}"
    )
    os.makedirs(path, mode=0o755, exist_ok=True)
    return path


@dataclass
class _ProfileJob:
    """A profile to capture, queued with the evaluations so it never runs beside a timed one
    (its future rides as the `build`)."""

    request: dict


class FitnessService:
    """Evaluates a stream of requests on one device, one candidate on the GPU at a time."""

    def __init__(
        self,
        device: str = "auto",
        extension_dir: str | None = None,
        cache: bool = False,
        build_jobs: int = 4,
        cuda_arch: str | None = None,
        judge_process: bool | None = None,
    ):
        self.device = resolve_device(device)
        # None: a judge process of its own on a GPU (see the module's docstring), in-process on
        # the CPU, where the interpreter's timings are never comparable.
        self.judge_process = self.device == "cuda" if judge_process is None else judge_process
        self._judges: ProcessPoolExecutor | None = None
        self.extension_dir = extension_dir or default_extension_dir()
        self.cache = JsonCache(default_cache_dir(), "verdicts") if cache else None
        self.cuda_arch = cuda_arch
        self._builds = ThreadPoolExecutor(max_workers=max(1, build_jobs))
        self._ids = itertools.count()
        self._queue: queue.Queue = queue.Queue()
        self._done: queue.Queue = queue.Queue()
        self._waiters: dict[str, Future] = {}  # evaluate_many's own requests
        self._lock = threading.Lock()
        self._workloads: dict[tuple, Workload] = {}
        self._last_device = ("", {})  # device name and versions, learnt from the first verdict
        self.evaluated = 0
        if containment.required():  # refuse at start, not candidate by candidate
            from fitness.walls import probe

            walls = probe(self.device, EvalOptions.sandbox_user)
            containment.require(walls, f"fitness worker on {self.device}")
        threading.Thread(target=self._loop, name="fitness-gpu", daemon=True).start()

    # -- the stream interface
    def submit(self, request: EvalRequest | dict, waiter: Future | None = None) -> str:
        """Queue a candidate and start its build now; returns its request id. Its verdict goes
        to `waiter` if given, else to the `poll` queue."""
        req = request if isinstance(request, EvalRequest) else EvalRequest(**request)
        if not req.request_id:
            req.request_id = f"r{next(self._ids)}"
        if waiter is not None:
            with self._lock:
                self._waiters[req.request_id] = waiter
        build = None
        if req.backend == "cuda" and self.device == "cuda":
            build = self._builds.submit(
                prebuild, req.source, self.extension_dir, self._arch(), 900.0
            )
            neutered = neuter(req.source, "cuda")  # the judge's replay builds it otherwise
            if neutered and req.options.get("replay", True):
                self._builds.submit(prebuild, neutered, self.extension_dir, self._arch(), 900.0)
        self._queue.put((req, build))
        return req.request_id

    def poll(self, max_items: int | None = None, timeout: float = 0.0) -> list[tuple[str, dict]]:
        """Finished (request id, EvalResult dict) pairs; waits up to `timeout` for the first."""
        out = []
        try:
            out.append(self._done.get(timeout=timeout) if timeout else self._done.get_nowait())
            while max_items is None or len(out) < max_items:
                out.append(self._done.get_nowait())
        except queue.Empty:
            pass
        return out

    def evaluate(self, request: EvalRequest | dict) -> dict:
        """Judge one candidate and wait for it (the queue stays in order)."""
        return self.evaluate_many([request])[0]

    def evaluate_many(self, requests: list) -> list[dict]:
        """Submit all (their builds start at once), then wait for every verdict, in order.

        Safe from several threads at once (a Ray actor with max_concurrency): each caller
        waits on its own requests' futures, never on the shared `poll` queue."""
        futures = [Future() for _ in requests]
        for req, fut in zip(requests, futures, strict=True):
            self.submit(req, fut)
        return [f.result() for f in futures]

    def profile(self, request: dict) -> dict:
        """Profile a judged candidate on this service's device, between two evaluations (so
        it never runs beside a timed one): {"profile": Profile JSON or None, "error": str}.

        `request` holds EvalRequest's source, workload, backend, precision, overrides and
        kernelbench_root, plus `result` (its verdict, for the roofline) and `ncu` (None: use
        Nsight Compute where it is on PATH).
        """
        fut: Future = Future()
        self._queue.put((_ProfileJob(dict(request)), fut))
        return fut.result()

    def compiler_seeds(self, request: dict) -> dict:
        """Seed candidates from torch.compile for a workload, compiled on this service's GPU:
        {"seeds": [Seed dicts], "error": str}.

        `request` holds `workload`, `kernelbench_root`, `overrides` and `modes` (Inductor
        modes, fitness.inductor_capture.MODES by default). Compilation runs in a subprocess
        on the caller's thread, not in the GPU loop, so a few workloads compile at once: call
        it before evaluations start (a run does), since Inductor's autotuning times kernels.
        """
        try:
            return self._compiler_seeds(dict(request))
        except Exception as e:  # noqa: BLE001 - the service must outlive any request
            return {"seeds": None, "error": f"compiler seeds fault: {e!r}"}

    def info(self) -> dict:
        import socket

        return {
            "device": self.device,
            "host": socket.gethostname(),
            "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES", ""),
            "pid": os.getpid(),
            "evaluated": self.evaluated,
        }

    def device_facts(self, precision: str = "fp32") -> dict | None:
        """What a prompt tells the model about this worker's GPU (None on the CPU): name,
        compute capability, SMs, L2 size, and the datasheet peaks for `precision`."""
        if self.device != "cuda":
            return None
        import torch

        from fitness.roofline import peaks_for

        p = torch.cuda.get_device_properties(0)
        peaks = peaks_for(p.name)
        return {
            "name": p.name,
            "compute_capability": f"{p.major}.{p.minor}",
            "sm_count": p.multi_processor_count,
            "l2_bytes": getattr(p, "L2_cache_size", None),
            "peak_flops": peaks.flops(parse_precision(precision)) if peaks else None,
            "peak_bandwidth": peaks.dram if peaks else None,
        }

    # -- the GPU loop
    def _loop(self) -> None:
        while True:
            req, build = self._queue.get()
            if isinstance(req, _ProfileJob):
                try:
                    got = self._profile(req.request)
                except Exception as e:  # noqa: BLE001 - the GPU loop must outlive any request
                    got = {"profile": None, "error": f"profiling fault: {e!r}"}
                build.set_result(got)
                continue
            try:
                res = self._judge_shapes(req, build)
            except EvoError as e:
                res = EvalResult(Status.GENERATION_FAILURE, f"bad request: {e}")
            except Exception as e:  # noqa: BLE001 - the service must outlive any request
                res = EvalResult(Status.RUNTIME_ERROR, f"fitness service fault: {e!r}")
            self.evaluated += 1
            with self._lock:
                waiter = self._waiters.pop(req.request_id, None)
            if waiter is not None:
                waiter.set_result(res.to_dict())
            else:
                self._done.put((req.request_id, res.to_dict()))

    def _judge_shapes(self, req: EvalRequest, build: Future | None) -> EvalResult:
        res = self._judge(req, build)
        if not req.shapes or res.status is not Status.CORRECT:
            return res
        speedups = {"eager": [res.speedup_vs_eager], "compile": [res.speedup_vs_compile]}
        for k, shape in enumerate(req.shapes, 1):
            one = replace(req, overrides={**req.overrides, **shape}, shapes=[])
            sub = self._judge(one, build)
            res.eval_seconds = (res.eval_seconds or 0.0) + (sub.eval_seconds or 0.0)
            if sub.status is not Status.CORRECT:
                sub.reason = f"at shape {shape}: {sub.reason}"
                sub.eval_seconds = res.eval_seconds
                return sub
            for base in ("eager", "compile"):
                value = getattr(sub, f"speedup_vs_{base}")
                speedups[base].append(value)
                if value is not None:
                    res.metrics[f"speedup_vs_{base}@{k}"] = value
        for base, values in speedups.items():
            if values and all(v is not None and v > 0 for v in values):
                geo = math.exp(sum(math.log(v) for v in values) / len(values))
                res.metrics[f"geomean_speedup_vs_{base}"] = geo
        res.metrics["shapes"] = float(len(req.shapes) + 1)
        return res

    def _judge(self, req: EvalRequest, build: Future | None) -> EvalResult:
        workload = self._workload(req)
        opts = EvalOptions(
            backend=req.backend,
            device=self.device,
            precision=parse_precision(req.precision),
            extension_dir=self.extension_dir,
            cuda_arch=self._arch() if req.backend == "cuda" and self.device == "cuda" else None,
            guardrails=GuardrailConfig(**req.guardrails),
        )
        known = {f for f in EvalOptions.__dataclass_fields__}
        bad = set(req.options) - known
        if bad:
            raise EvoError(f"unknown evaluation option(s): {', '.join(sorted(bad))}")
        opts = replace(opts, **req.options)
        key = self._cache_key(req, workload, opts)
        if key and (hit := self.cache.get(key)):
            res = EvalResult.from_dict(hit)
            res.metrics["cache_hit"] = 1.0
            return res
        if build is not None:
            built = build.result()
            if not built.ok:
                return EvalResult(
                    Status.COMPILE_ERROR,
                    f"build: {built.reason}",
                    workload=workload.name,
                    backend=req.backend,
                    source_hash=source_hash(req.source),
                    precision=req.precision,
                    log=built.log,
                    caught_by="runtime",
                )
        res = self._evaluate(req.source, workload, opts)
        if build is not None:
            res.metrics["build_seconds"] = round(build.result().seconds, 3)
        self._last_device = (res.device, res.versions)
        if key is None and self.cache is not None:
            key = self._cache_key(req, workload, opts)
        if key and res.status is not Status.RUNTIME_ERROR and res.status is not Status.TIMEOUT:
            self.cache.put(key, res.to_dict())
        return res

    def _evaluate(self, source: str, workload: Workload, opts: EvalOptions) -> EvalResult:
        if not self.judge_process:
            return evaluate(source, workload, opts)
        if self._judges is None:
            spawn = multiprocessing.get_context("spawn")
            self._judges = ProcessPoolExecutor(max_workers=1, mp_context=spawn)
        try:
            return self._judges.submit(evaluate, source, workload, opts).result()
        except BrokenProcessPool:
            # The next candidate gets a fresh judge; this one's verdict is a fault.
            self._judges.shutdown(wait=False, cancel_futures=True)
            self._judges = None
            return EvalResult(
                Status.RUNTIME_ERROR,
                "fitness service fault: the judge process died",
                workload=workload.name,
                backend=opts.backend,
                source_hash=source_hash(source),
                precision=opts.precision.value,
            )

    def _profile(self, request: dict) -> dict:
        from fitness.profiling import ProfileError, capture_profile

        req = EvalRequest(**{k: v for k, v in request.items() if k not in ("result", "ncu")})
        env = {}
        if req.backend == "cuda" and self.device == "cuda":  # the build the judge made
            from fitness.compile import extension_dir_for

            env["TORCH_EXTENSIONS_DIR"] = str(
                extension_dir_for(self.extension_dir, source_hash(req.source))
            )
            env["TORCH_CUDA_ARCH_LIST"] = self._arch()
        try:
            profile = capture_profile(
                req.source,
                self._workload(req),
                self.device,
                request.get("ncu"),
                result=EvalResult.from_dict(request["result"]) if request.get("result") else None,
                precision=req.precision,
                env=env,
                run_as=EvalOptions.sandbox_user,  # as the judge runs candidates
            )
        except (ProfileError, EvoError) as e:
            return {"profile": None, "error": str(e)}
        except Exception as e:  # noqa: BLE001 - the service must outlive any request
            return {"profile": None, "error": f"profiling fault: {e!r}"}
        return {"profile": profile.to_json(), "error": ""}

    def judge_pid(self) -> int | None:
        """The judge process's pid, once it has judged a candidate (None when in-process)."""
        if self._judges is None:
            return None
        return next(iter(self._judges._processes), None)  # noqa: SLF001 - for tests and ops

    def _cache_key(self, req: EvalRequest, workload: Workload, opts: EvalOptions) -> str | None:
        """Everything that changes the verdict (EVALUATION.md, caches); None until it is known."""
        device, versions = self._last_device
        if self.cache is None or not device:
            return None
        o = opts.resolved()
        return digest(
            source_hash(req.source), workload.source, workload.overrides, req.backend, device,
            versions, o.precision.value, o.atol, o.rtol, TOLERANCE.key(), o.guardrails.key(),
            o.samples, o.rounds, o.timing, o.baselines, o.compile_baseline, o.check_trace,
            PROTOCOL_VERSION,
        )  # fmt: skip

    def _compiler_seeds(self, request: dict) -> dict:
        from fitness.inductor_capture import MODES, capture_inductor
        from fitness.inductor_seed import seeds_from_capture

        if self.device != "cuda":
            return {
                "seeds": None,
                "error": "compiler seeds need a CUDA device: torch.compile "
                "writes Triton for GPU tensors only",
            }
        req = EvalRequest(
            source="",
            workload=request["workload"],
            overrides=dict(request.get("overrides") or {}),
            kernelbench_root=request.get("kernelbench_root"),
        )
        try:
            workload = self._workload(req)
            capture = capture_inductor(workload, tuple(request.get("modes") or MODES))
        except EvoError as e:
            return {"seeds": None, "error": str(e)}
        return {"seeds": [s.to_dict() for s in seeds_from_capture(capture, workload)], "error": ""}

    def _workload(self, req: EvalRequest) -> Workload:
        key = (req.workload, req.kernelbench_root, tuple(sorted(req.overrides.items())))
        if key not in self._workloads:
            w = resolve_workload(req.workload, req.kernelbench_root)
            w = w.with_overrides(req.overrides) if req.overrides else w
            self._workloads[key] = workload_for_device(w, self.device)
        return self._workloads[key]

    def _arch(self) -> str:
        if self.cuda_arch is None:
            from fitness.compile import device_arch

            self.cuda_arch = device_arch()
        return self.cuda_arch


def fitness_worker_class():
    """`FitnessService` as a Ray actor pinned to one GPU (threaded, so `poll` runs alongside)."""
    import ray

    return ray.remote(num_gpus=1, max_concurrency=4)(FitnessService)


def start_workers(n: int | None = None, **kwargs) -> list:
    """One FitnessWorker per GPU in the Ray cluster (or `n`); with no GPU, one CPU worker."""
    import ray

    gpus = int(ray.cluster_resources().get("GPU", 0))
    if gpus == 0:
        cpu_worker = ray.remote(num_cpus=1, max_concurrency=4)(FitnessService)
        return [cpu_worker.remote(device="cpu", **kwargs)]
    cls = fitness_worker_class()
    return [cls.remote(**kwargs) for _ in range(n or gpus)]
