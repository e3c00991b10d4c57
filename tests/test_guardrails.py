"""Static guardrails: the strict default, its configuration and the precision policy."""

import json
from pathlib import Path

import pytest

from fitness.guardrails import GuardrailConfig, check, defines_model_new
from fitness.inductor_seed import seeds_from_capture
from fitness.precision import Precision
from fitness.workloads import resolve_workload

ROOT = Path(__file__).resolve().parents[1]
SEEDS = ROOT / "experiments" / "workloads" / "seeds"
STRICT = GuardrailConfig()
GEMM_OK = GuardrailConfig(allow_library_gemm=True)
TORCH_OK = GuardrailConfig(allow_torch_ops=True)

HEADER = """
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def k(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=m), mask=m)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.randn(4)

    def forward(self, x):
        y = torch.empty_like(x)
        k[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
"""


def src(body: str = "        return y", prelude: str = "") -> str:
    return prelude + HEADER + body + "\n"


def test_honest_candidate_passes():
    assert check(src()).ok


def honest_candidates() -> list:
    """Every honest candidate in the repository, with the backend and guardrails it is judged
    with: seeds, the scripted agent's kernels, the GPU test candidates, the control among the
    exploits, the prompts' examples, and the compiler seeds made from the Inductor fixtures."""
    files = [
        *SEEDS.glob("*.py"),
        *(ROOT / "experiments" / "agents" / "kernels").glob("*.py"),
        *(ROOT / "tests" / "gpu_candidates").glob("*.py"),
        ROOT / "tests" / "exploits" / "7_clamp_honest.py",
    ]
    out = [
        pytest.param(f.read_text(), "cuda" if "__cuda" in f.stem else "triton", STRICT, id=f.stem)
        for f in sorted(files)
    ]
    for example in sorted((ROOT / "operators" / "prompts" / "examples").glob("[!_]*.j2")):
        raw = example.read_text().split("{% raw %}")[1].split("{% endraw %}")[0]
        out.append(pytest.param(raw, example.stem, STRICT, id=f"prompt-{example.stem}"))
    for capture in sorted((ROOT / "tests" / "fixtures" / "inductor").glob("*.json")):
        workload = resolve_workload(str(ROOT / "tests/fixtures/workloads" / f"{capture.stem}.py"))
        for seed in seeds_from_capture(json.loads(capture.read_text()), workload):
            config = GEMM_OK if seed.library_calls else STRICT
            out.append(pytest.param(seed.source, "triton", config, id=f"inductor-{seed.mode}"))
    return out


@pytest.mark.parametrize("source, backend, config", honest_candidates())
def test_every_honest_candidate_passes_the_guardrails_it_is_judged_with(source, backend, config):
    verdict = check(source, backend, config=config)
    assert verdict.ok, verdict.violations


@pytest.mark.parametrize(
    "body, prelude, expected",
    [
        ("        return torch.matmul(x, x)", "", "PyTorch compute call 'torch.matmul'"),
        ("        return y.sum()", "", "tensor compute method .sum()"),
        ("        return x @ x", "", "matrix multiply"),
        (
            "        try:\n            return y\n        except Exception:\n            return x",
            "",
            "try/except",
        ),
        ("        return Model()(x)", "", "reference Model"),
        ("        return y", "import gc\n", "banned module 'gc'"),
        ("        return y", "import threading\n", "banned module 'threading'"),
        ("        return y", "import ctypes\n", "banned module 'ctypes'"),
        ("        return y", "import inspect\n", "banned module 'inspect'"),
        ("        return __import__('g' + 'c') and y", "", "'__import__'"),
        ("        return getattr(torch, 'mat' + 'mul')(x, x)", "", "getattr with a computed name"),
        ("        s = torch.cuda.Stream()\n        return y", "", "streams"),
        ("        open('/tmp/x', 'w')\n        return y", "", "file I/O"),
        (
            "        import os\n        k = os.environ['OPENAI_API_KEY']\n        return y",
            "",
            "environment",
        ),
        ("        import os\n        os.getenv('HOME')\n        return y", "", "environment"),
        ("        torch.cuda.synchronize = lambda: None\n        return y", "", "monkeypatch"),
        ("        torch.backends.cuda.matmul.allow_tf32 = True\n        return y", "", "TF32"),
        ("        return y.to(torch.float16)", "", "half-precision"),
        ("        return y.__class__", "", "introspection"),
    ],
)
def test_strict_default_rejects(body, prelude, expected):
    verdict = check(src(body, prelude))
    assert not verdict.ok
    assert expected in verdict.reason, verdict.reason


def test_own_kernel_is_required():
    plain = (
        "import torch\nclass ModelNew(torch.nn.Module):\n"
        "    def forward(self, x):\n        return x\n"
    )
    verdict = check(plain, "triton")
    assert not verdict.ok and "@triton.jit" in verdict.reason
    verdict = check(plain, "cuda")
    assert not verdict.ok and "__global__" in verdict.reason


def test_tl_dot_needs_ieee_under_fp32_only():
    dot = HEADER.replace(
        "tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=m), mask=m)",
        "a = tl.load(x_ptr + offs)\n    tl.store(y_ptr + offs, tl.dot(a, a))",
    )
    verdict = check(dot + "        return y\n")
    assert not verdict.ok and 'input_precision="ieee"' in verdict.reason
    assert check(dot + "        return y\n", precision=Precision.TF32).ok
    ieee = dot.replace("tl.dot(a, a)", 'tl.dot(a, a, input_precision="ieee")')
    assert check(ieee + "        return y\n").ok


def test_half_types_allowed_under_a_half_policy():
    body = "        return y.to(torch.bfloat16)"
    assert not check(src(body)).ok
    verdict = check(src(body), precision=Precision.BF16)
    # the type is allowed; the tensor method itself is not compute
    assert verdict.ok, verdict.reason


def test_configurable_patterns_and_switches():
    assert not check(src(), config=GuardrailConfig(required=(r"tl\.dot",))).ok
    verdict = check(src(), config=GuardrailConfig(banned=(r"cdiv",)))
    assert not verdict.ok and "cdiv" in verdict.reason
    allowed = GuardrailConfig(allow_torch_ops=True)
    assert check(src("        return torch.relu(y)"), config=allowed).ok
    assert check(src("        return torch.matmul(x, x)"), config=GuardrailConfig(enabled=False)).ok


def test_cuda_sources_may_not_call_aten_compute():
    cuda = '''
import torch
from torch.utils.cpp_extension import load_inline
cuda_src = """
__global__ void k(float* x) {}
torch::Tensor f(torch::Tensor a) { return torch::matmul(a, a); }
"""
mod = load_inline(name="m", cpp_sources="", cuda_sources=cuda_src, functions=["f"])
class ModelNew(torch.nn.Module):
    def forward(self, a):
        return mod.f(a)
'''
    verdict = check(cuda, "cuda")
    assert not verdict.ok and "torch::matmul" in verdict.reason


def test_defines_model_new():
    assert defines_model_new(src())
    assert not defines_model_new("class Model: pass\n")
    assert not defines_model_new("def broken(:\n")


# --- device code inside @triton.jit; library kernels through extern_kernels ----------------

INDUCTOR_IMPORTS = """
import triton
import triton.language as tl
from torch._inductor.runtime import triton_helpers
from torch._inductor.runtime.triton_helpers import math as tl_math
{extra}

"""

HELPER = """{decorator}
def helper(a_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    a = tl.load(a_ptr + offs)
    tl.store(out_ptr + offs, {call})"""

DEVICE_CALLS = ["triton_helpers.maximum(a, a)", "tl_math.exp(a)"]


def inductor_src(
    call: str = "a",
    decorator: str = "@triton.jit",
    extra: str = "",
    forward: str = "        return y",
) -> str:
    """`src` (HEADER's honest candidate) after Inductor's helper imports and a helper."""
    helper = HELPER.format(decorator=decorator, call=call)
    return src(forward, prelude=INDUCTOR_IMPORTS.format(extra=extra) + helper + "\n")


def test_the_inductor_template_is_an_honest_candidate():
    verdict = check(inductor_src())
    assert verdict.ok, verdict.reason


@pytest.mark.parametrize("call", DEVICE_CALLS)
@pytest.mark.parametrize(
    "decorator, extra",
    [
        ("@triton.jit", ""),
        ('@triton.jit(do_not_specialize=["n"])', ""),
        ("@jit", "from triton import jit"),
        ("@jit()", "from triton import jit"),
        ("@tr.jit", "import triton as tr"),
    ],
)
def test_inductor_helpers_inside_a_triton_jit_function_are_device_code(call, decorator, extra):
    verdict = check(inductor_src(call, decorator, extra))
    assert verdict.ok, verdict.reason


@pytest.mark.parametrize("call", DEVICE_CALLS)
@pytest.mark.parametrize(
    "decorator, extra",
    [
        ("@jit", "def jit(f):\n    return f"),  # a `jit` of the candidate's own
        ("", ""),  # no decorator at all
    ],
)
def test_inductors_device_helpers_are_never_pytorch_compute(call, decorator, extra):
    """triton_helpers holds @triton.jit functions only: they cannot compute on host tensors
    (the launch trace would see any ATen op anyway), so they are not a PyTorch fallback."""
    verdict = check(inductor_src(call, decorator, extra))
    assert verdict.ok, verdict.reason


@pytest.mark.parametrize("forward", ["        return y.maximum(y)", "        return y.exp()"])
def test_the_same_method_on_a_tensor_is_still_a_fallback(forward):
    verdict = check(inductor_src(forward=forward))
    assert not verdict.ok and "tensor compute method" in verdict.reason, verdict.reason


EXTERN = "from torch._inductor.select_algorithm import extern_kernels"


def test_extern_kernels_mm_is_a_named_library_gemm_under_the_strict_default():
    forward = "        extern_kernels.mm(x, x, out=y)\n        return y"
    verdict = check(inductor_src(extra=EXTERN, forward=forward), "triton")
    assert not verdict.ok
    assert "a library GEMM call 'extern_kernels.mm'" in verdict.reason, verdict.reason
    assert "allow_library_gemm" in verdict.reason


@pytest.mark.parametrize("config", [GuardrailConfig(), GEMM_OK], ids=["strict", "gemm-allowed"])
def test_extern_kernels_convolution_is_a_library_kernel_even_with_gemms_allowed(config):
    forward = "        return extern_kernels.convolution(x, x, None, stride=(1, 1))"
    verdict = check(inductor_src(extra=EXTERN, forward=forward), "triton", config=config)
    assert not verdict.ok
    assert "a library kernel call 'extern_kernels.convolution'" in verdict.reason, verdict.reason


@pytest.mark.parametrize(
    "forward",
    [
        "        extern_kernels.mm(x, x, out=y)\n        return y",
        "        extern_kernels.addmm(y, x, x, alpha=1, beta=1, out=y)\n        return y",
        "        extern_kernels.bmm(x, x, out=y)\n        return y",
        "        return torch.mm(x, x)",
        "        return torch.matmul(x, x)",
        "        return torch.nn.functional.linear(x, x)",
    ],
)
def test_allow_library_gemm_lets_library_gemms_pass(forward):
    source = inductor_src(extra=EXTERN, forward=forward)
    assert not check(source, "triton").ok  # the strict default refuses each
    verdict = check(source, "triton", config=GEMM_OK)
    assert verdict.ok, verdict.reason


@pytest.mark.parametrize(
    "forward, expected",
    [
        ("        return torch.relu(y)", "PyTorch compute call 'torch.relu'"),
        ("        return y.sum()", "tensor compute method .sum()"),
        ("        return torch.softmax(y, 0)", "PyTorch compute call 'torch.softmax'"),
    ],
)
def test_allow_library_gemm_still_refuses_other_pytorch_compute(forward, expected):
    verdict = check(inductor_src(extra=EXTERN, forward=forward), "triton", config=GEMM_OK)
    assert not verdict.ok
    assert expected in verdict.reason, verdict.reason


def test_extern_kernels_in_init_are_not_flagged():
    source = inductor_src(extra=EXTERN).replace(
        "class ModelNew(nn.Module):\n",
        "class ModelNew(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        "        self.w = extern_kernels.convolution(torch.ones(1), torch.ones(1), None)\n\n",
    )
    assert "extern_kernels.convolution" in source
    verdict = check(source, "triton")
    assert verdict.ok, verdict.reason


def test_allow_library_gemm_is_part_of_the_config_key():
    assert GuardrailConfig().key() != GEMM_OK.key()


def test_pytorch_compute_in_a_jit_function_called_through_fn_is_refused():
    helper = "@triton.jit\ndef helper(x):\n    return torch.matmul(x, x).sum()\n"
    source = inductor_src(forward="        return helper.fn(x)").replace(
        "\n\nclass ModelNew", "\n\n" + helper + "\n\nclass ModelNew"
    )
    assert "helper.fn(x)" in source and "torch.matmul" in source
    assert not check(source, "triton").ok


def test_with_library_gemms_allowed_a_triton_candidate_must_launch_its_own_kernel():
    """cuBLAS kernel names contain `gemm`: a dummy Triton kernel of that name, never launched,
    does not count as the candidate's own kernel once library GEMMs are allowed."""
    from fitness.judge import own_kernel_ran

    trace = {"kernels": ["sm90_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize128x128x32"]}
    assert own_kernel_ran(trace, ["gemm"], {}, "cuda", "triton", library_gemm=False)
    assert not own_kernel_ran(trace, ["gemm"], {}, "cuda", "triton", library_gemm=True)
    assert not own_kernel_ran(trace, ["gemm"], {"gemm": 0}, "cuda", "triton", library_gemm=True)
    launched = {"gemm": 3}
    assert own_kernel_ran(trace, ["gemm"], launched, "cuda", "triton", library_gemm=True)
    trace = {"kernels": ["triton_poi_fused_addmm_relu_0", "sm90_xmma_gemm_f32f32"]}
    own = {"triton_poi_fused_addmm_relu_0": 220}
    assert own_kernel_ran(trace, list(own), own, "cuda", "triton", library_gemm=True)
    assert not own_kernel_ran({"kernels": []}, ["k"], {"k": 1}, "cuda", "triton", False)
    assert own_kernel_ran({}, ["k"], {"k": 1}, "cpu", "triton", False)  # the interpreter
    assert not own_kernel_ran({}, ["k"], {"k": 0}, "cpu", "triton", False)


# --- routes around the evaluator, each banned in general ----------------------------------

WEIGHT = "        self.w = torch.randn(4)\n"
STORE = "tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=m), mask=m)"


def init_src(init: str, body: str = "        return y", prelude: str = "") -> str:
    """`src` with `init` (lines of ModelNew.__init__) in place of HEADER's weight."""
    return src(body, prelude).replace(WEIGHT, init)


def kernel_src(device: str, prelude: str = "", body: str = "        return y") -> str:
    """`src` whose kernel stores `device`, computed from `a`, a tile of x."""
    kernel = f"a = tl.load(x_ptr + offs)\n    tl.store(y_ptr + offs, {device})"
    return src(body, prelude).replace(STORE, kernel)


LINEAR = "        self.lin = nn.Linear(4, 4)\n"

LIBRARIES = "numpy scipy cupy jax jaxlib numba tensorflow mlx pandas sklearn torch_xla dask numexpr"
IN_PLACE = [
    ("add_", "x"),
    ("mul_", "2.0"),
    ("relu_", ""),
    ("clamp_min_", "0.0"),
    ("exp_", ""),
    ("sigmoid_", ""),
    ("addmm_", "x, x"),
    ("baddbmm_", "x, x"),
    ("copy_", "x"),
]
INDUCTOR_HELPERS = "from torch._inductor.runtime import triton_helpers\n"
HELPER_MODULE = """
class _Prod(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.r = torch.mm(a, a)
"""

# Falling back to PyTorch (or the host) in forward: refused unless torch ops are allowed.
# (source, a word of the reason), each route on top of an honest launch.
FALLBACKS = {
    "item": (src("        s = y.item()\n        return y"), "host copy .item()"),
    "cpu": (src("        h = y.cpu()\n        return y"), "host copy .cpu()"),
    "to-cpu": (src("        h = y.to('cpu')\n        return y"), "host copy .to('cpu')"),
    "from_numpy": (src("        return torch.from_numpy(y)"), "torch.from_numpy"),
    **{
        f"inplace-{m}": (src(f"        y.{m}({a})\n        return y"), f".{m}()")
        for m, a in IN_PLACE
    },
    "inplace-through-a-helper": (
        src("        _same(y).clamp_min_(0.0)\n        return y", "def _same(t):\n    return t\n"),
        ".clamp_min_()",
    ),
    "inplace-getattr": (src("        getattr(y, 'mul_')(2.0)\n        return y"), ".mul_()"),
    "copy-of-matmul": (src("        y.copy_(x @ x)\n        return y"), "falls back"),
    "matmul-augassign": (src("        y @= x\n        return y"), "in-place arithmetic"),
    "out-kw": (src("        torch.zeros(4, out=y)\n        return y"), "out= on torch.zeros"),
    "torch-inplace-fn": (src("        torch.relu_(y)\n        return y"), "torch.relu_"),
    "ops-aten": (src("        return torch.ops.aten.mm.default(x, x)"), "torch.ops"),
    "torch-C": (src("        return torch._C._nn.linear(x, x)"), "torch._C"),
    "F-alias": (src("        return F.hardswish(y)", "import torch.nn.functional as F\n"), "F"),
    "nn-functional": (src("        return nn.functional.hardswish(y)"), "hardswish"),
    "from-functional": (
        src("        return hardswish(y)", "from torch.nn.functional import hardswish\n"),
        "PyTorch compute 'torch.nn.functional.hardswish'",
    ),
    "functional-module": (
        src("        return functional.hardswish(y)", "from torch.nn import functional\n"),
        "hardswish",
    ),
    "from-torch": (src("        return mm(x, x)", "from torch import mm\n"), "'torch.mm'"),
    "alias-of-torch-fn": (src("        f = torch.mm\n        return f(x, x)"), "'torch.mm'"),
    "torch-fn-as-value": (src("        return list(map(torch.mm, [x], [x]))[0]"), "'torch.mm'"),
    "tensor-method-as-value": (src("        f = y.sum\n        return f()"), ".sum used as"),
    "nn-module-call": (init_src(LINEAR, "        return self.lin(x)"), "self.lin"),
    "nn-module-forward": (init_src(LINEAR, "        return self.lin.forward(x)"), "forward()"),
    "nn-module-alias": (init_src(LINEAR, "        f = self.lin\n        return f(x)"), "handed"),
    "nn-module-subscript": (
        init_src("        self.seq = nn.Sequential(nn.ReLU())\n", "        return self.seq[0](y)"),
        "subscript",
    ),
    "nn-children": (src("        return [m for m in self.children()][0](y)"), "submodule"),
    "nn-subclass": (
        init_src("").replace("ModelNew(nn.Module)", "ModelNew(nn.Linear)"),
        "subclassing 'torch.nn.Linear'",
    ),
    "lambda-in-init": (
        init_src("        self.f = lambda a: torch.mm(a, a)\n", "        return self.f(x)"),
        "torch.mm",
    ),
    "init-helper-called-later": (
        init_src("        self.f = lambda a: self._prod(a)\n", "        return self.f(x)").replace(
            "    def forward",
            "    def _prod(self, a):\n        return torch.mm(a, a)\n\n    def forward",
        ),
        "torch.mm",
    ),
    "helper-module-in-forward": (
        src("        return _Prod(x).r", HELPER_MODULE),
        "building the module '_Prod'",
    ),
    "tensor-arithmetic": (src("        return y * 2"), "arithmetic on a tensor"),
    "tensor-negation": (src("        return -y"), "arithmetic on a tensor"),
    "tensor-comparison": (src("        return y > 0"), "comparison of tensors"),
    "tensor-augassign": (src("        y += x\n        return y"), "in-place arithmetic"),
    "tensor-builtin": (src("        return sum(y)"), "sum() of a tensor"),
    "tensor-iteration": (src("        for r in y:\n            pass\n        return y"), "iterat"),
    "tensor-scalar": (src("        s = float(y[0])\n        return y"), "float() of a tensor"),
    "tensor-comprehension": (
        src("        s = [sum(float(v) for v in r) for r in x]\n        return y"),
        "iterating over a tensor",
    ),
    "tensor-format": (src("        s = f'{y[0]}'\n        return y"), "formatted into a string"),
    "tensor-math-module": (
        src("        s = math.fsum(x.reshape(-1))\n        return y", "import math\n"),
        "math.fsum() of a tensor",
    ),
    "tensor-unbind": (src("        rows = x.unbind(0)\n        return y"), ".unbind()"),
    "tensor-method": (src("        return x.reshape(-1).logit()"), "tensor method .logit()"),
    "tensor-bound-method": (src("        f = y.logit\n        return f()"), ".logit()"),
}

# Routes refused even where an experiment allows torch ops: other libraries and host copies,
# PyTorch's machinery, computed names, the harness, global state, hidden TF32 dots.
ALWAYS = {
    **{f"import-{lib}": (src(prelude=f"import {lib}\n"), f"'{lib}'") for lib in LIBRARIES.split()},
    "from-jax-numpy": (src(prelude="from jax import numpy as jnp\n"), "array library 'jax"),
    "numpy-method": (src("        return torch.as_tensor(y.numpy())"), "host copy .numpy()"),
    "tolist": (src("        v = y.tolist()\n        return y"), "host copy .tolist()"),
    "ops-alias": (
        src("        _aten.addmm_(y, x, x)\n        return y", "_aten = torch.ops.aten\n"),
        "op registry",
    ),
    "ops-call": (src("        return torch.ops.aten.mm.default(x, x)"), "op registry"),
    "refs": (src(prelude="import torch._refs as refs\n"), "op registry"),
    "library": (src("        lib = torch.library.Library('aten', 'IMPL')\n        return y"), "op"),
    "dispatch-mode": (
        src(prelude="from torch.utils._python_dispatch import TorchDispatchMode\n"),
        "op registry",
    ),
    "function-mode": (src(prelude="from torch.overrides import TorchFunctionMode\n"), "dispatch"),
    "compile": (src("        return torch.compile(lambda a: a)(y)"), "compiles PyTorch"),
    "jit": (src(prelude="from torch import jit\n"), "compiles PyTorch"),
    "fx": (src("        g = torch.fx.symbolic_trace(self)\n        return y"), "compiles"),
    "dynamo": (src(prelude="import torch._dynamo\n"), "compiles PyTorch"),
    "vmap": (src("        return torch.vmap(torch.relu)(y)"), "compiles PyTorch"),
    "func": (src(prelude="from torch.func import functional_call\n"), "compiles PyTorch"),
    "profiler": (
        src("        on = torch.autograd.profiler._is_profiler_enabled\n        return y"),
        "profiler",
    ),
    "module-as-value": (src("        self.t = [torch]\n        return y"), "used as a value"),
    "getattr-as-value": (
        src("        return functools.reduce(getattr, ['mm'], torch)(x, x)", "import functools\n"),
        "functools.reduce",
    ),
    "from-functools-reduce": (src(prelude="from functools import reduce\n"), "functools.reduce"),
    "operator": (src("        return operator.matmul(x, x)", "import operator\n"), "operator"),
    "getattribute": (src("        return y.__getattribute__('exp')()"), "introspection"),
    "type-attribute": (src("        return type(y).exp(y)"), "type()"),
    "vars": (src("        return vars(torch)['mm'](x, x)"), "vars()"),
    "dir": (src("        names = dir(torch)\n        return y"), "dir()"),
    "sys-through-triton": (
        src("        m = triton.runtime.jit.sys.modules\n        return y"),
        "reaches a module",
    ),
    "sys-through-torch": (
        src("        m = torch.sys.modules\n        return y"),
        "reaches a module",
    ),
    "harness-string": (
        src("        m = _mods['fitness.sandbox']\n        return y", "_mods = {}\n"),
        "'fitness.sandbox'",
    ),
    "patch-through-item": (
        src("        m = _mods[0]\n        m.send = print\n        return y", "_mods = [None]\n"),
        "assignment to 'm.send'",
    ),
    "patch-kernel-launcher": (src("        k.run = print\n        return y"), "'k.run'"),
    "jit-function-run": (
        src(prelude="from triton.runtime.jit import JITFunction\n"),
        "Triton internals",
    ),
    "torch-multiprocessing": (
        src("        p = torch.multiprocessing.Process(target=print)\n        return y"),
        "reaches a module",
    ),
    "stream-alias": (
        src("        c = torch.cuda\n        s = c.Stream()\n        return y"),
        "stream",
    ),
    "current-stream": (src("        s = torch.cuda.current_stream()\n        return y"), "stream"),
    "ops-through-torch-cuda": (
        src("        return torch.cuda.torch.ops.aten.mm(x, x)"),
        "op registry",
    ),
    "triton-through-inductor-helpers": (
        src("        r = [triton_helpers.triton.runtime.jit]\n        return y", INDUCTOR_HELPERS),
        "Triton internals 'triton.runtime.jit'",
    ),
    "triton-knobs-through-core": (src("        k = tl.core.knobs\n        return y"), "knobs"),
    "traceback-through-torch-cuda": (
        src("        s = torch.cuda.traceback.extract_stack()\n        return y"),
        "reaches a module",
    ),
    "cuda-graphs": (
        src("        h = torch.cuda.graphs.graph_pool_handle()\n        return y"),
        "graphs",
    ),
    "cuda-sleep": (src("        torch.cuda._sleep(10)\n        return y"), "torch.cuda._sleep"),
    "sync-debug": (
        src("        torch.cuda.set_sync_debug_mode(0)\n        return y"),
        "debug state",
    ),
    "set-default-dtype": (
        src("        torch.set_default_dtype(torch.float64)\n        return y"),
        "global state",
    ),
    "deterministic": (
        src("        torch.use_deterministic_algorithms(True)\n        return y"),
        "global state",
    ),
    "autocast": (src("        with torch.autocast('cuda'):\n            return y"), "global state"),
    "backends-alias": (
        src("        b.cudnn.benchmark = True\n        return y", "b = torch.backends\n"),
        "monkeypatch",
    ),
    "os-alias": (
        src("        o.system('true')\n        return y", "import os as o\n"),
        "OS access",
    ),
    "environ-write": (
        src("        os.environ.setdefault('K', '1')\n        return y", "import os\n"),
        "os.environ.setdefault",
    ),
    "triton-knobs": (
        src("        triton.knobs.language.fp32_default = 'tf32'\n        return y"),
        "monkeypatch",
    ),
    "getenv-imported": (
        src("        k = getenv('OPENAI_API_KEY')\n        return y", "from os import getenv\n"),
        "reading the environment",
    ),
    "environ-get-as-value": (
        src("        g = os.environ.get\n        return y", "import os\n"),
        "os.environ.get",
    ),
    "frame": (
        src("        g = (i for i in ()).gi_frame.f_back\n        return y"),
        "introspection",
    ),
    "dot-precision-constant": (
        kernel_src("tl.dot(a, a, input_precision=P)", 'P = "tf32"\n'),
        'input_precision="ieee"',
    ),
    "dot-precision-positional": (
        kernel_src('tl.dot(a, a, None, "tf32")'),
        'input_precision="ieee"',
    ),
    "dot-precision-kwargs": (
        kernel_src("tl.dot(a, a, **KW)", 'KW = {"input_precision": "tf32"}\n'),
        'input_precision="ieee"',
    ),
    "dot-allow-tf32-variable": (
        kernel_src('tl.dot(a, a, input_precision="ieee", allow_tf32=T)', "T = True\n"),
        "allow_tf32",
    ),
    "dot-alias": (kernel_src("dot(a, a)", "from triton.language import dot\n"), "alias of tl.dot"),
    "dot-assigned": (kernel_src("d(a, a)", "d = tl.dot\n"), "alias of tl.dot"),
    "dot-getattr": (kernel_src('getattr(tl, "dot")(a, a)'), "alias of tl.dot"),
    "dot-scaled": (kernel_src('tl.dot_scaled(a, None, "e4m3", a, None, "e4m3")'), "dot_scaled"),
    "f32-default-env": (
        src("        e = 'TRITON_F32_DEFAULT'\n        return y"),
        "TF32 under the fp32 policy",
    ),
    "tf32-inline-asm": (
        kernel_src(
            'tl.inline_asm_elementwise("cvt.rna.tf32.f32 $0, $1;", "=r,r", [a], '
            "dtype=tl.float32, is_pure=True, pack=1)"
        ),
        "low-precision",
    ),
}


@pytest.mark.parametrize("source, expected", FALLBACKS.values(), ids=FALLBACKS.keys())
def test_each_fallback_route_is_refused_by_the_strict_default(source, expected):
    verdict = check(source)
    assert not verdict.ok
    assert expected in verdict.reason, verdict.violations


@pytest.mark.parametrize("source, expected", ALWAYS.values(), ids=ALWAYS.keys())
def test_each_route_around_the_evaluator_is_refused_even_with_torch_ops_allowed(source, expected):
    assert not check(source).ok
    verdict = check(source, config=TORCH_OK)
    assert not verdict.ok
    assert expected in verdict.reason, verdict.violations


AUTOGRAD_FUNCTION = """
class _Copy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        y = torch.empty_like(x)
        k[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
        return y
"""
BOX = "class _Box:\n    pass\n"
RESET = """    def reset_parameters(self):
        nn.init.uniform_(self.w)
        self.w.data.mul_(0.5)
"""

# Near misses that are honest: each passes the strict default.
HONEST = {
    "zero_": src("        y.zero_()\n        return y"),
    "weights-read": init_src(
        LINEAR, "        w, b = self.lin.weight, self.lin.bias\n        return y"
    ),
    "module-attribute-read": init_src(
        "        self.ln = nn.LayerNorm(4)\n", "        eps = float(self.ln.eps)\n        return y"
    ),
    "weights-built-in-init": init_src(
        LINEAR + "        with torch.no_grad():\n            self.lin.weight.normal_(0.0, 0.5)\n"
    ),
    "getattr-on-self": src("        w = getattr(self, 'w', None)\n        return y"),
    "shape-arithmetic": src(
        "        M = x.shape[0] * 2 + x.numel() // 4 - len(x)\n        return y"
    ),
    "identity-compare": src(
        "        if x is None or x.dim() != 1:\n            return y\n        return y"
    ),
    "dtype-query": src("        e = torch.finfo(x.dtype).max\n        return y"),
    "interpreter-flag": src(
        "        i = os.environ.get('TRITON_INTERPRET')\n        return y", "import os\n"
    ),
    "future-import": src(prelude="from __future__ import annotations\n"),
    "autograd-function": src("        return _Copy.apply(x)").replace(
        "\n\nclass ModelNew", AUTOGRAD_FUNCTION + "\n\nclass ModelNew"
    ),
    "own-object-attribute": src("        b = _Box()\n        b.v = y\n        return b.v", BOX),
    "module-level-cache": src("        _CFG[x.numel()] = 1024\n        return y", "_CFG = {}\n"),
    "triton-device-query": src(
        "        p = triton.runtime.driver.active.utils.get_device_properties(0)\n        return y"
    ),
    "reset-parameters": init_src(
        "        self.w = nn.Parameter(torch.empty(4))\n        self.reset_parameters()\n"
    ).replace("    def forward", RESET + "\n    def forward"),
    "ieee-dot": kernel_src('tl.dot(a, a, input_precision="ieee")'),
    "ieee-dot-with-acc": kernel_src(
        'tl.dot(a, a, a, input_precision="ieee", out_dtype=tl.float32)'
    ),
}


@pytest.mark.parametrize("source", HONEST.values(), ids=HONEST.keys())
def test_honest_near_misses_pass_the_strict_default(source):
    verdict = check(source)
    assert verdict.ok, verdict.violations


@pytest.mark.parametrize(
    "body, init",
    [
        ("        y.add_(x)\n        return y", WEIGHT),
        ("        return y * 2 + y.item()", WEIGHT),
        ("        return nn.functional.hardswish(y)", WEIGHT),
        ("        torch.mm(x, x, out=y)\n        return y", WEIGHT),
        ("        return self.lin(x)", LINEAR),
    ],
)
def test_allow_torch_ops_lets_pytorch_compute_pass(body, init):
    source = init_src(init, body)
    assert not check(source).ok
    verdict = check(source, config=TORCH_OK)
    assert verdict.ok, verdict.violations


@pytest.mark.parametrize(
    "body, init",
    [
        ("        return self.lin(x)", LINEAR),
        ("        y.addmm_(x, x)\n        return y", WEIGHT),
        ("        torch.mm(x, x, out=y)\n        return y", WEIGHT),
    ],
)
def test_allow_library_gemm_lets_gemm_modules_and_in_place_gemms_pass(body, init):
    source = init_src(init, body)
    assert not check(source).ok
    verdict = check(source, config=GEMM_OK)
    assert verdict.ok, verdict.violations


CUDA = '''
import torch
from torch.utils.cpp_extension import load_inline
cuda_src = """
__global__ void k(float* x) {{}}
torch::Tensor f(torch::Tensor a) {{
    auto out = torch::empty_like(a);
    {line}
    return out;
}}
"""
mod = load_inline(name="m", cpp_sources="", cuda_sources=cuda_src, functions=["f"])
class ModelNew(torch.nn.Module):
    def forward(self, a):
        return mod.f(a)
'''


@pytest.mark.parametrize(
    "line, expected",
    [
        ("out = at::_ops::mm::call(a, a);", "PyTorch internals 'at::_ops'"),
        ("out.addmm_(a, a);", "PyTorch compute call '.addmm_('"),
        ("out = at::cumsum(a, 0);", "PyTorch compute call 'at::cumsum('"),
        ("at::globalContext().setAllowTF32CuBLAS(true);", "'at::globalContext'"),
        ("out = torch::nn::functional::linear(a, a);", "'torch::nn'"),
        ('py::module_::import("fitness.sandbox");', "host access 'py::'"),
        ("std::thread t([]{});", "host access 'std::thread'"),
        ("auto h = at::cuda::getCurrentCUDABlasHandle();", "getCurrentCUDABlasHandle("),
        ('system("true");', "host access 'system('"),
    ],
)
def test_cuda_sources_may_not_reach_pytorch_or_the_host_from_cpp(line, expected):
    verdict = check(CUDA.format(line=line), "cuda")
    assert not verdict.ok
    assert expected in verdict.reason, verdict.violations
    assert "at line 8" in verdict.reason  # the C++ line, counted in the Python file


def test_cuda_sources_may_allocate_and_guard_the_device():
    line = (
        "const at::cuda::CUDAGuard g(a.device()); auto s = at::cuda::getCurrentCUDAStream();"
        " auto z = torch::zeros({4}, a.options()); int n = at::ceil_div(a.numel(), 256);"
    )
    verdict = check(CUDA.format(line=line), "cuda")
    assert verdict.ok, verdict.violations
