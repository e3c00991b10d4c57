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
