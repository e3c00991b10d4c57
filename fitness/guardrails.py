"""Static guardrails: what a candidate's source must contain and may not (EVALUATION.md).

The strict default bans the known routes around the evaluator: falling back to PyTorch,
introspection, threads and streams, I/O, monkeypatching, secrets, and silent precision flags.
These are a first wall only; every class they cover is also defended at run time. The checks
that need a candidate's names resolved (`f = torch.mm`, `from torch import mm`) live in
`fitness.guardrail_routes`, on the bindings `fitness.guardrail_names` reads.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from dataclasses import dataclass, field

from backends import get_backend
from fitness.guardrail_names import CandidateNames
from fitness.guardrail_routes import (
    ALLOWED_DUNDERS,
    COMPUTE_METHODS,
    ENV_KEYS_OK,
    INPLACE_OK,
    LIBRARY_GEMMS,
    TORCH_OK,
    TRITON_HELPER_MODULES,
    RouteGuard,
)
from fitness.precision import Precision

BANNED_MODULES = frozenset(
    """threading _thread multiprocessing subprocess concurrent asyncio inspect gc ctypes cffi
    socket urllib http requests httpx pickle marshal shelve shutil tempfile pathlib io signal
    sys builtins importlib time resource mmap faulthandler traceback weakref pty fcntl
    fitness evo operators""".split()
)
# Dunder attributes a kernel never needs; they are the doors to frames, globals and builtins.
BANNED_NAMES = {
    "__import__": "dynamic import",
    "eval": "eval",
    "exec": "exec",
    "compile": "compile()",
    "globals": "globals()",
    "locals": "locals()",
    "vars": "vars()",
    "setattr": "setattr",
    "delattr": "delattr",
    "open": "file I/O",
    "breakpoint": "breakpoint",
    "Model": "use of the reference Model",
}
FRAME_ATTRS = frozenset(
    """_getframe f_back f_globals f_locals f_builtins f_code gi_frame gi_code cr_frame
    cr_code ag_frame tb_frame tb_next""".split()
)
STREAM_ATTRS = frozenset(
    """Stream stream ExternalStream set_stream current_stream default_stream wait_stream
    StreamContext CUDAGraph graph""".split()
)
OS_ALLOWED = {("environ", "get"), ("getenv",)}
# In a CUDA candidate's C++: ATen calls other than allocation and device queries, tensor
# methods that compute, and PyTorch's registry, dispatcher and global switches.
CUDA_TORCH_CALL = re.compile(r"\b(?:at|torch)::(?:\w+::)*(\w+)\s*\(")
CUDA_TORCH_OK = frozenset(
    """empty empty_like empty_strided zeros zeros_like full full_like ones ones_like from_blob
    TensorOptions Device device dtype ceil_div getCurrentCUDAStream getDefaultCUDAStream
    getCurrentDeviceProperties getDeviceProperties current_device device_count warp_size
    CUDAGuard OptionalCUDAGuard Scalar IntArrayRef""".split()
)
CUDA_METHOD_CALL = re.compile(r"\.\s*(\w+)\s*\(")
CUDA_MACHINERY = re.compile(
    r"\b(?:at::_ops|at::native|at::globalContext|at::cuda::blas|c10::Dispatcher|c10::impl|"
    r"torch::jit|torch::autograd|torch::nn|torch::library|TORCH_LIBRARY\w*)\b"
)
# ... and the Python interpreter, the OS, threads and files, from C++.
CUDA_HOST = re.compile(
    r"\b(?:pybind11|py)::|\bPy[A-Z]\w*\s*\(|\bstd::(?:thread|async|system|getenv|\w*fstream)\b"
    r"|\b(?:dlopen|dlsym|system|popen|fork|vfork|execv\w*|execl\w*|getenv|setenv|putenv|fopen"
    r"|open|syscall|ptrace|kill|pthread_create)\s*\("
)


@dataclass(frozen=True)
class GuardrailConfig:
    """Per-experiment guardrails. `enabled=False` leaves only the run-time walls."""

    enabled: bool = True
    required: tuple[str, ...] = ()
    banned: tuple[str, ...] = ()
    allow_torch_ops: bool = False
    allow_library_gemm: bool = False

    def key(self) -> str:
        return repr(
            (
                self.enabled,
                self.required,
                self.banned,
                self.allow_torch_ops,
                self.allow_library_gemm,
            )
        )


@dataclass(frozen=True)
class GuardrailVerdict:
    ok: bool
    reason: str = ""
    violations: tuple[str, ...] = field(default_factory=tuple)


def defines_model_new(source: str) -> bool:
    """Whether the source parses and defines `class ModelNew` at module level."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return False
    return any(isinstance(n, ast.ClassDef) and n.name == "ModelNew" for n in tree.body)


def strip_comments(source: str) -> str:
    """The source with comments removed (string literals kept: CUDA code lives in them)."""
    out = []
    try:
        for tok in tokenize.generate_tokens(io.StringIO(source).readline):
            if tok.type != tokenize.COMMENT:
                out.append(tok)
        return tokenize.untokenize(out)
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return source


def check(
    source: str,
    backend: str = "triton",
    precision: Precision = Precision.FP32,
    config: GuardrailConfig | None = None,
) -> GuardrailVerdict:
    """Run the static guardrails; the first violation becomes the one-line reason."""
    config = config or GuardrailConfig()
    if not config.enabled:
        return GuardrailVerdict(True)
    try:
        tree = ast.parse(source)
    except SyntaxError as e:
        return GuardrailVerdict(False, f"syntax error at line {e.lineno}: {e.msg}", ("syntax",))
    code = _without_docstrings(strip_comments(source), tree)
    found: list[str] = []
    be = get_backend(backend)
    for pattern, what in be.required:
        if not re.search(pattern, code):
            found.append(f"missing {what} (the {be.name} backend's own kernel must be present)")
    for pattern in config.required:
        if not re.search(pattern, code):
            found.append(f"missing required pattern {pattern!r}")
    for pattern in config.banned:
        m = re.search(pattern, code)
        if m:
            found.append(f"banned pattern {pattern!r} at line {_line_of(code, m.start())}")
    found += _precision_violations(tree, code, be.banned_precision, precision, be.name)
    fp32_dots = be.name == "triton" and precision is Precision.FP32
    names = CandidateNames(tree)
    routes = RouteGuard(names, not config.allow_torch_ops, config.allow_library_gemm, fp32_dots)
    more = routes.run(tree)
    found += _AstGuard(config, names.inits).run(tree)
    seen = {_line_in(v) for v in found}
    found += [v for v in more if _line_in(v) not in seen]  # one reason per line is enough
    if be.name == "cuda":
        found += _cpp_violations(tree, config.allow_torch_ops)
    if found:
        return GuardrailVerdict(False, found[0], tuple(found))
    return GuardrailVerdict(True)


def _without_docstrings(code: str, tree: ast.AST) -> str:
    """Blank the docstrings (prose) so patterns look only at code and code-bearing strings."""
    lines = code.splitlines(keepends=True)
    for doc in _docstrings(tree):
        for i in range(doc.lineno - 1, min(doc.end_lineno or doc.lineno, len(lines))):
            lines[i] = "\n"
    return "".join(lines)


def _docstrings(tree: ast.AST) -> list[ast.Constant]:
    nodes = [tree] + [
        n
        for n in ast.walk(tree)
        if isinstance(n, (ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef))
    ]
    firsts = [n.body[0] for n in nodes if getattr(n, "body", None)]
    return [
        f.value
        for f in firsts
        if isinstance(f, ast.Expr)
        and isinstance(f.value, ast.Constant)
        and isinstance(f.value.value, str)
    ]


def _line_of(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def _cpp_violations(tree: ast.AST, allow_torch_ops: bool) -> list[str]:
    """The C++ in a CUDA candidate's strings: PyTorch's compute, registry or switches."""
    out, prose = [], {id(d) for d in _docstrings(tree)}
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Constant) and isinstance(node.value, str)):
            continue
        if id(node) in prose:
            continue
        text = node.value
        hits = [
            (m, "PyTorch internals", "registry or global state")
            for m in CUDA_MACHINERY.finditer(text)
        ]
        hits += [(m, "host access", "reaches the process") for m in CUDA_HOST.finditer(text)]
        if not allow_torch_ops:
            hits += [
                (m, "PyTorch compute call", "falls back to PyTorch")
                for rx in (CUDA_TORCH_CALL, CUDA_METHOD_CALL)
                for m in rx.finditer(text)
                if _cpp_compute(m, rx is CUDA_METHOD_CALL)
            ]
        for m, what, why in hits:
            line = node.lineno + text.count("\n", 0, m.start())
            out.append(f"{what} {m.group(0).strip()!r} in C++ at line {line} ({why})")
    return out


def _cpp_compute(m: re.Match, method: bool) -> bool:
    name = m.group(1)
    if not method:
        return name not in CUDA_TORCH_OK
    in_place = name.endswith("_") and not name.endswith("__") and name not in INPLACE_OK
    return name in COMPUTE_METHODS or in_place


def _line_in(violation: str) -> str:
    m = re.search(r"at line (\d+)", violation)
    return m.group(1) if m else violation


def _precision_violations(tree, code, banned, precision: Precision, backend: str) -> list[str]:
    out = []
    allowed = {
        Precision.FP32: set(),
        Precision.TF32: {"TF32 flag", "matmul precision flag", "tl.dot with TF32"},
        Precision.BF16: {"half-precision type", "tensor-core or library matmul", "TF32 flag"},
        Precision.FP16: {"half-precision type", "tensor-core or library matmul", "TF32 flag"},
    }[precision]
    for pattern, what in banned:
        if what in allowed:
            continue
        m = re.search(pattern, code)
        if m:
            out.append(
                f"{what} {m.group(0)!r} at line {_line_of(code, m.start())} is not allowed "
                f"under the {precision.value} precision policy"
            )
    if backend == "triton" and precision is Precision.FP32:
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "dot"
                and not _ieee_dot(node)
            ):
                out.append(
                    f'tl.dot at line {node.lineno} without input_precision="ieee" uses TF32 on '
                    "fp32 inputs; not allowed under the fp32 precision policy"
                )
    return out


def _ieee_dot(call: ast.Call) -> bool:
    """The literal keyword `input_precision="ieee"`, nothing that could override it: no
    precision by position (after a, b, acc), no *args or **kwargs, no allow_tf32 but False."""
    if len(call.args) > 3 or any(isinstance(a, ast.Starred) for a in call.args):
        return False
    kws = {kw.arg: kw.value for kw in call.keywords}
    if None in kws or not _literal(kws.get("allow_tf32", ast.Constant(False)), False):
        return False
    return _literal(kws.get("input_precision"), "ieee")


def _literal(node: ast.AST | None, value: object) -> bool:
    return (
        isinstance(node, ast.Constant) and type(node.value) is type(value) and node.value == value
    )


class _AstGuard(ast.NodeVisitor):
    """Walks the module once and collects violations of the strict default."""

    def __init__(self, config: GuardrailConfig, inits: set[int]):
        self.config = config
        self.inits = inits  # the __init__ methods that may build weights with torch
        self.found: list[str] = []
        self.torch_aliases: set[str] = {"torch"}
        self.module_aliases: dict[str, str] = {}  # local name -> module
        self.in_init = 0

    def run(self, tree: ast.AST) -> list[str]:
        self.visit(tree)
        return self.found

    def _flag(self, node: ast.AST, msg: str) -> None:
        self.found.append(f"{msg} at line {getattr(node, 'lineno', '?')}")

    def visit_Import(self, node: ast.Import) -> None:
        for a in node.names:
            self._check_module(node, a.name)
            local = a.asname or a.name.split(".")[0]
            self.module_aliases[local] = a.name if a.asname else a.name.split(".")[0]
            if a.name == "torch":
                self.torch_aliases.add(local)
            if a.name == "torch.nn.functional" and a.asname:
                self.torch_aliases.add(a.asname)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        mod = node.module or ""
        self._check_module(node, mod)
        for a in node.names:
            self._check_module(node, f"{mod}.{a.name}")
            local = a.asname or a.name
            self.module_aliases[local] = f"{mod}.{a.name}"
            if mod.startswith("torch") and a.name in ("functional",):
                self.torch_aliases.add(local)
            if a.name in BANNED_NAMES and mod not in ("triton", "triton.language"):
                self._flag(node, f"import of {a.name!r} ({BANNED_NAMES[a.name]})")
            if a.name in BANNED_MODULES:  # a re-export: `from torch.cuda.graphs import gc`
                self._flag(node, f"import of banned module {a.name!r} from {mod!r}")
            if mod.split(".")[0] == "os" and a.name not in ("environ", "getenv"):
                self._flag(node, f"import of os.{a.name} (OS access)")

    def _check_module(self, node, name: str) -> None:
        parts = name.split(".")
        if parts[0] in BANNED_MODULES:
            self._flag(node, f"import of banned module {name!r}")
        if name.startswith("torch.cuda.Stream") or name in ("torch.multiprocessing", "os.system"):
            self._flag(node, f"import of banned name {name!r}")

    def visit_Try(self, node: ast.AST) -> None:
        self._flag(node, "try/except (a fallback path is not allowed)")
        self.generic_visit(node)

    visit_TryStar = visit_Try

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        for base in node.bases:
            if isinstance(base, ast.Name) and base.id == "Model":
                self._flag(node, "subclassing the reference Model")
        self.generic_visit(node)

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        """Only an nn.Module's __init__ (and the methods only it calls) may compute with
        torch; a function or lambda defined inside it runs later and is checked as forward is."""
        outer, self.in_init = self.in_init, int(id(node) in self.inits)
        self.generic_visit(node)
        self.in_init = outer

    visit_AsyncFunctionDef = visit_Lambda = visit_FunctionDef

    def visit_Name(self, node: ast.Name) -> None:
        if node.id in BANNED_NAMES:
            self._flag(node, f"use of {node.id!r} ({BANNED_NAMES[node.id]})")
        if node.id.startswith("__") and node.id.endswith("__") and node.id not in ALLOWED_DUNDERS:
            self._flag(node, f"use of {node.id!r}")
        self.generic_visit(node)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        attr = node.attr
        if attr.startswith("__") and attr.endswith("__") and attr not in ALLOWED_DUNDERS:
            self._flag(node, f"access to {attr!r} (introspection)")
        if attr in FRAME_ATTRS:
            self._flag(node, f"access to {attr!r} (introspection)")
        if attr in STREAM_ATTRS:
            self._flag(node, f"use of CUDA streams or graphs ({attr!r})")
        on_os = isinstance(node.value, ast.Name) and node.value.id == "os"
        if on_os and attr not in ("environ", "getenv"):
            self._flag(node, f"use of os.{attr} (OS access)")
        self.generic_visit(node)

    def visit_Assign(self, node: ast.Assign) -> None:
        for t in node.targets:
            self._check_patch(t)
        root = _root_name(node.value) if isinstance(node.value, (ast.Name, ast.Attribute)) else None
        if root in self.module_aliases or root in self.torch_aliases:
            # `_t = torch`, `_c = sandbox.Clock`: the alias stands for a module's object
            for t in node.targets:
                if isinstance(t, ast.Name):
                    self.module_aliases[t.id] = self.module_aliases.get(root, root)
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self._check_patch(node.target)
        self.generic_visit(node)

    def _check_patch(self, target: ast.AST) -> None:
        if isinstance(target, ast.Attribute):
            root = _root_name(target)
            if root in self.module_aliases or root in self.torch_aliases:
                self._flag(target, f"assignment to an attribute of module {root!r} (monkeypatch)")

    def visit_BinOp(self, node: ast.BinOp) -> None:
        if (
            isinstance(node.op, ast.MatMult)
            and not self.in_init
            and not self.config.allow_torch_ops
        ):
            self._flag(node, "matrix multiply with '@' (falls back to PyTorch)")
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        f = node.func
        if isinstance(f, ast.Name) and f.id == "getattr" and len(node.args) >= 2:
            name = node.args[1]
            if not isinstance(name, ast.Constant):
                self._flag(node, "getattr with a computed name (obfuscation)")
            elif _root_name(node.args[0]) in self.torch_aliases and not self.in_init:
                if name.value not in TORCH_OK and not self.config.allow_torch_ops:
                    self._flag(node, f"getattr of torch's {name.value!r} (falls back to PyTorch)")
        if _is_env_read(f):
            key = node.args[0] if node.args else None
            if not (isinstance(key, ast.Constant) and key.value in ENV_KEYS_OK):
                self._flag(node, "reading the environment (secrets stay out of candidates)")
        chain = attr_chain(f) if isinstance(f, ast.Attribute) else []
        library_gemm = self.config.allow_library_gemm and chain and chain[-1] in LIBRARY_GEMMS
        if chain[:1] == ["extern_kernels"] and not library_gemm and not self.in_init:
            what = "a library GEMM" if chain[-1] in LIBRARY_GEMMS else "a library kernel"
            self._flag(
                node,
                f"{what} call {'.'.join(chain)!r} (cuBLAS/cuDNN, not the candidate's own "
                "kernel; guardrails.allow_library_gemm permits GEMMs)",
            )
        elif (
            not self.in_init
            and not library_gemm
            and not self.config.allow_torch_ops
            and isinstance(f, ast.Attribute)
        ):
            root = _root_name(f)
            if root in self.torch_aliases and chain:
                name = chain[-1]
                is_query = name in TORCH_OK or name[0].isupper()
                if not is_query and not _is_cuda_query(chain):
                    self._flag(
                        node, f"PyTorch compute call {'.'.join(chain)!r} (falls back to PyTorch)"
                    )
            elif f.attr in COMPUTE_METHODS and root not in ("tl", "triton", "math", "libdevice"):
                module = self.module_aliases.get(root, "")
                device_helpers = module.startswith(TRITON_HELPER_MODULES)
                if not device_helpers and (
                    root not in self.module_aliases or module.startswith("torch")
                ):
                    self._flag(node, f"tensor compute method .{f.attr}() (falls back to PyTorch)")
        self.generic_visit(node)

    def visit_Subscript(self, node: ast.Subscript) -> None:
        if _is_environ(node.value):
            self._flag(node, "reading the environment (secrets stay out of candidates)")
        self.generic_visit(node)


def _is_environ(node: ast.AST) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == "environ"


def _is_env_read(f: ast.AST) -> bool:
    if isinstance(f, ast.Attribute) and f.attr == "getenv":
        return True
    return (
        isinstance(f, ast.Attribute)
        and f.attr in ("get", "pop", "items", "keys", "values", "copy")
        and _is_environ(f.value)
    )


def _is_cuda_query(chain: list[str]) -> bool:
    return len(chain) >= 2 and chain[-2] == "cuda" and chain[-1] in TORCH_OK


def _root_name(node: ast.AST) -> str | None:
    while isinstance(node, ast.Attribute):
        node = node.value
    while isinstance(node, ast.Call):
        node = node.func
        while isinstance(node, ast.Attribute):
            node = node.value
    return node.id if isinstance(node, ast.Name) else None


def attr_chain(node: ast.AST) -> list[str]:
    chain = []
    while isinstance(node, ast.Attribute):
        chain.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        chain.append(node.id)
        return list(reversed(chain))
    return []
