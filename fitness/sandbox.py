"""The child side of an evaluation: runs in a process forked for one job, then discarded.

Two roles. A *reference* child imports only the workload: it builds the inputs from the judge's
secret seeds and sends back the reference outputs. A *candidate* child builds the same inputs
from the same seeds, imports the candidate (or builds a baseline), and runs what the judge
asks, one command at a time: setup, calibration ticks, load, warmup, rounds, trace, prepare,
timed ticks. It never holds a reference output and never decides a verdict; everything it
sends is plain JSON and raw bytes that the judge checks.
"""

from __future__ import annotations

import bisect
import contextlib
import dataclasses
import functools
import os
import sys
import traceback
from dataclasses import dataclass, field
from pathlib import Path

import torch
import triton  # noqa: F401  (preloaded by the fork server so a child starts warm)

from fitness import channel
from fitness.inputs import Round, build_model, make_inputs
from fitness.isolation import drop_privileges, isolate
from fitness.precision import Precision
from fitness.timing import Clock, alias, noop
from fitness.tolerance import check, reference_bounds

# Alternating rescales of the timing inputs between timed calls (exact powers-of-two ratios).
# Bound before any candidate is imported: a candidate that patches torch.equal cannot reach it.
_EQUAL = torch.equal
_NO_TORCH_FUNCTION = torch._C.DisableTorchFunction
_NO_DISPATCH_MODES = torch.utils._python_dispatch._disable_current_modes
_MODE_DEPTHS = (torch._C._len_torch_function_stack, torch._C._len_torch_dispatch_stack)
# Exceptions whose type name says the kernel did not build.
COMPILE_ERROR_TYPES = ("CompilationError", "CompileTimeAssertionFailure", "BuildError")
# The profiler range around each forward call: the trace counts aten ops only inside it.
FORWARD_MARK = "evo::forward"


@dataclass
class Job:
    role: str  # "reference" or "candidate"
    workload_path: str
    overrides: dict
    shapes: list  # the workload's SHAPES (check shapes are indexed into it)
    device: str  # "cpu" or "cuda"
    rounds: list[Round]
    rechecks: list[Round]  # the timed calls whose outputs the judge compares (main shape)
    tmpdir: str
    timing_seed: int = 0  # the rotating timing inputs (a candidate gets rounds without seeds)
    candidate_path: str = ""  # role candidate: the file to import
    model: str = "candidate"  # candidate | eager | compile | eager_tf32 | eager_bf16 | eager_fp16
    n_timing_sets: int = 2
    file_size_limit: int = 16 << 30
    run_as: str = ""  # a root judge runs candidate code as this user ("" = as the judge)
    precision: str = "fp32"  # the policy the reference's error bounds follow (fitness.tolerance)
    env_extra: dict = field(default_factory=dict)

    @classmethod
    def for_workload(cls, workload, **fields) -> Job:
        """A job on `workload` (a fitness.workloads.Workload) at its overrides."""
        return cls(
            workload_path=str(workload.path),
            overrides=dict(workload.overrides),
            shapes=[dict(s) for s in workload.shapes],
            **fields,
        )


# ---------------------------------------------------------------- messages (child -> judge)


@contextlib.contextmanager
def harness_ops():
    """The harness's own tensor work (copying outputs and inputs), out of reach of any torch
    function or dispatch mode the candidate left installed: such a mode could otherwise run
    the real work only when the harness touches an output, after the timed call."""
    with _NO_TORCH_FUNCTION(), _NO_DISPATCH_MODES():
        yield


def modes_left() -> str:
    """The problem when a torch function or dispatch mode (a candidate's) is still installed
    after a call, else ''."""
    if any(depth() > 0 for depth in _MODE_DEPTHS):
        return "a torch function or dispatch mode was left installed by the call"
    return ""


def send(sock, kind: str, tensors=(), **fields) -> None:
    """A JSON message; each tensor travels as a sealed memfd (fitness.channel)."""
    fds, metas = [], []
    try:
        with harness_ops():
            for t in tensors:
                fd, meta = channel.export(t)
                fds.append(fd)
                metas.append(meta)
        channel.send(sock, kind, tuple(fds), tensors=metas, **fields)
    finally:
        for fd in fds:
            os.close(fd)


def _marked(model):
    """The candidate's forward inside a profiler range: the trace's aten ops are counted only
    within these ranges (the harness's own ops between calls are not the candidate's)."""
    from torch.profiler import record_function

    def forward(*args):
        with record_function(FORWARD_MARK):
            return model(*args)

    return forward


def flatten_outputs(out) -> tuple[list[torch.Tensor], str]:
    """The model's output as a list of tensors, and a problem description ('' if none)."""
    if problem := modes_left():
        return [], problem
    if isinstance(out, (tuple, list)) and type(out) not in (tuple, list):
        return [], f"output container is {type(out).__qualname__}, not a plain tuple or list"
    items = list(out) if type(out) in (tuple, list) else [out]
    tensors = []
    for x in items:
        if type(x) is not torch.Tensor:  # exact type: subclasses can defer work
            return [], f"output is {type(x).__module__}.{type(x).__qualname__}, not torch.Tensor"
        tensors.append(x)
    return tensors, ""


def device_facts(device: str) -> dict:
    facts = {
        "torch": torch.__version__,
        "triton": getattr(triton, "__version__", "?"),
        "python": sys.version.split()[0],
    }
    if device == "cuda":
        p = torch.cuda.get_device_properties(0)
        facts.update(
            device=p.name,
            sm_count=p.multi_processor_count,
            l2_bytes=int(getattr(p, "L2_cache_size", 50 << 20)),
            memory_bytes=int(p.total_memory),
            capability=f"{p.major}.{p.minor}",
            cuda=torch.version.cuda or "",
            driver=_driver_version(),
        )
    else:
        facts.update(device="cpu (triton interpreter)", l2_bytes=0)
    return facts


def _driver_version() -> str:
    import re

    try:
        text = Path("/proc/driver/nvidia/version").read_text()
    except OSError:
        return ""
    m = re.search(r"Kernel Module[^\d]*(\d+\.\d+(?:\.\d+)?)", text)
    return m.group(1) if m else ""


# ---------------------------------------------------------------- workloads and inputs


def load_workload_module(job: Job, shape: int | None):
    from fitness.workloads import import_workload_module

    overrides = dict(job.overrides)
    if shape is not None:
        overrides.update(job.shapes[shape])
    return import_workload_module(Path(job.workload_path), overrides)


# ---------------------------------------------------------------- the two roles


def child_main(sock, job: Job) -> None:
    """Entry point of a forked child. Reports exceptions as messages; the judge decides."""
    phase = "setup"
    try:
        isolate(job, _needs(job))
        facts = device_facts("cpu" if job.role == "build" else job.device)
        send(sock, "hello", facts=facts)
        if job.role == "reference":
            _reference(sock, job)
            return
        if job.role == "probe":  # the walls a candidate would be in, for the judge to read
            drop_privileges(job)
            send(sock, "ready")
            channel.recv(sock, None)
            return
        if job.role == "build":  # compile ahead: no GPU is visible here
            phase = "load"
            drop_privileges(job)
            import_candidate(job.candidate_path)
            send(sock, "built")
            return
        state = _CandidateState(job, facts)
        while True:
            cmd = channel.recv(sock, None)
            phase = cmd.kind
            getattr(state, "op_" + phase)(sock, cmd.fields)
    except BaseException as e:  # noqa: BLE001 - every failure becomes a message
        name = type(e).__name__
        kind = "compile_error" if any(t in name for t in COMPILE_ERROR_TYPES) else "error"
        text = "".join(traceback.format_exception(e))[-6000:]
        try:
            send(sock, kind, phase=phase, error=f"{name}: {e}"[:400], log=text)
        except (OSError, ValueError):
            pass
    finally:
        sock.close()
        sys.stdout.flush()
        os._exit(0)


def _needs(job: Job) -> list[str]:
    """What the child reads besides Python, its packages and the system: the workload file
    and, for a CUDA build, the toolkit."""
    out = [job.workload_path] if job.workload_path else []
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            out.append(os.environ[var])
    return out


def import_candidate(path: str):
    """Import the candidate file (a CUDA candidate builds its extension here)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("candidate_module", path)
    cand = importlib.util.module_from_spec(spec)
    sys.modules["candidate_module"] = cand
    spec.loader.exec_module(cand)
    if not isinstance(getattr(cand, "ModelNew", None), type):
        raise ImportError("the candidate defines no class ModelNew")
    return cand


def _reference(sock, job: Job) -> None:
    """Reference outputs for every round and recheck; the candidate never runs here."""
    from torch.utils.flop_counter import FlopCounterMode

    # The reference is computed as written, in fp32: cuDNN's default TF32 convolutions would
    # make its own error TF32-sized, and with it the allowed error of every candidate.
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    mods = {}
    models = {}
    for i, rnd in enumerate(list(job.rounds) + list(job.rechecks)):
        if rnd.shape not in mods:
            mods[rnd.shape] = load_workload_module(job, rnd.shape)
            models[rnd.shape] = build_model(mods[rnd.shape], mods[rnd.shape].Model, job.device)
        mod, model = mods[rnd.shape], models[rnd.shape]
        inputs = make_inputs(mod, rnd, job.device)
        counter = FlopCounterMode(display=False) if i == 0 else contextlib.nullcontext()
        with torch.no_grad(), counter:
            out = model(*inputs)
        outs, problem = flatten_outputs(out)
        if problem:
            raise TypeError(f"the reference Model's {problem}")
        extra = {}
        if i == 0:  # the roofline's inputs, from the main shape
            extra = {
                "flops": int(counter.get_total_flops()),
                "min_bytes": _tensor_bytes(inputs)
                + _tensor_bytes(outs)
                + _tensor_bytes(list(model.parameters()) + list(model.buffers())),
            }
        finite = all(bool(torch.isfinite(t).all()) for t in outs if t.is_floating_point())
        bounds = reference_bounds(model, inputs, outs, Precision(job.precision), rnd.seed)
        tensors = [t for b in bounds for t in ([b.center] if b.exact else [b.center, b.allowed])]
        layout = [
            {"dtype": str(b.dtype).removeprefix("torch."), "exact": b.exact, "note": b.fallback}
            for b in bounds
        ]
        trivial = _trivial(inputs, outs, bounds)
        send(sock, "reference", index=i, finite=finite, layout=layout, trivial=trivial,
             tensors=tensors, **extra)  # fmt: skip
        del out, outs, bounds, tensors
    send(sock, "done")


def _trivial(inputs, outs, bounds) -> bool:
    """Whether zeros, or an input as it is, would pass as this round's output: such a round
    cannot tell a kernel that did nothing from one that did the work (the neutered replay)."""
    if check([torch.zeros_like(o) for o in outs], bounds).reason == "":
        return True
    if len(outs) != 1:
        return False
    same = [x for x in inputs if isinstance(x, torch.Tensor) and x.shape == outs[0].shape]
    return any(check([x.to(outs[0].dtype)], bounds).reason == "" for x in same)


def _tensor_bytes(items) -> int:
    return sum(t.numel() * t.element_size() for t in items if isinstance(t, torch.Tensor))


class _CandidateState:
    """What a candidate child holds between the judge's commands."""

    def __init__(self, job: Job, facts: dict):
        self.job = job
        self.facts = facts
        self.clock = Clock(job.device, facts.get("l2_bytes", 0))
        self.mods = {}
        self.weights = {}
        self.models = {}
        self.launches: dict[str, int] = {}
        # The launch trace. On the interpreter it is on for every call, from set-up to the
        # judge's "trace" command, so no call can tell whether it is watched. On a GPU the
        # profiler's device tracing slows the kernels it watches (matmul 0.52 ms against
        # 0.41 ms on an H100), so there only the first warm-up call and the correctness
        # rounds run under it.
        self.trace_all = job.model == "candidate" and not self.clock.cuda
        self.prof = None
        self.traced = (set(), set(), 0)  # aten ops inside forward, kernels, forward calls
        self.last = None  # the last timed call's output, until the judge's next command

    # -- before the candidate is imported: inputs, weights, calibration
    def op_setup(self, sock, cmd) -> None:
        job = self.job
        shapes = {r.shape for r in job.rounds}
        for s in shapes:
            mod = load_workload_module(job, s)
            self.mods[s] = mod
            ref = build_model(mod, mod.Model, "cpu")
            self.weights[s] = {k: v.detach().clone() for k, v in ref.state_dict().items()}
            del ref
        main = self.mods[None]
        self.timing_sets = [
            make_inputs(main, Round(seed=job.timing_seed + k), job.device)
            for k in range(job.n_timing_sets)
        ]
        self.aliases = [[alias(x) for x in args] for args in self.timing_sets]
        self._poison()
        self._install_launch_counter()
        if self.trace_all:
            self.prof = self._profiler()
            self.prof.start()
        if job.model == "candidate":  # the judge reads the walls from /proc after "ready"
            drop_privileges(job)
        send(sock, "ready")

    # -- the candidate (or baseline) enters the process here
    def op_load(self, sock, cmd) -> None:
        job = self.job
        cls = self._model_class()
        for s, mod in self.mods.items():
            self.models[s] = self._wrap(
                build_model(mod, cls, job.device, state_dict=self.weights[s])
            )
        self.weights.clear()
        for mod in self.mods.values():
            sys.modules.pop(mod.__name__, None)
            mod.Model = None  # the reference stays out of the candidate's reach
        send(sock, "loaded")

    def op_warmup(self, sock, cmd) -> None:
        """Warm-up calls on the timing inputs; the first runs under the launch trace."""
        model, sets = self.models[None], self.timing_sets
        for k in range(cmd["n"]):
            args = sets[k % len(sets)]
            if k == 0:
                self._traced_call(model, args)
            else:
                self.clock.call(model, args)
        send(sock, "warmed")

    def op_round(self, sock, cmd) -> None:
        """One correctness round. Its seed arrives only now, so no later round can be foreseen."""
        rnd = dataclasses.replace(self.job.rounds[cmd["index"]], seed=cmd["seed"])
        mod = self.mods[rnd.shape]
        inputs = make_inputs(mod, rnd, self.job.device)
        out = self._traced_call(self.models[rnd.shape], inputs)
        outs, problem = flatten_outputs(out)
        again = make_inputs(mod, rnd, self.job.device)  # drawn as the reference drew them:
        with harness_ops():  # torch.device(...) is itself a torch function mode
            changed = [
                k for k, (a, b) in enumerate(zip(inputs, again))
                if isinstance(a, torch.Tensor) and not _EQUAL(a, b)
            ]  # fmt: skip
        send(
            sock,
            "output",
            index=cmd["index"],
            problem=problem,
            inputs_changed=changed,
            tensors=outs,
        )

    def op_trace(self, sock, cmd) -> None:
        """The launch trace of the traced calls so far (every call on the interpreter)."""
        if self.prof is not None:
            self.prof.stop()
            self._collect(self.prof)
            self.prof = None
        aten, kernels, calls = self.traced
        send(
            sock,
            "trace",
            forward_calls=calls,
            launches=self.launches,
            kernels=sorted(kernels)[:200],
            aten_ops=sorted(aten)[:500],
        )

    def op_tick(self, sock, cmd) -> None:
        """One timed call, when the judge says so, on fresh inputs drawn from the tick's seed.

        Every tick looks the same: the judge picks the calls it re-checks only after they have
        answered (see op_fetch), so no call knows whether its outputs will be compared. No two
        calls see the same values, so a cache keyed by content (exact or approximate) never
        hits. The values are written through aliases, so pointers and version counters stay
        the same: a cache keyed by those hits, and returns stale outputs that a re-check sees.
        The same tick with `noop` (before any candidate code is loaded) calibrates the loop.
        """
        i = cmd["i"]
        sets = self.timing_sets
        self.last = None
        fresh = make_inputs(self.mods[None], Round(seed=cmd["seed"]), self.job.device)
        with harness_ops():  # drawn outside: torch.device(...) is itself a torch function mode
            for dst, src in zip(self.aliases[i % len(sets)], fresh):
                if dst is not None:
                    dst.copy_(src)
            del fresh
        fn = noop if cmd.get("noop") else self.models[None]
        spin = int(cmd.get("spin") or 0)
        if cmd.get("noop") and spin and self.clock.cuda:  # a calibration call of known length
            fn = functools.partial(self.clock.wait, spin)
        with torch.no_grad():
            self.last, ms, tail = self.clock.call(fn, sets[i % len(sets)])
        problem = modes_left()
        send(sock, "tick", i=i, sample=ms, tail=tail, host=self.clock.host_ms, problem=problem)

    def op_fetch(self, sock, cmd) -> None:
        """The outputs of the last timed call, for a re-check the judge chose after it ran."""
        outs, problem = flatten_outputs(self.last)
        send(sock, "output", index=cmd["index"], problem=problem, tensors=outs)

    # -- helpers
    def _profiler(self):
        from torch.profiler import ProfilerActivity, profile

        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if self.clock.cuda else [])
        return profile(activities=acts)

    def _traced_call(self, model, args):
        """A call under the launch trace (already on, on the interpreter)."""
        if self.prof is not None or self.job.model != "candidate":
            with torch.no_grad():
                return self.clock.call(model, args)[0]
        with self._profiler() as prof, torch.no_grad():
            out = self.clock.call(model, args)[0]
        self._collect(prof)
        return out

    def _collect(self, prof) -> None:
        """Add a stopped profiler's aten ops inside forward calls, kernels and forward calls."""
        events = prof.events()
        spans = sorted(
            (ev.time_range.start, ev.time_range.end) for ev in events if ev.name == FORWARD_MARK
        )
        starts = [a for a, _ in spans]
        aten, kernels, calls = self.traced
        for ev in events:
            name = ev.name
            if name.startswith("aten::"):
                k = bisect.bisect_right(starts, ev.time_range.start) - 1
                if k >= 0 and ev.time_range.start <= spans[k][1]:
                    aten.add(name[6:])
            elif getattr(ev, "device_type", None) is not None and "CUDA" in str(ev.device_type):
                kernels.add(name)
        self.traced = (aten, kernels, calls + len(spans))

    def _model_class(self):
        job = self.job
        mod = self.mods[None]
        if job.model != "candidate":
            return mod.Model
        if job.device == "cuda" and "TORCH_CUDA_ARCH_LIST" not in os.environ:
            os.environ["TORCH_CUDA_ARCH_LIST"] = self.facts.get("capability", "")
        return import_candidate(job.candidate_path).ModelNew

    def _wrap(self, model):
        kind = self.job.model
        if kind == "compile":
            return torch.compile(model)
        if kind == "eager_tf32":
            torch.backends.cuda.matmul.allow_tf32 = True
            torch.backends.cudnn.allow_tf32 = True
        if kind in ("eager_bf16", "eager_fp16"):
            dtype = torch.bfloat16 if kind == "eager_bf16" else torch.float16

            def autocast(*args, _m=model, _d=dtype):
                with torch.autocast(self.job.device, dtype=_d):
                    out = _m(*args)
                return out.float() if isinstance(out, torch.Tensor) else out

            return autocast
        if kind == "candidate":
            return _marked(model)
        return model

    def _poison(self) -> None:
        """Fill the allocator's free cached memory with NaN so unwritten outputs cannot pass."""
        if not self.clock.cuda:
            return
        free = torch.cuda.memory_reserved() - torch.cuda.memory_allocated()
        if 0 < free < torch.cuda.get_device_properties(0).total_memory // 4:
            torch.empty(free // 4, dtype=torch.float32, device="cuda").fill_(float("nan"))
        torch.cuda.synchronize()

    def _install_launch_counter(self) -> None:
        """Count launches of @triton.jit kernels by name (the interpreter has no kernel trace)."""
        from triton.runtime.jit import JITFunction

        classes = [JITFunction]
        if self.job.device == "cpu":
            from triton.runtime.interpreter import InterpretedFunction

            classes.append(InterpretedFunction)
        launches = self.launches
        for cls in classes:
            orig = cls.run

            def run(fn_self, *args, _orig=orig, **kwargs):
                name = getattr(getattr(fn_self, "fn", None), "__name__", "?")
                launches[name] = launches.get(name, 0) + 1
                return _orig(fn_self, *args, **kwargs)

            cls.run = run
