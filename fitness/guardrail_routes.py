"""The routes around the evaluator that need names resolved (the strict default, EVALUATION.md).

`fitness.guardrails` reads a candidate as written; this guard first resolves each name through
the candidate's imports and aliases to the dotted path it stands for, so `torch.mm`,
`from torch import mm` and `f = torch.mm` are one thing, and then bans each route in general:
other array libraries and host copies, PyTorch's op registry, compilers and switches, in-place
and `out=` compute, PyTorch modules or tensor arithmetic in `forward`, computed attribute
names, the harness's modules, attributes set on objects that are not the candidate's own, and
hidden TF32 dots. Its findings follow the first checks', so their reasons stay first.
"""

from __future__ import annotations

import ast
import re

import torch

from fitness.guardrail_names import (
    TENSOR_VIEWS,
    CandidateNames,
    const_getattr,
    name_of,
    root_of,
    self_attr,
    subscript_root,
)

# Tensor methods that compute (a call of one outside __init__ is a PyTorch fallback).
COMPUTE_METHODS = frozenset(
    """sum mean std var prod max min amax amin argmax argmin cumsum cumprod norm matmul mm bmm
    addmm baddbmm einsum dot mv exp exp_ log log_ log1p sqrt rsqrt sin cos tanh tanh_ sigmoid
    sigmoid_ relu relu_ gelu silu softmax log_softmax layer_norm abs abs_ neg clamp clamp_ clip
    pow add add_ sub sub_ mul mul_ div div_ addcmul addcdiv lerp where masked_fill masked_fill_
    fill_ copy_ index_select gather scatter scatter_add sort topk conv1d conv2d conv3d linear
    logsumexp erf erf_ square sign floor ceil round maximum minimum outer""".split()
)
# Library GEMMs an experiment may allow (`allow_library_gemm`): cuBLAS through PyTorch, or
# through Inductor's `extern_kernels`, as a compiler seed's wrapper calls it.
LIBRARY_GEMMS = frozenset("mm addmm bmm baddbmm matmul linear".split())
# Array and kernel libraries: they compute outside the candidate's own kernel.
HOST_LIBRARIES = frozenset(
    """numpy scipy cupy cupyx jax jaxlib numba tensorflow keras mlx pandas polars sklearn
    torch_xla dask numexpr pyarrow xarray sympy mpmath tvm taichi pycuda cuda nvmath cutlass
    cudf cuml cunumeric tensorrt torch_tensorrt onnx onnxruntime apex flash_attn xformers
    liger_kernel thunder triton_kernels transformers einops torchvision torchaudio functorch
    opt_einsum bitsandbytes deepspeed vllm flashinfer tilelang statistics array""".split()
)
# Modules with no use in a kernel file that reach the process, the harness or its files.
REACH_MODULES = frozenset(
    """operator types atexit logging ray backends analysis tests conftest pytest _pytest
    __main__ site sitecustomize runpy pkgutil zipimport imp code codeop pdb bdb dis trace
    tracemalloc linecache glob zipfile tarfile gzip bz2 lzma sqlite3 dbm psutil pynvml select
    selectors ssl sched copyreg opcode posix nt posixpath ntpath stat pwd grp webbrowser
    cProfile profile pstats timeit""".split()
)
BANNED_PATHS = {"functools.reduce": "a computed attribute chain"}
# Attribute names that lead from an ordinary object to a module a candidate may not import.
REACH_ATTRS = frozenset(
    """sys _sys os _os builtins modules importlib gc inspect ctypes subprocess threading
    multiprocessing np sandbox fitness evo operators ray traceback functools glob types
    operator""".split()
)
# Builtins the first checks leave alone that a kernel file has no use for.
BANNED_BUILTINS = {
    "dir": "dir() lists names to look up",
    "memoryview": "a host view of memory",
    "exit": "exiting the process",
    "quit": "exiting the process",
    "input": "reading stdin",
    "help": "pydoc reads files",
}
# A string naming a module the candidate may not import: the key of a lookup.
HARNESS_STRING = re.compile(
    r"(fitness|evo|operators|backends|ray|sys|builtins|importlib|gc|inspect|ctypes"
    r"|torch\.ops|torch\._C)(\.[\w.]*)?"
)
# PyTorch's machinery rather than its ops: off limits even where torch ops are allowed.
TORCH_MACHINERY = {
    "ops _C _ops library overrides utils _refs _prims _decomp": "PyTorch's op registry or dispatch",
    "jit fx compile compiler export func vmap _dynamo _inductor _functorch": "compiles PyTorch",
    "profiler autograd": "reaches the profiler or autograd's internals",
    "backends amp autocast cpu.amp cuda.amp cuda.tunable use_deterministic_algorithms": (
        "changes PyTorch's global state"
    ),
    "cuda.set_sync_debug_mode cuda._sleep cuda.graphs cuda.graph cuda.CUDAGraph "
    "cuda.make_graphed_callables cuda.jiterator cuda.nvtx cuda.cudart cuda.memory": (
        "CUDA graphs, driver or debug state"
    ),
    "multiprocessing distributed": "other processes",
    "hub save load from_file testing classes package random": "I/O, RNG state or test helpers",
}
TORCH_MACHINERY_OK = ("utils.cpp_extension.load_inline", "autograd.Function")
# Inductor's Triton device helpers (compiler seeds use them): @triton.jit functions only,
# which cannot compute on host tensors.
TRITON_HELPER_MODULES = ("torch._inductor.runtime.triton_helpers",)
EXTERN_KERNELS = "torch._inductor.select_algorithm.extern_kernels"
TRITON_MACHINERY = "runtime compiler backends _C knobs testing tools profiler semantic ir"
TRITON_QUERIES = (
    "triton.runtime.driver.active.get_current_device",
    "triton.runtime.driver.active.get_current_target",
    "triton.runtime.driver.active.utils.get_device_properties",
)
# torch's submodules: namespaces, not compute, when a path is only a step on the way.
TORCH_NAMESPACES = frozenset(
    """nn functional cuda linalg fft special sparse nested ops library backends autograd utils
    jit fx func profiler distributed multiprocessing overrides testing hub random amp cpu
    export compiler masked signal ao quantization onnx package init modules""".split()
)
# Names of modules (torch's, triton's, os) that a candidate may use but not hand on.
MODULE_NAMES = TORCH_NAMESPACES | {"torch", "triton", "language", "core", "extra", "runtime", "os"}
# Names of torch that are types, dtypes, queries or allocation (the rest of torch computes).
TORCH_OK = frozenset(
    """empty empty_like empty_strided zeros zeros_like tensor as_tensor device dtype Size
    cdiv is_tensor numel broadcast_shapes get_device_properties current_device device_count
    is_available get_device_capability manual_seed Tensor finfo iinfo no_grad inference_mode
    strided contiguous_format channels_last preserve_format is_floating_point get_default_dtype
    promote_types result_type can_cast Module Parameter ParameterList ParameterDict Buffer
    Function load_inline float float32 float64 double int int8 int16 int32 int64 long short
    uint8 bool complex64 complex128 cfloat cdouble float16 half bfloat16""".split()
)
# What forward may call on a torch.nn module of self's (its weights are read as attributes).
MODULE_SAFE_METHODS = frozenset(
    {"get_parameter", "get_buffer", "parameters", "named_parameters", "buffers", "extra_repr"}
)
SUBMODULE_ACCESS = frozenset(
    """children modules named_modules named_children get_submodule apply _call_impl
    _wrapped_call_impl _modules""".split()
)
ALLOWED_DUNDERS = frozenset({"__init__", "__name__", "__doc__", "__version__"})
# In-place methods that do not compute: zeroing a buffer (for atomics), flags.
INPLACE_OK = frozenset({"zero_", "requires_grad_", "detach_"})
HOST_COPIES = frozenset({"numpy", "tolist", "item", "cpu"})  # the first two always
# What forward may do with a tensor besides handing it to a kernel: views, queries, casts.
TENSOR_METHODS_OK = TENSOR_VIEWS | frozenset(
    """size stride numel dim ndimension nelement element_size data_ptr is_contiguous
    storage_offset get_device new_empty new_zeros new_empty_strided is_floating_point
    is_complex cuda int long bool zero_ requires_grad_ detach_""".split()
)
TENSOR_METHODS = frozenset(n for n in dir(torch.Tensor) if callable(getattr(torch.Tensor, n, None)))
HOST_BUILTINS = frozenset(
    """sum max min abs pow round divmod sorted any all float int bool complex list tuple map
    filter iter next zip enumerate reversed str repr format bytes bytearray""".split()
)
NON_TENSOR_ANNOTATIONS = frozenset({"int", "float", "bool", "str", "tuple", "list", "dict"})
F32_DEFAULT = re.compile(r"f32_default|default_dot_input_precision", re.I)
TF32_ASM = re.compile(r"tf32|\.f16|\.bf16|\bmma\b|wgmma", re.I)
OS_READS = ("os.environ.get", "os.getenv")
ENV_KEYS_OK = frozenset({"TRITON_INTERPRET"})
FALLBACK = "falls back to PyTorch"


class RouteGuard(ast.NodeVisitor):
    """One walk over the module after a pass that binds names to dotted paths."""

    def __init__(self, names: CandidateNames, strict: bool, library_gemm: bool, fp32_dots: bool):
        self.names = names
        self.strict = strict
        self.gemm = library_gemm
        self.fp32_dots = fp32_dots
        self.found: list[str] = []
        self.grave: list[str] = []
        # per function: its kind, its locals bound to the candidate's own objects, and (in
        # forward) the names known to hold tensors
        self.scopes: list[tuple[str, set[str], set[str]]] = [("module", set(), set())]

    def run(self, tree: ast.Module) -> list[str]:
        self.visit(tree)
        return list(dict.fromkeys(self.grave + self.found))

    def _flag(self, node: ast.AST, what: str, why: str) -> None:
        self.found.append(f"{what} at line {getattr(node, 'lineno', '?')} ({why})")

    def _tampering(self, node: ast.AST, what: str, why: str) -> None:
        """Reaching the harness, PyTorch's or Triton's machinery, the OS, or patching: the
        reason to give first when a candidate also falls back to PyTorch."""
        self.grave.append(f"{what} at line {getattr(node, 'lineno', '?')} ({why})")

    # --- scopes -------------------------------------------------------------------------

    @property
    def in_init(self) -> bool:
        return self.scopes[-1][0] == "init"

    @property
    def checks_compute(self) -> bool:
        return self.strict and not self.in_init

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        kind = "init" if id(node) in self.names.inits else "code"
        tensors = set()
        if node.name == "forward":
            args = node.args.posonlyargs + node.args.args[1:] + node.args.kwonlyargs
            tensors = {a.arg for a in args if name_of(a.annotation) not in NON_TENSOR_ANNOTATIONS}
            tensors |= {a.arg for a in (node.args.vararg,) if a}
        self.scopes.append((kind, set(), tensors))
        self.generic_visit(node)
        self.scopes.pop()

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Lambda(self, node: ast.Lambda) -> None:
        self.scopes.append(("code", set(), set()))
        self.generic_visit(node)
        self.scopes.pop()

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        for base in node.bases if self.strict else ():
            path = self.names.path(base) or ""
            if path.startswith("torch.") and path not in (
                "torch.nn.Module",
                "torch.autograd.Function",
            ):
                self._flag(base, f"subclassing {path!r}", "inherits PyTorch's own compute")
        self.scopes.append(("code", set(), set()))
        self.generic_visit(node)
        self.scopes.pop()

    # --- imports and names --------------------------------------------------------------

    def visit_Import(self, node: ast.Import) -> None:
        for a in node.names:
            self._import(node, a.name)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        mod = node.module or ""
        self._import(node, mod, full=False)
        for a in node.names:
            if a.name == "*":
                self._tampering(node, f"import * from {mod!r}", "hides the names it binds")
            else:
                self._import(node, f"{mod}.{a.name}")

    def _import(self, node: ast.AST, name: str, full: bool = True) -> None:
        top = name.split(".")[0]
        if top in HOST_LIBRARIES:
            self._flag(node, f"import of array library {name!r}", "computes outside the kernel")
        elif top in REACH_MODULES or (top.startswith("_") and top != "__future__"):
            self._tampering(
                node, f"import of banned module {name!r}", "reaches the process or harness"
            )
        elif name in BANNED_PATHS:
            self._tampering(node, f"import of {name!r}", BANNED_PATHS[name])
        elif full:
            self._use(node, name, imported=True)

    def visit_Name(self, node: ast.Name) -> None:
        if isinstance(node.ctx, ast.Load):
            if node.id in BANNED_BUILTINS and node.id not in self.names.paths:
                self._tampering(node, f"use of {node.id!r}", BANNED_BUILTINS[node.id])
            if node.id == "getattr" and not self.names.is_func(node):
                self._tampering(node, "getattr passed as a value", "a computed attribute name")
            if node.id in self.names.paths and self.names.is_outermost(node):
                self._use(node, self.names.paths[node.id])
            if (
                self.checks_compute
                and node.id in self.names.module_classes
                and self.names.is_func(node)
            ):
                self._flag(node, f"building the module {node.id!r} outside __init__", FALLBACK)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        self._attribute(node)
        self.generic_visit(node)

    def _attribute(self, node: ast.Attribute) -> None:
        """`x.attr`, or `getattr(x, "attr")` in the same shape (parents already linked)."""
        attr = node.attr
        if attr in REACH_ATTRS:
            self._tampering(
                node, f"access to attribute .{attr}", "reaches a module it may not import"
            )
        if attr.startswith("__") and attr.endswith("__") and attr not in ALLOWED_DUNDERS:
            self._tampering(node, f"access to {attr!r}", "introspection")
        if self.fp32_dots and F32_DEFAULT.search(attr):
            self._flag(node, f"Triton's default precision .{attr}", "TF32 under the fp32 policy")
        path = self.names.path(node) if self.names.is_outermost(node) else None
        if path:
            self._use(node, path)
        elif self.names.is_outermost(node):
            self._method_route(node)

    def _use(self, node: ast.AST, path: str, imported: bool = False) -> None:
        """A reference to a resolved path (or its import): the rules of its library."""
        top = path.split(".")[0]
        if path in BANNED_PATHS:
            self._tampering(node, f"use of {path!r}", BANNED_PATHS[path])
        if REACH_ATTRS.intersection(path.split(".")[1:]):
            return  # flagged where the attribute is read
        if top == "torch":
            self._torch(node, path, imported)
        elif top == "triton":
            self._triton(node, path)
        elif top == "os" and not self._os_ok(node, path, imported):
            self._tampering(node, f"use of {path!r}", "OS access; only os.environ.get is allowed")
        if imported or not self.names.is_value(node):
            return
        if path in self.names.modules or path.rsplit(".", 1)[-1] in MODULE_NAMES:
            self._tampering(node, f"module {path!r} used as a value", "hides what is called on it")

    def _os_ok(self, node: ast.AST, path: str, imported: bool) -> bool:
        """`import os`, `from os import environ`, and os.environ.get or os.getenv called (with
        an allowed key: visit_Call), never handed on."""
        if imported:
            return path in ("os", "os.environ", *OS_READS)
        return path == "os" or path in OS_READS and self.names.is_func(node)

    def _torch(self, node: ast.AST, path: str, imported: bool) -> None:
        if path.startswith(TRITON_HELPER_MODULES):  # device helpers, but their `triton` is triton's
            rest = path.removeprefix(TRITON_HELPER_MODULES[0]).split(".")[1:]
            if rest[:1] in (["triton"], ["tl"]):
                self._triton(node, ".".join(["triton", *rest[1:]]))
            return
        segs = path.split(".")[1:]
        why = _torch_machinery(segs) if not path.startswith(EXTERN_KERNELS) else None
        if why:
            self._tampering(node, f"PyTorch internals {path!r}", why)
        elif self.checks_compute and not imported and not self._torch_ok(segs):
            self._flag(node, f"PyTorch compute {path!r}", FALLBACK)

    def _torch_ok(self, segs: list[str]) -> bool:
        leaf = segs[-1] if segs else ""
        return (
            not segs
            or all(s in TORCH_NAMESPACES for s in segs)
            or leaf in TORCH_OK
            or (self.gemm and leaf in LIBRARY_GEMMS)
        )

    def _triton(self, node: ast.AST, path: str) -> None:
        segs = path.split(".")[1:]
        leaf = segs[-1] if segs else ""
        machinery = any(_contains(segs, m.split(".")) for m in TRITON_MACHINERY.split())
        private = any(s.startswith("_") and not s.startswith("__") for s in segs)
        named = isinstance(node, (ast.ImportFrom, ast.Import)) or isinstance(
            self.names.parents.get(id(node)), ast.Assign
        )  # `from triton.runtime import driver`: a step towards a query
        allowed = (
            path in TRITON_QUERIES
            or named
            and any(q.startswith(path + ".") for q in TRITON_QUERIES)
        )
        if (machinery or private) and not allowed:
            self._tampering(node, f"Triton internals {path!r}", "the launcher, compiler or knobs")
        if self.fp32_dots and leaf == "dot_scaled":
            self._flag(node, f"{path!r}", "a scaled low-precision dot under the fp32 policy")
        elif self.fp32_dots and leaf == "dot" and not self.names.is_attr_call(node):
            self._flag(node, f"alias of tl.dot {path!r}", 'hides its input_precision="ieee"')
        parent = self.names.parents.get(id(node))
        if self.fp32_dots and leaf == "inline_asm_elementwise" and isinstance(parent, ast.Call):
            asm = " ".join(str(c.value) for c in ast.walk(parent) if isinstance(c, ast.Constant))
            if TF32_ASM.search(asm):
                self._flag(node, "inline asm with a low-precision op", "not fp32")

    def _method_route(self, node: ast.Attribute) -> None:
        """A method of an object no name resolves: in place, host copies, PyTorch modules."""
        if name_of(node.value) == "self" or self_attr(node.value):
            self._module_use(node)
        if name_of(node.value) in ("self", *self.names.defs) or self.names.path(node.value):
            return  # a module's name (checked by path), or the candidate's own
        attr = node.attr
        if attr in ("numpy", "tolist") or (attr in HOST_COPIES and self.checks_compute):
            self._flag(node, f"host copy .{attr}()", "computes outside the candidate's kernel")
        if not self.checks_compute:
            return
        if attr.endswith("_") and not attr.endswith("__") and attr not in INPLACE_OK:
            if not (self.gemm and attr[:-1] in LIBRARY_GEMMS):
                self._flag(node, f"in-place torch compute .{attr}()", FALLBACK)
        elif attr == "to" and "'cpu'" in ast.dump(self.names.parents.get(id(node), node)):
            self._flag(node, "host copy .to('cpu')", "computes outside the candidate's kernel")
        elif attr in COMPUTE_METHODS and not self.names.is_func(node):
            if root_of(node) not in self.names.paths:  # `torch.finfo(t).max` is a number
                self._flag(node, f"tensor method .{attr} used as a value", FALLBACK)
        elif self._is_tensor(node.value) and attr not in TENSOR_METHODS_OK:
            if self.names.is_func(node) or attr in TENSOR_METHODS:  # a call, or a bound method
                self._flag(node, f"tensor method .{attr}()", FALLBACK)

    def _module_use(self, node: ast.Attribute) -> None:
        """A torch.nn module of self's called, or handed on, in forward: PyTorch computes."""
        if not self.checks_compute:
            return
        attr, owner = self_attr(node), self_attr(node.value)
        if attr in SUBMODULE_ACCESS:
            self._flag(node, f"submodule access self.{attr}", "calls PyTorch modules")
        if attr in self.names.torch_modules:  # the module itself, not its .weight
            self._module_flag(node, attr, f"PyTorch module self.{attr} called or handed on")
        elif owner in self.names.torch_modules and self.names.is_func(node):
            if node.attr not in MODULE_SAFE_METHODS:
                self._module_flag(node, owner, f"PyTorch module method self.{owner}.{node.attr}()")

    def _module_flag(self, node: ast.AST, attr: str, what: str) -> None:
        cls = self.names.torch_modules[attr]
        if not (self.gemm and cls == "Linear"):  # cuBLAS, where library GEMMs are allowed
            self._flag(node, f"{what} (nn.{cls})", FALLBACK)

    # --- calls, assignments, arithmetic -------------------------------------------------

    def visit_Call(self, node: ast.Call) -> None:
        f = node.func
        if name_of(f) == "type" and (len(node.args) == 3 or not self.names.is_outermost(node)):
            self._tampering(node, "type() used to reach a class", "a computed attribute route")
        if self.names.path(f) in OS_READS:
            key = node.args[0] if node.args else None
            if not (isinstance(key, ast.Constant) and key.value in ENV_KEYS_OK):
                why = "secrets stay out of candidates"
                self._tampering(node, "reading the environment", why)
        if self.checks_compute and any(k.arg == "out" for k in node.keywords):
            self._out_kw(node)
        host = name_of(f) if name_of(f) in HOST_BUILTINS else self._host_function(f)
        if (
            self.checks_compute
            and host
            and self._any_tensor([*node.args, *(k.value for k in node.keywords)])
        ):
            self._flag(node, f"{host}() of a tensor", "computes on the host or with PyTorch")
        if self.checks_compute and isinstance(f, ast.Subscript):
            if self_attr(subscript_root(f)) in self.names.torch_modules:
                self._flag(node, "PyTorch module called through a subscript", FALLBACK)
        if const_getattr(node):
            self._attribute(self.names.as_attribute(node))
        self.generic_visit(node)

    def _host_function(self, f: ast.AST) -> str | None:
        """`math.fsum`, `itertools.accumulate`: a module's function that is not torch's or
        triton's, which can only compute on a tensor on the host."""
        path = self.names.path(f) or ""
        return path if path and path.split(".")[0] not in ("torch", "triton", "typing") else None

    def _out_kw(self, node: ast.Call) -> None:
        f = node.func
        path = self.names.path(f) or ""
        if path.startswith(("triton", *TRITON_HELPER_MODULES)) or root_of(f) in (
            "self",
            *self.names.defs,
        ):
            return
        if self.gemm and path.rsplit(".", 1)[-1] in LIBRARY_GEMMS:
            return
        what = path or (f.attr if isinstance(f, ast.Attribute) else "a call")
        self._flag(node, f"out= on {what}", f"writes PyTorch's result into a buffer; {FALLBACK}")

    def visit_Assign(self, node: ast.Assign) -> None:
        for t in node.targets:
            self._target(t)
        if isinstance(node.value, ast.Call) and name_of(node.value.func) in self.names.defs:
            self.scopes[-1][1].update(t.id for t in node.targets if isinstance(t, ast.Name))
        tensors = self.scopes[-1][2]
        for t in node.targets:
            if isinstance(t, ast.Name):
                (tensors.add if self._is_tensor(node.value) else tensors.discard)(t.id)
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self._target(node.target)
        if self.checks_compute and (
            isinstance(node.op, ast.MatMult) or self._any_tensor([node.target, node.value])
        ):
            self._flag(node, "in-place arithmetic on a tensor", FALLBACK)
        self.generic_visit(node)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        self._target(node.target)
        self.generic_visit(node)

    def visit_Delete(self, node: ast.Delete) -> None:
        for t in node.targets:
            self._target(t)
        self.generic_visit(node)

    def _target(self, target: ast.AST) -> None:
        """Only the candidate's own objects may have attributes set: self, and locals bound
        to its own classes. Anything else (a module, a class, a harness object reached some
        other way) is a monkeypatch."""
        if isinstance(target, (ast.Tuple, ast.List)):
            for t in target.elts:
                self._target(t)
        elif isinstance(target, ast.Starred):
            self._target(target.value)
        elif isinstance(target, ast.Attribute):
            root = root_of(target)
            own = root == "self" or (
                root in self.scopes[-1][1] and isinstance(target.value, ast.Name)
            )
            if not own:
                what = ast.unparse(target)
                self._tampering(target, f"assignment to {what!r}", "not the candidate's own object")
        elif isinstance(target, ast.Subscript) and self.names.path(subscript_root(target)):
            self._tampering(target, "assignment into a module's item", "changes global state")

    def visit_BinOp(self, node: ast.BinOp) -> None:
        if self.checks_compute and self._any_tensor([node.left, node.right]):
            self._flag(node, "arithmetic on a tensor", FALLBACK)
        self.generic_visit(node)

    def visit_UnaryOp(self, node: ast.UnaryOp) -> None:
        if self.checks_compute and not isinstance(node.op, ast.Not):
            if self._any_tensor([node.operand]):
                self._flag(node, "arithmetic on a tensor", FALLBACK)
        self.generic_visit(node)

    def visit_Compare(self, node: ast.Compare) -> None:
        ops = (ast.Is, ast.IsNot, ast.In, ast.NotIn)
        if self.checks_compute and not all(isinstance(o, ops) for o in node.ops):
            if self._any_tensor([node.left, *node.comparators]):
                self._flag(node, "comparison of tensors", FALLBACK)
        self.generic_visit(node)

    def visit_For(self, node: ast.For) -> None:
        self._target(node.target)
        self.visit_comprehension(node)

    def visit_comprehension(self, node: ast.For | ast.comprehension) -> None:
        if self.checks_compute and self._any_tensor([node.iter]):
            self._flag(node.iter, "iterating over a tensor", "computes on the host")
        self.generic_visit(node)

    def visit_FormattedValue(self, node: ast.FormattedValue) -> None:
        if self.checks_compute and self._any_tensor([node.value]):
            self._flag(node, "a tensor formatted into a string", "computes on the host")
        self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> None:
        if isinstance(node.value, str) and len(node.value) < 80:
            if HARNESS_STRING.fullmatch(node.value) and not self.names.is_docstring(node):
                self._tampering(
                    node, f"the string {node.value!r}", "names a harness or banned module"
                )
            if self.fp32_dots and F32_DEFAULT.search(node.value):
                self._flag(node, f"the string {node.value!r}", "TF32 under the fp32 policy")

    # --- what a node is -----------------------------------------------------------------

    def _is_tensor(self, node: ast.AST) -> bool:
        return self.names.is_tensor(node, self.scopes[-1][2])

    def _any_tensor(self, nodes) -> bool:
        return any(self._is_tensor(n) for n in nodes)


def _torch_machinery(segs: list[str]) -> str | None:
    if any(_starts(segs, ok.split(".")) for ok in TORCH_MACHINERY_OK):
        return None
    for names, why in TORCH_MACHINERY.items():  # anywhere: `torch.cuda.torch.ops` is torch.ops
        if any(_contains(segs, m.split(".")) for m in names.split()):
            return why
    if any(s.startswith("set_") for s in segs[-1:]):
        return "changes PyTorch's global state"
    if any(s.startswith("_") and not s.startswith("__") for s in segs):
        return "PyTorch's private internals"
    return None


def _starts(segs: list[str], prefix: list[str]) -> bool:
    return segs[: len(prefix)] == prefix


def _contains(segs: list[str], part: list[str]) -> bool:
    return any(segs[i : i + len(part)] == part for i in range(len(segs)))
