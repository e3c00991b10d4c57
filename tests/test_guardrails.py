"""Static guardrails: the strict default, its configuration and the precision policy."""

from pathlib import Path

import pytest

from fitness.guardrails import GuardrailConfig, check, defines_model_new
from fitness.precision import Precision

SEEDS = Path(__file__).resolve().parents[1] / "experiments" / "workloads" / "seeds"

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


@pytest.mark.parametrize("seed", sorted(SEEDS.glob("*_triton.py")), ids=lambda p: p.stem)
def test_every_builtin_seed_passes_the_strict_default(seed):
    verdict = check(seed.read_text(), "triton")
    assert verdict.ok, verdict.reason


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
GEMM_OK = GuardrailConfig(allow_library_gemm=True)


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
