"""The error model on the GPU at KernelBench's size (run with `-m gpu`, KERNELBENCH_ROOT set):
another summation order passes, a forbidden precision does not."""

import os
from pathlib import Path

import pytest

from fitness.guardrails import GuardrailConfig
from fitness.judge import EvalOptions, evaluate, workload_for_device
from fitness.results import Status
from fitness.workloads import KERNELBENCH_ENV, resolve_workload

pytestmark = pytest.mark.gpu

SPLIT_K = Path(__file__).parent / "gpu_candidates" / "variants" / "kb_level2_12_splitk__triton.py"


def level2_12():
    root = os.environ.get(KERNELBENCH_ENV)
    if not root:
        pytest.skip("KERNELBENCH_ROOT is not set")
    return workload_for_device(resolve_workload("kernelbench:level2/12", root), "cuda")


def judge(source: str, guardrails: bool = True):
    opts = EvalOptions(
        device="cuda", samples=20, baselines=False, guardrails=GuardrailConfig(enabled=guardrails)
    )
    return evaluate(source, level2_12(), opts)


def test_a_split_k_gemm_is_correct_at_kernelbench_size():
    res = judge(SPLIT_K.read_text())
    assert res.status is Status.CORRECT, f"{res.reason}\n{res.log}"
    assert 0 < res.error_fraction < 1


def test_the_same_gemm_in_tf32_is_refused_under_fp32_even_past_the_guardrails():
    source = SPLIT_K.read_text().replace('input_precision="ieee"', 'input_precision="tf32"')
    res = judge(source, guardrails=False)
    assert res.status is Status.MISMATCH, res.reason
    assert res.error_fraction > 1
