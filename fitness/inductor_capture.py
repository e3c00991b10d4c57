"""What `torch.compile` writes for a workload: Inductor's output module, captured on the GPU.

`capture_inductor` runs a Python subprocess (compilation may crash or hang, and autotuning
allocates) that builds the reference `Model` and its inputs as the fitness service does,
compiles it with Inductor in each mode asked for, and records, per mode:

- `code`: the generated Python module (Triton kernels as strings, and the `call` wrapper);
- `args`: what each of `call`'s arguments is, a parameter, a buffer or a forward input
  (matched by storage: Dynamo lifts them into graph inputs in an order of its own);
- `kernels`: per Triton kernel, the launch config Inductor's autotuner picked on this GPU
  (found by running the loaded module once), its grid type and its signature;
- `outputs`: how many tensors forward returns (None: one tensor, not a tuple);
- `max_abs_err`: the loaded module's output against eager, a check of the mapping.

A mode that fails records its `error` instead. `fitness.inductor_seed` turns a capture into
candidates. Modes: `default`, and `max-autotune`, which asks Inductor for Triton templates
only (GEMMs and convolutions as Triton, not cuBLAS or cuDNN); it is skipped, as `skipped`,
when the default mode's wrapper already calls nothing but Triton.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

from fitness.errors import EvoError
from fitness.isolation import run_bounded
from fitness.workloads import Workload

MODES = ("default", "max-autotune")
_REPO_ROOT = Path(__file__).resolve().parents[1]


def capture_inductor(
    workload: Workload, modes: tuple[str, ...] = MODES, timeout_s: float = 900.0
) -> dict:
    """{"torch": version, "modes": {mode: capture or {"error": ...}}}; raises EvoError when
    the child itself fails (a crash, a timeout) rather than a mode."""
    bad = [m for m in modes if m not in MODES]
    if bad:
        raise EvoError(f"unknown Inductor mode(s) {bad}; known: {', '.join(MODES)}")
    with tempfile.TemporaryDirectory(prefix="evo-inductor-") as tmp:
        job = {
            "workload_path": str(workload.path),
            "overrides": dict(workload.overrides),
            "modes": list(modes),
            "out_path": str(Path(tmp) / "capture.json"),
        }
        job_path = Path(tmp) / "job.json"
        job_path.write_text(json.dumps(job))
        env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=f"{tmp}/inductor")
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(_REPO_ROOT), env.get("PYTHONPATH")]))
        cmd = [sys.executable, "-m", "fitness.inductor_capture", str(job_path)]
        code, stderr = run_bounded(cmd, tmp, env, timeout_s)
        if code is None:
            raise EvoError(f"torch.compile of {workload.name} took over {timeout_s:g} s")
        out = Path(job["out_path"])
        if code != 0 or not out.exists():
            raise EvoError(
                f"torch.compile of {workload.name} failed (exit {code}): {stderr.strip()[-1500:]}"
            )
        return json.loads(out.read_text())


# ---------------------------------------------------------------- the child


def _child_main(job_path: str) -> None:
    import torch

    from fitness.inputs import Round, build_model, make_inputs
    from fitness.workloads import import_workload_module

    job = json.loads(Path(job_path).read_text())
    mod = import_workload_module(Path(job["workload_path"]), job["overrides"])
    model = build_model(mod, mod.Model, "cuda")  # in the mode the judge runs it (training)
    inputs = make_inputs(mod, Round(seed=0), "cuda")
    with torch.no_grad():
        ref = model(*inputs)
    out: dict = {"torch": torch.__version__, "modes": {}}
    for mode in job["modes"]:
        first = out["modes"].get("default", {})
        if mode == "max-autotune" and "code" in first and not _calls_libraries(first["code"]):
            out["modes"][mode] = {"skipped": "the default mode's code is Triton only"}
            continue
        try:
            out["modes"][mode] = _capture_mode(model, inputs, ref, mode)
        except Exception as e:  # noqa: BLE001 - one mode's failure is that mode's record
            out["modes"][mode] = {"error": f"{type(e).__name__}: {str(e).strip()[:1500]}"}
        torch.cuda.empty_cache()
    Path(job["out_path"]).write_text(json.dumps(out))


def _calls_libraries(code: str) -> bool:
    """Whether Inductor's wrapper calls a library kernel or an ATen fallback."""
    from fitness.inductor_seed import SeedError, library_calls

    try:
        return bool(library_calls(code))
    except SeedError:
        return True


def _capture_mode(model, inputs: list, ref, mode: str) -> dict:
    import time

    import torch
    import torch._inductor.config as ic
    from torch._inductor.compile_fx import compile_fx
    from torch._inductor.utils import run_and_get_code

    graph: dict = {}

    def backend(gm, example_inputs):
        graph["inputs"] = list(example_inputs)
        return compile_fx(gm, example_inputs)

    patch: dict = {"force_disable_caches": True}
    if mode == "max-autotune":
        patch.update(
            max_autotune=True,
            max_autotune_gemm_backends="TRITON",
            max_autotune_conv_backends="TRITON",
            autotune_in_subproc=False,
        )
    torch._dynamo.reset()
    t0 = time.perf_counter()
    with ic.patch(patch), torch.no_grad():
        compiled = torch.compile(model, backend=backend, fullgraph=True)
        _, codes = run_and_get_code(compiled, *inputs)
    seconds = time.perf_counter() - t0
    if len(codes) != 1:
        raise RuntimeError(f"Inductor wrote {len(codes)} modules; a seed needs exactly one")
    args = _arg_roles(graph["inputs"], model, inputs)
    outputs = None if isinstance(ref, torch.Tensor) else len(ref)
    kernels = _run_loaded(codes[0], graph["inputs"])
    module, got = kernels.pop("__module__"), kernels.pop("__output__")
    first = got[0] if outputs is None else got[:outputs]
    want = [ref] if outputs is None else list(ref)
    have = [first] if outputs is None else list(first)
    err = max(float((a - b).abs().max()) for a, b in zip(have, want, strict=True))
    del module
    return {
        "code": codes[0],
        "args": args,
        "outputs": outputs,
        "kernels": kernels,
        "max_abs_err": err,
        "compile_s": round(seconds, 3),
    }


def _arg_roles(graph_inputs: list, model, inputs: list) -> list[dict]:
    """Each graph input as {"param": name}, {"buffer": name} or {"input": i}, by storage."""
    import torch

    roles = []
    named = [("param", n, t) for n, t in model.named_parameters()]
    named += [("buffer", n, t) for n, t in model.named_buffers()]
    for k, g in enumerate(graph_inputs):
        if not isinstance(g, torch.Tensor):
            raise RuntimeError(f"graph input {k} is not a tensor ({type(g).__name__})")
        role = next(
            ({kind: name} for kind, name, t in named if _same(t, g)),
            None,
        ) or next(
            (
                {"input": i}
                for i, x in enumerate(inputs)
                if isinstance(x, torch.Tensor) and _same(x, g)
            ),
            None,
        )
        if role is None:
            raise RuntimeError(f"graph input {k} is neither a parameter, a buffer nor an input")
        roles.append(role)
    return roles


def _same(a, b) -> bool:
    return (
        a.data_ptr() == b.data_ptr()
        and tuple(a.shape) == tuple(b.shape)
        and tuple(a.stride()) == tuple(b.stride())
    )


def _run_loaded(code: str, graph_inputs: list) -> dict:
    """Load the module, run it once (Inductor autotunes on the first call), and read each
    Triton kernel's chosen launch config, grid type and signature."""
    from torch._inductor.codecache import PyCodeCache

    module = PyCodeCache.load(code)
    got = module.call(list(graph_inputs))
    kernels: dict = {"__module__": module, "__output__": got}
    for name, obj in vars(module).items():
        launchers = getattr(obj, "launchers", None)
        if not launchers or not hasattr(obj, "inductor_meta"):
            continue
        cfg = launchers[0].config
        meta = obj.inductor_meta
        kernels[name] = {
            "config": {
                "kwargs": {k: v for k, v in cfg.kwargs.items() if isinstance(v, int)},
                "num_warps": cfg.num_warps,
                "num_stages": cfg.num_stages,
            },
            "grid_type": meta.get("grid_type", ""),
            "fixed_grid": list(meta.get("fixed_grid") or []),
            "signature": {k: str(v) for k, v in obj.triton_meta.get("signature", {}).items()},
            "constants": {
                k: v
                for k, v in obj.triton_meta.get("constants", {}).items()
                if isinstance(k, str) and isinstance(v, int | float | bool)
            },
        }
    return kernels


if __name__ == "__main__":
    _child_main(sys.argv[1])
