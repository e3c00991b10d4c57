"""The judge: runs one candidate through the correctness and timing protocols and decides.

The verdict is made here, in a process the candidate never ran in. Children send outputs
(sealed memfds) and samples; the judge compares the outputs against references computed in a
separate process, cross-checks the samples against its own wall clock, replays one round with
the candidate's own kernels neutered (fitness.neuter) to see who did the work, reads the walls
the candidate ran in from /proc, and reads the launch trace, which may convict but never
clears a candidate alone.
"""

from __future__ import annotations

import ast
import math
import random
import re
import secrets
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch

from fitness import containment
from fitness.guardrails import GuardrailConfig, check, defines_model_new, strip_comments
from fitness.inputs import Round
from fitness.lockstep import (
    Calibration,
    Ticks,
    TimingRefused,
    check_ticks,
    run_ticks,
    tail_excess_ms,
)
from fitness.neuter import neuter
from fitness.outputs import Verdict, bounds_from_message, compare, meta_problem
from fitness.precision import Precision, tolerance
from fitness.processes import Child, ChildFailed, Message
from fitness.replay import replay
from fitness.results import EvalResult, Status
from fitness.roofline import sol_ms
from fitness.sandbox import Job
from fitness.tolerance import Bound
from fitness.tolerance import check as within_bounds
from fitness.trace import compute_ops, host_reads, own_kernel_ran, own_launches
from fitness.workloads import Workload

DISTRIBUTIONS = ("workload", "normal", "workload", "heavy", "workload")
# A phase (all its messages together) may take this many times the per-message timeout.
PHASE_BUDGET = 2.0
# GPU cycles of the calibration's device waits: about 1 and 4 ms on an H100 (1.98 GHz).
CALIBRATION_SPINS = (2_000_000, 8_000_000)


@dataclass(frozen=True)
class EvalOptions:
    """How one evaluation runs. None means the device's default (GPU vs interpreter)."""

    backend: str = "triton"
    device: str = "auto"
    precision: Precision = Precision.FP32
    rounds: int = 5
    samples: int | None = None  # 100 on a GPU, 3 on the interpreter
    warmup: int | None = None
    rechecks: int | None = None
    timeout: float = 180.0  # seconds per phase; the load phase gets max(timeout, build_timeout)
    build_timeout: float = 900.0
    memory_limit_gb: float = 16.0
    guardrails: GuardrailConfig = field(default_factory=GuardrailConfig)
    atol: float | None = None
    rtol: float | None = None
    audit_bound: float = 10.0
    timing: bool = True
    baselines: bool = True
    compile_baseline: bool | None = None  # None: on a GPU only (a CPU compile costs minutes)
    check_trace: bool = True
    replay: bool = True  # the neutered replay (fitness.neuter) of a candidate found correct
    seed: int | None = None  # None: secret, fresh per evaluation
    extension_dir: str | None = None  # CUDA builds, shared between runs (keyed by source)
    cuda_arch: str | None = None  # TORCH_CUDA_ARCH_LIST of those builds; None: this GPU's
    sandbox_user: str = "nobody"  # a root judge runs candidate code as this user ("" = off)
    # Called with the name of each phase as it starts (the CLI prints them); not part of a key.
    progress: Callable[[str], None] | None = field(default=None, compare=False, repr=False)

    def resolved(self) -> EvalOptions:
        device = resolve_device(self.device)
        gpu = device == "cuda"
        return replace(
            self,
            device=device,
            samples=self.samples or (100 if gpu else 3),
            warmup=self.warmup if self.warmup is not None else (5 if gpu else 1),
            rechecks=self.rechecks if self.rechecks is not None else (3 if gpu else 1),
            compile_baseline=gpu if self.compile_baseline is None else self.compile_baseline,
        )


def resolve_device(device: str) -> str:
    """'auto' becomes cuda where a GPU is visible, else cpu (the Triton interpreter)."""
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        from fitness.errors import EvoError

        raise EvoError("--device cuda was asked for, but no CUDA device is visible")
    return device


def workload_for_device(workload: Workload, device: str) -> Workload:
    """On the CPU interpreter a workload with SHAPES runs its first (small) shape."""
    if device == "cpu" and workload.shapes and not workload.overrides:
        return workload.with_overrides(dict(workload.shapes[0]))
    return workload


def normalize_source(source: str) -> str:
    """Comments, trailing spaces and blank lines removed: the text that `source_hash` keys.

    A line with a `#` and no quote is cut at the `#` (inside a multi-line string that cuts
    string text, which only makes two such sources the same key); a line with both sends the
    whole source through the tokenizer, which is exact but ~50x slower (the engine hashes
    every child it proposes)."""
    lines = []
    for ln in source.splitlines():
        if "#" in ln:
            if "'" in ln or '"' in ln:
                lines = [x.rstrip() for x in strip_comments(source).splitlines()]
                return "\n".join(x for x in lines if x)
            ln = ln[: ln.index("#")]
        ln = ln.rstrip()
        if ln:
            lines.append(ln)
    return "\n".join(lines)


def source_hash(source: str) -> str:
    import hashlib

    return hashlib.sha256(normalize_source(source).encode()).hexdigest()[:16]


def kernel_names(source: str, backend: str) -> set[str]:
    """Names of the candidate's own kernels: @triton.jit functions or __global__ functions."""
    if backend == "cuda":
        bounds = r"(?:__launch_bounds__\([^)]*\)\s*)?"
        return set(re.findall(rf"__global__\s+{bounds}[\w:<>]+\s+{bounds}(\w+)\s*\(", source))
    names = set()
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return names
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef):
            for dec in node.decorator_list:
                target = dec.func if isinstance(dec, ast.Call) else dec
                if isinstance(target, ast.Attribute) and target.attr == "jit":
                    names.add(node.name)
    return names


def evaluate(source: str, workload: Workload, options: EvalOptions | None = None) -> EvalResult:
    """The full verdict for one candidate's source on one workload (baselines included)."""
    opts = (options or EvalOptions()).resolved()
    t0 = time.monotonic()
    res = EvalResult(
        status=Status.CORRECT,
        reason="",
        workload=workload.name,
        backend=opts.backend,
        source_hash=source_hash(source),
        precision=opts.precision.value,
        comparable=opts.device == "cuda",
    )
    try:
        try:
            ast.parse(source)
        except SyntaxError as e:
            reason = f"syntax error at line {e.lineno}: {e.msg}"
            raise Verdict(Status.COMPILE_ERROR, reason, "static") from None
        if not defines_model_new(source):
            raise Verdict(
                Status.GENERATION_FAILURE, "the candidate defines no class ModelNew", "static"
            )
        verdict = check(source, opts.backend, opts.precision, opts.guardrails)
        if not verdict.ok:
            raise Verdict(Status.REJECTED, f"guardrail: {verdict.reason}", "static")
        _Protocol(source, workload, opts, res).run()
    except Verdict as v:
        res.status, res.reason, res.caught_by, res.log = v.status, v.reason, v.caught_by, v.log
    if res.status is Status.CORRECT:
        n = int(res.metrics.get("rounds", 0))
        timed = f"; median {res.runtime_ms:.4g} ms" if res.runtime_ms is not None else ""
        res.reason = f"matches the reference in {n} rounds and "
        res.reason += f"{int(res.metrics.get('rechecks', 0))} re-checks{timed}"
    res.eval_seconds = round(time.monotonic() - t0, 3)
    return res


class _Protocol:
    """One evaluation's children and the order of their phases."""

    def __init__(self, source: str, workload: Workload, opts: EvalOptions, res: EvalResult):
        self.source, self.workload, self.opts, self.res = source, workload, opts, res
        self.phase, self.budget, self.deadline = "", math.inf, math.inf
        # Secret by default: the candidate cannot predict its inputs. A fixed seed is for tests.
        rng = secrets.SystemRandom() if opts.seed is None else random.Random(opts.seed)
        seed = lambda: rng.randrange(1, 2**31)  # noqa: E731
        self.rounds = [
            Round(seed(), DISTRIBUTIONS[i % len(DISTRIBUTIONS)]) for i in range(opts.rounds)
        ]
        self.rounds += [Round(seed(), "workload", s) for s in self._check_shapes()]
        # The candidate with its own kernels neutered, replayed through the same calls
        # (fitness.neuter); None when it defines none, or the options turn the replay off.
        self.neutered = neuter(source, opts.backend) if opts.replay else None
        self.timing_seed = seed()
        # Each timed call gets fresh inputs from its own seed, revealed by its tick. The calls
        # whose outputs are re-checked are drawn one by one (each with the same chance, at least
        # one in all), so seeing some re-checked says nothing about the calls still to come.
        self.tick_seeds = [seed() for _ in range(opts.samples)]
        self.recheck_at = self._pick_rechecks(rng)
        self.rechecks = [Round(self.tick_seeds[i]) for i in self.recheck_at]

    def _pick_rechecks(self, rng) -> list[int]:
        n, want = self.opts.samples, self.opts.rechecks
        if want <= 0 or n < 2:
            return []
        p = min(1.0, want / (n - 1))
        while True:
            picked = [i for i in range(1, n) if rng.random() < p]
            if picked:
                return picked

    def _check_shapes(self) -> list[int]:
        """Extra shapes for one round each: other SHAPES entries that are cheap on this device."""
        shapes = self.workload.shapes
        if not shapes:
            return []
        if self.opts.device == "cuda":
            return [i for i in range(min(2, len(shapes))) if shapes[i] != self.workload.overrides]
        return [1] if len(shapes) > 1 and self.workload.overrides == shapes[0] else []

    def _job(self, role: str, tmp: Path, candidate: str = "candidate.py") -> Job:
        env = {}
        if self.opts.extension_dir and self.opts.backend == "cuda":
            # Each source builds in its own folder: the neutered replay never overwrites the
            # candidate's build (fitness.worker prebuilds both).
            own = (
                self.res.source_hash if candidate == "candidate.py" else source_hash(self.neutered)
            )
            env["TORCH_EXTENSIONS_DIR"] = str(Path(self.opts.extension_dir) / own)
            if self.opts.device == "cuda":  # the flags of the prebuild, or ninja rebuilds it all
                from fitness.compile import device_arch

                env["TORCH_CUDA_ARCH_LIST"] = self.opts.cuda_arch or device_arch()
        # The candidate's child learns each seed only when that round runs (see op_round).
        hide = (lambda rs: [replace(r, seed=0) for r in rs]) if role == "candidate" else list
        return Job.for_workload(
            self.workload,
            role=role,
            device=self.opts.device,
            rounds=hide(self.rounds),
            rechecks=hide(self.rechecks),
            timing_seed=self.timing_seed,
            run_as=self.opts.sandbox_user,
            tmpdir=str(tmp),
            candidate_path=str(tmp / candidate),
            precision=self.opts.precision.value,
            env_extra=env,
        )

    def run(self) -> None:
        opts, res = self.opts, self.res
        tmp = Path(tempfile.mkdtemp(prefix="evo-eval-"))
        (tmp / "candidate.py").write_text(self.source)
        ref_tmp = Path(tempfile.mkdtemp(prefix="evo-ref-"))
        children: list[Child] = []
        try:
            self._phase("start the reference and candidate processes")
            ref = self._start(children, "reference", ref_tmp)
            cand = self._start(children, "candidate", tmp)
            facts = self._expect(cand, "hello", "setup").fields.get("facts") or {}
            self._record_device(facts if isinstance(facts, dict) else {})
            self._phase("reference and inputs")
            cand.send("setup")
            refs, ref_info = self._references(ref)
            ref.kill()
            self._expect(cand, "ready", "setup")
            self._walls(cand)
            keep = [i for i, r in enumerate(self.rounds) if refs[i][0] or r.dist == "workload"]
            calib = self._calibrate(cand) if opts.timing else None
            self._phase("load (build or import the candidate)", budget=self._load_budget())
            cand.send("load")
            self._expect(cand, "loaded", "load", timeout=max(opts.timeout, opts.build_timeout))
            self._phase(f"correctness: {len(keep)} rounds")
            self._correctness(cand, keep, refs)
            ticks = None
            if opts.timing:
                self._phase(f"timing: {opts.samples} samples, {len(self.rechecks)} re-checks")
                ticks = self._timing(cand, refs)
            cand.send("trace")  # a fallback is named as such, before any timing verdict
            self._check_trace(self._expect(cand, "trace", "trace").fields)
            cand.kill()
            if self.neutered:
                budget = self._load_budget() + PHASE_BUDGET * opts.timeout
                self._phase("replay with the candidate's own kernels neutered", budget)
                self._replay(children, keep, refs)
            if ticks is not None:
                self._record_time(ticks, calib)
        except ChildFailed as e:
            status = Status.TIMEOUT if e.kind == "timeout" else Status.RUNTIME_ERROR
            raise Verdict(status, e.reason, "runtime") from None
        except TimingRefused as e:
            raise Verdict(Status.REJECTED, str(e), "judge") from None
        finally:
            for c in children:
                c.kill()
            shutil.rmtree(tmp, ignore_errors=True)
            shutil.rmtree(ref_tmp, ignore_errors=True)
        self._plausibility(ref_info)  # before the baselines: an implausible time needs none
        if opts.timing and opts.baselines:
            from fitness.baselines import attach_baselines

            self._phase("baselines (cached after the first time)")
            attach_baselines(res, self.workload, opts)
            eager = res.speedup_vs_eager
            res.audit = res.comparable and eager is not None and eager > opts.audit_bound

    def _load_budget(self) -> float:
        return max(self.opts.timeout, self.opts.build_timeout) + self.opts.timeout

    def _start(self, children: list[Child], role: str, tmp: Path, name="candidate.py") -> Child:
        child = Child(self._job(role, tmp, name), int(self.opts.memory_limit_gb * 2**30))
        children.append(child)
        return child

    def _walls(self, cand: Child) -> None:
        """Record the walls the candidate's process is in, read from /proc before any of its
        code is loaded; with EVO_REQUIRE_SANDBOX=1 a missing one is an error."""
        self.res.isolation = cand.isolation()
        containment.require(self.res.isolation, "candidate's process")

    def _replay(self, children: list[Child], keep: list[int], refs) -> None:
        matched = replay(self, children, keep, refs)
        self.res.metrics["replay_matched"] = float(len(matched))
        if matched:
            raise Verdict(
                Status.REJECTED,
                "falls back: with its own kernels neutered, a replay in a fresh process still "
                f"matches the reference ({', '.join(matched[:3])}): the work is done elsewhere",
                "judge",
            )

    def _phase(self, name: str, budget: float | None = None) -> None:
        """A new phase, with a budget for all of it (by default PHASE_BUDGET x the timeout):
        a child that answers each message just in time cannot stall the judge for long."""
        self.phase, self.budget = name, budget or PHASE_BUDGET * self.opts.timeout
        self.deadline = time.monotonic() + self.budget
        if self.opts.progress is not None:
            self.opts.progress(name)

    def _expect(self, child: Child, kind: str, phase: str, timeout: float | None = None) -> Message:
        limit = timeout or self.opts.timeout
        wait = min(limit, max(self.deadline - time.monotonic(), 0.0))
        try:
            msg = child.recv(phase, wait)
        except ChildFailed as e:
            if e.kind == "timeout" and wait < limit:
                raise ChildFailed(
                    "timeout",
                    f"the phase '{self.phase}' ran out of its {self.budget:g} s "
                    f"(waiting in {phase})",
                ) from None
            raise
        return self._expected(msg, kind, phase)

    def _expected(self, msg: Message, kind: str, phase: str) -> Message:
        if msg.kind != kind or kind not in ("output", "reference"):
            msg.close()  # descriptors only outputs carry: any other is closed at once
        if msg.kind == kind:
            return msg
        if msg.kind in ("error", "compile_error"):
            err = str(msg.fields.get("error", ""))[:400]
            at = str(msg.fields.get("phase", phase))[:40]
            # Loading is importing (and for CUDA, building): its failures are compile errors.
            compiled = msg.kind == "compile_error" or at == "load"
            status = Status.COMPILE_ERROR if compiled else Status.RUNTIME_ERROR
            if "out of memory" in err.lower():
                err = f"out of memory: {err}"
            log = str(msg.fields.get("log", ""))[-8000:]
            raise Verdict(status, f"{at}: {err}", "runtime", log)
        raise Verdict(
            Status.RUNTIME_ERROR, f"unexpected message {msg.kind!r} in phase {phase}", "judge"
        )

    def _references(self, ref: Child):
        self._expect(ref, "hello", "reference")
        n = len(self.rounds) + len(self.rechecks)
        refs, info = [], {}
        for _ in range(n):
            try:
                msg = self._expect(ref, "reference", "reference")
                tensors = ref.tensors(msg)
            except (Verdict, ChildFailed) as v:
                raise Verdict(
                    Status.RUNTIME_ERROR,
                    f"the reference Model failed: {v.reason}",
                    "reference",
                    getattr(v, "log", ""),
                ) from None
            refs.append(
                (
                    msg.fields["finite"],
                    bounds_from_message(msg.fields, tensors),
                    msg.fields["trivial"],
                )
            )
            if "flops" in msg.fields:
                info = {"flops": msg.fields["flops"], "min_bytes": msg.fields["min_bytes"]}
        return refs, info

    def _calibrate(self, cand: Child) -> Calibration:
        """The timed loop around a no-op, before any candidate code is loaded; on a GPU also
        around device waits of about 1 and 4 ms (see Calibration)."""

        def seeds(n: int) -> list[int]:  # not the timed ones
            return [secrets.randbelow(2**31 - 1) + 1 for _ in range(n)]

        base = run_ticks(cand, seeds(len(self.tick_seeds)), self._expect, noop=True)
        levels = []
        if self.opts.device == "cuda":
            for cycles in CALIBRATION_SPINS:
                levels.append(run_ticks(cand, seeds(20), self._expect, noop=True, spin=cycles))
        return Calibration(base, levels)

    def _check_output(
        self, child: Child, msg: Message, bounds: list[Bound], what: str, record: bool = True
    ) -> None:
        """Compare a message's outputs with the reference's bounds (fitness.tolerance; a fixed
        atol/rtol where the options set one). The judge reads them at the shape and dtype it
        expects; the child's own account of them only words the reason. The errors are
        recorded unless `record` is False (the neutered replay's are not the candidate's).
        Raises a MISMATCH verdict where they differ."""
        problem = msg.fields.get("problem")
        if problem:
            msg.close()
            raise Verdict(Status.MISMATCH, f"{what}: {str(problem)[:300]}", "judge")
        expected = [(b.dtype, list(b.center.shape)) for b in bounds]
        wrong = meta_problem(msg.metas, expected)
        if wrong:
            msg.close()
            raise Verdict(Status.MISMATCH, f"{what}: {wrong}", "judge")
        with child.frozen():
            outs = child.tensors(msg, expected)
            reason, fraction, max_abs = self._compare(outs, bounds)
        del outs
        if record:
            res = self.res
            res.max_abs_err = max(res.max_abs_err or 0.0, max_abs)
            res.error_fraction = max(res.error_fraction or 0.0, fraction)
        if reason:
            raise Verdict(Status.MISMATCH, f"{what}: {reason}", "judge")

    def _compare(self, outs, bounds: list[Bound]) -> tuple[str, float, float]:
        """(reason, the worst error as a fraction of the allowed, max abs err): the error
        model's bounds, or the fixed rule where the options set atol or rtol."""
        opts = self.opts
        if opts.atol is None and opts.rtol is None:
            notes = sorted({b.fallback for b in bounds if b.fallback})
            if notes:
                self.res.metrics["fixed_tolerance"] = 1.0
                self.res.log = (self.res.log + "\n" + notes[0])[-8000:]
            return within_bounds(outs, bounds)
        centers = [b.center.to(b.dtype) if b.center.dtype != b.dtype else b.center for b in bounds]
        tol = tolerance(opts.precision, centers[0].dtype if centers else torch.float32)
        atol = opts.atol if opts.atol is not None else tol
        rtol = opts.rtol if opts.rtol is not None else tol
        self.res.atol, self.res.rtol = atol, rtol
        return compare(outs, centers, atol, rtol)

    def _correctness(self, cand: Child, keep: list[int], refs) -> None:
        cand.send("warmup", n=self.opts.warmup)
        self._expect(cand, "warmed", "correct")
        self.res.metrics["rounds"] = len(keep)
        for i in keep:
            cand.send("round", index=i, seed=self.rounds[i].seed)
            msg = self._expect(cand, "output", "correct")
            if msg.fields.get("index") != i:
                raise Verdict(
                    Status.RUNTIME_ERROR, "the candidate's outputs arrived out of order", "judge"
                )
            rnd = self.rounds[i]
            shape = "" if rnd.shape is None else f", shape {rnd.shape}"
            what = f"round {i + 1} ({rnd.dist} inputs{shape})"
            changed = msg.fields.get("inputs_changed")
            self._check_output(cand, msg, refs[i][1], what)
            if changed:
                raise Verdict(Status.MISMATCH, f"{what}: the call modified its inputs", "runtime")

    def _check_trace(self, trace: dict) -> None:
        names = kernel_names(self.source, self.opts.backend)
        own = own_launches(trace, names)
        calls = trace.get("forward_calls")
        self.res.metrics["traced_calls"] = int(calls) if isinstance(calls, int) else 0
        self.res.metrics["kernel_launches"] = int(sum(own.values()))  # Triton kernels only
        if not self.opts.check_trace:
            return
        guard = self.opts.guardrails
        aten = compute_ops(trace.get("aten_ops"), guard.allow_library_gemm)
        if aten and not guard.allow_torch_ops:
            raise Verdict(
                Status.REJECTED,
                f"falls back to PyTorch: aten::{aten[0]} ran inside forward (launch trace)",
                "runtime",
            )
        host = host_reads(trace.get("aten_ops"))
        if host and not guard.allow_torch_ops:
            raise Verdict(
                Status.REJECTED,
                f"computes on the host: aten::{host[0]} read tensor values inside forward "
                "(launch trace)",
                "runtime",
            )
        ran = own_kernel_ran(
            trace, names, own, self.opts.device, self.opts.backend, guard.allow_library_gemm
        )
        if not ran:
            raise Verdict(
                Status.REJECTED, "no kernel of the candidate's own ran (launch trace)", "runtime"
            )

    def _timing(self, cand: Child, refs) -> Ticks:
        at = {it: k for k, it in enumerate(self.recheck_at)}
        noops = [secrets.randbelow(2**31 - 1) + 1 for _ in self.tick_seeds]  # not timed ones
        ticks = run_ticks(cand, self.tick_seeds, self._expect, fetch=at, between=noops)
        for k, msg in enumerate(ticks.rechecks):
            if msg.fields.get("index") != k:
                raise TimingRefused("re-check outputs arrived out of order")
            what = f"re-check of timed call {self.recheck_at[k] + 1}"
            self._check_output(cand, msg, refs[len(self.rounds) + k][1], what)
        self.res.metrics["rechecks"] = len(self.recheck_at)
        return ticks

    def _record_time(self, ticks: Ticks, calib: Calibration) -> None:
        gpu = self.opts.device == "cuda"
        calib.during = ticks.noops
        self.res.metrics["overhead_shift_ms"] = round(calib.shift, 6)
        tail, per_call = check_ticks(ticks, calib, gpu)
        tail = tail if gpu else 0.0
        self.res.metrics["wall_ms_per_call"] = round(per_call, 6)
        # On the interpreter the judge's own clock is the record whenever the child claims less
        # (its timings are never comparable anyway). On a GPU the events are the record, and a
        # claim below 0.8x the judge's clock, less 0.3 ms, is refused (check_ticks).
        # Work that outlived the stream (beyond the judge's noise) counts, as if each sample
        # ended at the device-wide end; a gross case was refused above.
        if gpu:
            self.res.metrics["tail_excess_ms"] = round(tail_excess_ms(ticks, calib), 6)
        self.res.metrics["outliving_ms"] = round(tail, 6)
        self.res.runtime_ms = ticks.median + tail if gpu else max(ticks.median, per_call)
        self.res.runtime_iqr_ms = ticks.iqr
        # Diagnostics only (the child's own figures): the spread, and its host time per call.
        q = (
            statistics.quantiles(ticks.samples, n=10)
            if len(ticks.samples) > 1
            else [ticks.median] * 9
        )
        self.res.metrics["p10_ms"], self.res.metrics["p90_ms"] = round(q[0], 6), round(q[-1], 6)
        hosts = [h for h in ticks.hosts if h == h]
        if hosts:
            self.res.metrics["child_host_ms"] = round(statistics.median(hosts), 6)

    def _record_device(self, facts: dict) -> None:
        self.res.device = facts.get("device", "")
        self.res.versions = {
            k: str(facts[k])
            for k in ("torch", "triton", "cuda", "driver", "python")
            if facts.get(k)
        }

    def _plausibility(self, ref_info: dict) -> None:
        res = self.res
        if res.runtime_ms is None or not ref_info:
            return
        res.metrics["flops"] = float(ref_info["flops"])
        res.metrics["min_bytes"] = float(ref_info["min_bytes"])
        if self.opts.device != "cuda":
            return
        floor = sol_ms(ref_info["flops"], ref_info["min_bytes"], res.device, self.opts.precision)
        if floor is None:
            return
        res.sol_ms = floor
        res.sol_fraction = floor / res.runtime_ms
        if res.runtime_ms < floor:
            raise Verdict(
                Status.REJECTED,
                f"implausible: {res.runtime_ms:.4g} ms is below the speed-of-light floor "
                f"{floor:.4g} ms",
                "judge",
            )
