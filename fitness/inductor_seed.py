"""Seed candidates from `torch.compile`: Inductor's Triton, rewritten into our format.

A capture (`fitness.inductor_capture`) holds the module Inductor generated for a workload and
the launch config its autotuner chose for each kernel on this GPU. `seed_source` turns it into
a candidate that stands on its own:

- the Triton kernels keep Inductor's bodies, lose its autotuning decorators, and are launched
  directly with the chosen config as keyword arguments (`XBLOCK=1024, num_warps=4`), where the
  offline operator can tune them; the grid follows the block sizes (`_grid`);
- a GEMM template's tiles (BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M) become launch parameters too
  when its grid is the usual one; other templates keep theirs fixed;
- Inductor's `call` wrapper becomes `_call`, without its guards, device guard and streams;
- `ModelNew` has the reference Model's constructor (so weights match) and a forward that feeds
  `_call` the parameters and inputs in the graph's order.

Calls of library kernels (`extern_kernels.mm` is cuBLAS) or of ATen fallbacks stay in the
wrapper and are listed on the seed: the judge's guardrails reject them unless the experiment
allows library GEMMs. Raises SeedError when the generated code has something a seed cannot
carry (another kind of kernel, a grid type not handled here, a wrapper helper left out).
"""

from __future__ import annotations

import ast
import builtins
import copy
import math
import re
from dataclasses import dataclass, field

from fitness.errors import EvoError
from fitness.guardrails import attr_chain
from fitness.workloads import Workload

GEMM_TILES = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M")
_DROPPED_CALLS = frozenset({"assert_size_stride", "assert_alignment", "set_device"})
_HELPERS = {"empty_strided_cuda", "reinterpret_tensor", "_grid", "torch", "triton"}
_GRID_DIMS = {
    "Grid1D": (("xnumel", "XBLOCK"),),
    "Grid2D": (("xnumel", "XBLOCK"), ("ynumel", "YBLOCK")),
    "Grid3D": (("xnumel", "XBLOCK"), ("ynumel", "YBLOCK"), ("znumel", "ZBLOCK")),
}

HEADER = """import torch
import torch.nn as nn
import triton
import triton.language as tl
from torch._inductor.runtime import triton_helpers
from torch._inductor.runtime.triton_helpers import libdevice, math as tl_math
"""

HELPERS = '''

def empty_strided_cuda(size, stride, dtype):
    return torch.empty_strided(size, stride, dtype=dtype, device="cuda")


def reinterpret_tensor(t, size, stride, offset):
    return t.as_strided(size, stride, t.storage_offset() + offset)


def _grid(*dims):
    """A launch grid from (numel, block name) pairs, one program per block; a plain number
    is a fixed extent."""
    return lambda meta: tuple(
        n if block is None else triton.cdiv(n, meta[block]) for n, block in dims
    )
'''


class SeedError(EvoError):
    """Inductor's module cannot become a seed; the message says why."""


@dataclass
class Seed:
    """One compiler seed: its source, or None with the reason it could not be made."""

    mode: str
    source: str | None
    reason: str = ""
    library_calls: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {
            "mode": self.mode,
            "source": self.source,
            "reason": self.reason,
            "library_calls": list(self.library_calls),
        }


def seeds_from_capture(capture: dict, workload: Workload) -> list[Seed]:
    """A Seed per captured mode, in order; modes with the same source are kept once."""
    out, seen = [], set()
    version = capture.get("torch", "?")
    for mode, cap in capture.get("modes", {}).items():
        if "skipped" in cap:
            continue
        if "error" in cap:
            out.append(Seed(mode, None, f"torch.compile failed: {cap['error']}"))
            continue
        try:
            source, calls = seed_source(cap, workload, mode, version)
        except SeedError as e:
            out.append(Seed(mode, None, str(e)))
            continue
        if source in seen:
            continue
        seen.add(source)
        note = f"calls library kernels: {', '.join(calls)}" if calls else ""
        out.append(Seed(mode, source, note, calls))
    return out


def seed_source(cap: dict, workload: Workload, mode: str, version: str) -> tuple[str, list[str]]:
    """The candidate's source for one captured mode, and the library calls it keeps."""
    tree = ast.parse(cap["code"])
    kernels = _kernel_sources(tree)
    infos = cap["kernels"]
    missing = [k for k in kernels if k not in infos]
    if missing:
        raise SeedError(f"no launch config was captured for kernel(s) {', '.join(missing)}")
    call = _call_function(tree)
    rewriter = _CallRewriter(kernels, infos)
    call = rewriter.visit(call)
    ast.fix_missing_locations(call)
    texts = [
        _kernel_text(name, src, infos[name], rewriter.tiled.get(name))
        for name, src in kernels.items()
    ]
    calls = _library_calls(call)
    roots = {c.split(".")[0] for c in calls}  # extern_kernels, aten
    free = _free_names(call) - set(kernels) - _HELPERS - roots - set(dir(builtins))
    if free:
        raise SeedError(
            f"the compiler's wrapper uses {', '.join(sorted(free))}, which a seed cannot carry"
        )
    header = HEADER
    if "extern_kernels" in roots:
        header += "from torch._inductor.select_algorithm import extern_kernels\n"
    if "aten" in roots:
        header += "aten = torch.ops.aten\n"
    doc = (
        f'"""A seed from torch.compile: Inductor\'s Triton for {workload.name} (mode {mode}, '
        f"torch {version}).\n\nThe kernels are Inductor's, launched directly with the configs "
        "its autotuner chose on the GPU it\nran on; `_call` is its wrapper without guards and "
        'streams."""\n\n'
    )
    parts = [doc + header + HELPERS, *texts, ast.unparse(call), _model_new(workload, cap)]
    return "\n\n\n".join(p.strip("\n") for p in parts) + "\n", calls


# ---------------------------------------------------------------- kernels


def _kernel_sources(tree: ast.Module) -> dict[str, str]:
    """name -> Triton source of every `NAME = async_compile.triton('NAME', '''...''')`."""
    out = {}
    for node in tree.body:
        if not (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)):
            continue
        f = node.value.func
        if not (isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name)):
            continue
        if f.value.id != "async_compile":
            continue
        name = node.targets[0].id if isinstance(node.targets[0], ast.Name) else "?"
        if f.attr != "triton":
            raise SeedError(f"Inductor wrote a {f.attr} kernel ({name}); a seed holds Triton only")
        src = node.value.args[1]
        if not (isinstance(src, ast.Constant) and isinstance(src.value, str)):
            raise SeedError(f"kernel {name}: its source is not a string literal")
        out[name] = src.value
    if not out:
        raise SeedError("Inductor wrote no Triton kernel (the graph ran on library calls only)")
    return out


def _kernel_text(name: str, src: str, info: dict, tiles: dict | None) -> str:
    """The kernel's functions with `@triton.jit` as their only decorator, rewritten for the
    precision guard and for tuning."""
    lines = src.splitlines()
    tree = ast.parse(src)
    funcs = [n for n in tree.body if isinstance(n, ast.FunctionDef)]
    if not funcs:
        raise SeedError(f"kernel {name}: no function in its source")
    out = []
    for fn in funcs:
        body = "\n".join(lines[fn.lineno - 1 : fn.end_lineno])
        out.append("@triton.jit\n" + body)
    text = "\n\n\n".join(out)
    # fp32: Inductor passes the TF32 switch as a constexpr; our guard wants the precision named.
    if re.search(r"ALLOW_TF32\s*:\s*tl\.constexpr\s*=\s*False", text):
        text = re.sub(r"allow_tf32\s*=\s*ALLOW_TF32", 'input_precision="ieee"', text)
    if tiles:
        text = _tiles_as_params(text, name, tiles)
    elif "_per_" in name or info.get("grid_type") == "FixedGrid":
        # A persistent reduction's R0_BLOCK must cover the row, and a fixed grid was sized for
        # the template's tiles: both stay as they are (the offline operator tunes literals).
        text = re.sub(
            r"^(\s*\w*BLOCK\w*|\s*GROUP_M)(\s*:\s*tl\.constexpr\s*=\s*)(\d+)\s*$",
            r"\1\2tl.constexpr(\3)",
            text,
            flags=re.M,
        )
    return text


def _tiles_as_params(text: str, name: str, tiles: dict) -> str:
    """Move a GEMM template's tile constexprs from its body to its parameters."""
    for t in tiles:
        text = re.sub(rf"^\s*{t}\s*:\s*tl\.constexpr\s*=\s*\d+\s*\n", "", text, count=1, flags=re.M)
    params = ", ".join(f"{t}: tl.constexpr" for t in tiles)
    text, n = re.subn(rf"(def {name}\([^)]*)\)", rf"\1, {params})", text, count=1)
    if n != 1:
        raise SeedError(f"kernel {name}: cannot find its signature")
    return text


def _gemm_tiles(src: str, grid: list[int]) -> dict | None:
    """A GEMM template's tiles when its fixed grid is cdiv(M, BLOCK_M) * cdiv(N, BLOCK_N)
    programs (times a batch on y) and any BLOCK_K in 16..256 keeps EVEN_K true."""

    def const(pattern: str) -> int | None:
        m = re.search(pattern, src, flags=re.M)
        return int(m.group(1)) if m else None

    tiles = {t: const(rf"^\s*{t}\s*:\s*tl\.constexpr\s*=\s*(\d+)\s*$") for t in GEMM_TILES}
    dims = {d: const(rf"^\s*{d}\s*=\s*(\d+)\s*$") for d in ("M", "N", "K")}
    if None in tiles.values() or None in dims.values() or len(grid) != 3:
        return None
    m, n, k = dims["M"], dims["N"], dims["K"]
    if grid[0] != math.ceil(m / tiles["BLOCK_M"]) * math.ceil(n / tiles["BLOCK_N"]):
        return None
    even_k = re.search(r"EVEN_K\s*:\s*tl\.constexpr\s*=\s*True", src)
    if even_k and k % 256:
        return None
    return {"tiles": tiles, "M": m, "N": n, "batch": grid[1]}


# ---------------------------------------------------------------- the wrapper


def _call_function(tree: ast.Module) -> ast.FunctionDef:
    """Inductor's `call(args)` (a method of `Runner` in recent versions), as `_call(args)`."""
    found = None
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == "call":
            found = node
        if isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == "call":
                    found = item
    if found is None:
        raise SeedError("Inductor's module has no call() wrapper")
    found.name = "_call"
    found.args.args = [a for a in found.args.args if a.arg != "self"]
    found.decorator_list = []
    return found


class _CallRewriter(ast.NodeTransformer):
    """Drops guards, device guards and streams; turns `K.run(...)` into direct launches."""

    def __init__(self, kernels: dict[str, str], infos: dict):
        self.kernels, self.infos = kernels, infos
        self.tiled: dict[str, dict] = {}

    def visit_Expr(self, node: ast.Expr):
        call = node.value
        if isinstance(call, ast.Call):
            f = call.func
            fname = (
                f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
            )
            if fname in _DROPPED_CALLS:
                return None
            if (
                isinstance(f, ast.Attribute)
                and f.attr == "run"
                and isinstance(f.value, ast.Name)
                and f.value.id in self.kernels
            ):
                return ast.Expr(self._launch(f.value.id, call))
        return self.generic_visit(node)

    def visit_Assign(self, node: ast.Assign):
        v = node.value
        if (
            isinstance(v, ast.Call)
            and isinstance(v.func, ast.Name)
            and v.func.id == "get_raw_stream"
        ):
            return None
        return self.generic_visit(node)

    def visit_With(self, node: ast.With):
        guard = all(
            isinstance(i.context_expr, ast.Call)
            and isinstance(i.context_expr.func, ast.Attribute)
            and i.context_expr.func.attr == "_DeviceGuard"
            for i in node.items
        )
        body = [s for s in (self.visit(s) for s in node.body) if s is not None]
        flat = []
        for s in body:
            flat.extend(s if isinstance(s, list) else [s])
        if guard:
            return flat or None
        node.body = flat or [ast.Pass()]
        return node

    def _launch(self, name: str, call: ast.Call) -> ast.Call:
        info = self.infos[name]
        sig = info["signature"]
        args = list(call.args)
        grid_type = info.get("grid_type", "")
        cfg = info["config"]
        kwargs = dict(cfg.get("kwargs", {}))
        n_args = len(args) - (3 if grid_type == "FixedGrid" else 0)
        # Inductor passes every parameter its config does not set by position, a constexpr
        # numel (`xnumel` of a reduction to one value) included; older versions left those out.
        params = [p for p in sig if p not in kwargs]
        if n_args != len(params):
            params = [p for p, kind in sig.items() if kind != "constexpr"]
        for p, kind in sig.items():
            if kind == "constexpr" and p not in kwargs and p not in params:
                if p not in info.get("constants", {}):
                    raise SeedError(f"kernel {name}: no value for its constexpr {p}")
                kwargs[p] = info["constants"][p]
        if grid_type == "FixedGrid":
            extent = [_int(a, name) for a in args[len(args) - 3 :]]
            args = args[: len(args) - 3]
            tiles = _gemm_tiles(self.kernels[name], extent)
            if tiles:
                self.tiled[name] = tiles["tiles"]
                kwargs = {**tiles["tiles"], **kwargs}
                grid = _mm_grid(tiles["M"], tiles["N"], tiles["batch"], extent[2])
            else:
                grid = _grid_call([(e, None) for e in extent])
        elif grid_type in _GRID_DIMS:
            if len(args) != len(params):
                raise SeedError(
                    f"kernel {name}: {len(args)} launch arguments for {len(params)} parameters"
                )
            values = dict(zip(params, args, strict=True))
            dims = []
            for numel, block in _GRID_DIMS[grid_type]:
                if numel not in values:
                    raise SeedError(f"kernel {name}: its launch has no {numel}")
                dims.append((values[numel], block if block in kwargs else None))
            grid = _grid_call(dims)
        else:
            raise SeedError(f"kernel {name}: grid type {grid_type or '(none)'} is not supported")
        keywords = [ast.keyword(k, ast.Constant(v)) for k, v in kwargs.items()]
        keywords += [
            ast.keyword("num_warps", ast.Constant(int(cfg["num_warps"]))),
            ast.keyword("num_stages", ast.Constant(int(cfg["num_stages"]))),
        ]
        return ast.Call(
            func=ast.Subscript(value=ast.Name(name, ast.Load()), slice=grid, ctx=ast.Load()),
            args=args,
            keywords=keywords,
        )


def _mm_grid(m: int, n: int, y: int, z: int) -> ast.expr:
    """A GEMM template's grid: one program per (BLOCK_M, BLOCK_N) tile, times y and z."""
    tiles = f"triton.cdiv({m}, meta['BLOCK_M']) * triton.cdiv({n}, meta['BLOCK_N'])"
    text = f"lambda meta: ({tiles}, {y}, {z})"
    return ast.parse(text, mode="eval").body


def _grid_call(dims: list) -> ast.expr:
    """`_grid((numel, "XBLOCK"), ...)`: a plain number for a block of None is a fixed extent."""
    elts = []
    for numel, block in dims:
        numel_node = numel if isinstance(numel, ast.AST) else ast.Constant(numel)
        elts.append(ast.Tuple([numel_node, ast.Constant(block)], ast.Load()))
    return ast.Call(func=ast.Name("_grid", ast.Load()), args=elts, keywords=[])


def _int(node: ast.expr, name: str) -> int:
    if isinstance(node, ast.Constant) and isinstance(node.value, int):
        return node.value
    raise SeedError(f"kernel {name}: its fixed grid is not a constant")


def library_calls(code: str) -> list[str]:
    """The library and ATen calls of an Inductor module's `call` wrapper."""
    return _library_calls(_call_function(ast.parse(code)))


def _library_calls(fn: ast.FunctionDef) -> list[str]:
    """`extern_kernels.X` and ATen (`aten.X`, `torch.ops.aten.X`) calls, in order, once each."""
    out = []
    for node in ast.walk(fn):
        if not isinstance(node, ast.Call):
            continue
        chain = attr_chain(node.func)
        if chain[:1] == ["extern_kernels"] and len(chain) > 1:
            out.append(f"extern_kernels.{chain[1]}")
        elif chain[:1] == ["aten"] and len(chain) > 1:
            out.append(f"aten.{chain[1]}")
        elif chain[:3] == ["torch", "ops", "aten"] and len(chain) > 3:
            out.append(f"aten.{chain[3]}")
    return list(dict.fromkeys(out))


def _free_names(fn: ast.FunctionDef) -> set[str]:
    bound = {a.arg for a in fn.args.args}
    for node in ast.walk(fn):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store | ast.Del):
            bound.add(node.id)
        if isinstance(node, ast.arg):
            bound.add(node.arg)
    loads = {n.id for n in ast.walk(fn) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    return loads - bound


# ---------------------------------------------------------------- ModelNew


class _Rename(ast.NodeTransformer):
    def visit_Name(self, node: ast.Name):
        if node.id == "Model":
            node.id = "ModelNew"
        return node


def _model_new(workload: Workload, cap: dict) -> str:
    """The reference's constructor under the name ModelNew, and a forward through `_call`."""
    ref = ast.parse(workload.source)
    model = next((n for n in ref.body if isinstance(n, ast.ClassDef) and n.name == "Model"), None)
    if model is None:
        raise SeedError(f"{workload.name}: no class Model in the reference")
    init = [n for n in model.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"]
    cls = copy.copy(model)
    cls.name, cls.decorator_list = "ModelNew", []
    cls.body = [_Rename().visit(n) for n in init] or [ast.Pass()]
    args = []
    for role in cap["args"]:  # detached: a library call with out= refuses autograd inputs
        if "param" in role:
            args.append(f"self.get_parameter({role['param']!r}).detach()")
        elif "buffer" in role:
            args.append(f"self.get_buffer({role['buffer']!r}).detach()")
        else:
            args.append(f"inputs[{int(role['input'])}]")
    n = cap.get("outputs")
    ret = "out[0]" if n is None else f"tuple(out[:{int(n)}])"
    imports = [
        ast.unparse(s)
        for s in ref.body
        if isinstance(s, ast.Import | ast.ImportFrom) and ast.unparse(s) not in HEADER
    ]
    text = ast.unparse(cls)
    text += (
        "\n\n    def forward(self, *inputs):\n"
        f"        out = _call([{', '.join(args)}])\n"
        f"        return {ret}\n"
    )
    return "\n".join(imports) + ("\n\n\n" if imports else "") + text
