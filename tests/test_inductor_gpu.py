"""Compiler seeds on the GPU (run with `-m gpu`): torch.compile's Triton, captured, rewritten
into our format and judged by the real fitness service.

With EVO_SEED_FIXTURES set to a folder, each capture is also written there as JSON: those
files are the CPU tests' fixtures (tests/fixtures/inductor/), real Inductor output.
"""

from __future__ import annotations

import json
import os
import random
import re
from pathlib import Path

import pytest

from fitness.guardrails import GuardrailConfig
from fitness.inductor_capture import capture_inductor
from fitness.inductor_seed import seeds_from_capture
from fitness.judge import EvalOptions, evaluate
from fitness.results import Status
from fitness.workloads import resolve_workload
from operators.offline import ParamOperator

pytestmark = pytest.mark.gpu

SAMPLES = 30
WORKLOADS = Path(__file__).resolve().parent / "fixtures" / "workloads"


def _capture(name: str) -> tuple:
    """A fixture workload (one shape, as KernelBench's: a compiler seed is specialized to it)."""
    workload = resolve_workload(str(WORKLOADS / f"{name}.py"))
    capture = capture_inductor(workload)
    out = os.environ.get("EVO_SEED_FIXTURES")
    if out:
        Path(out).mkdir(parents=True, exist_ok=True)
        (Path(out) / f"{name}.json").write_text(json.dumps(capture, indent=1))
    return workload, capture, seeds_from_capture(capture, workload)


def _judge(source: str, workload, library_gemm: bool = False):
    opts = EvalOptions(
        device="cuda",
        samples=SAMPLES,
        baselines=True,
        guardrails=GuardrailConfig(allow_library_gemm=library_gemm),
    )
    return evaluate(source, workload, opts)


@pytest.fixture(scope="module")
def gemm():
    return _capture("gemm_bias_relu")


def test_a_gemm_gets_a_library_seed_and_an_all_triton_seed(gemm):
    workload, capture, seeds = gemm
    by_mode = {s.mode: s for s in seeds}
    assert set(by_mode) == {"default", "max-autotune"}, [s.to_dict() for s in seeds]
    assert by_mode["default"].library_calls == ["extern_kernels.mm"]
    assert by_mode["max-autotune"].library_calls == []
    assert capture["modes"]["default"]["max_abs_err"] < 1e-3


def test_strict_guardrails_reject_the_library_seed_and_pass_the_triton_one(gemm):
    workload, _, seeds = gemm
    by_mode = {s.mode: s for s in seeds}
    res = _judge(by_mode["default"].source, workload)
    assert res.status is Status.REJECTED and "extern_kernels.mm" in res.reason, res.reason
    res = _judge(by_mode["max-autotune"].source, workload)
    assert res.status is Status.CORRECT, f"{res.reason}\n{res.log}"
    assert res.speedup_vs_eager and res.speedup_vs_eager > 0


def test_allowing_library_gemms_admits_the_cublas_seed(gemm):
    workload, _, seeds = gemm
    source = next(s.source for s in seeds if s.mode == "default")
    res = _judge(source, workload, library_gemm=True)
    assert res.status is Status.CORRECT, f"{res.reason}\n{res.log}"


def test_the_templates_tiles_are_tunable(gemm):
    """BLOCK_M and BLOCK_N moved out of the template: the grid follows a new tile size."""
    workload, _, seeds = gemm
    source = next(s.source for s in seeds if s.mode == "max-autotune")
    assert re.search(r"BLOCK_M=\d+", source)
    smaller = re.sub(r"BLOCK_M=\d+", "BLOCK_M=64", source, count=1)
    smaller = re.sub(r"BLOCK_N=\d+", "BLOCK_N=64", smaller, count=1)
    res = _judge(smaller, workload)
    assert res.status is Status.CORRECT, f"{res.reason}\n{res.log}"
    child = ParamOperator(target="gpu").mutate(source, random.Random(3))
    assert child and child != source


def test_a_memory_bound_workload_gets_one_correct_all_triton_seed():
    workload, capture, seeds = _capture("softmax_scale")
    assert "skipped" in capture["modes"]["max-autotune"]
    assert [s.mode for s in seeds] == ["default"], [s.to_dict() for s in seeds]
    res = _judge(seeds[0].source, workload)
    assert res.status is Status.CORRECT, f"{res.reason}\n{res.log}"
    child = ParamOperator(target="gpu").mutate(seeds[0].source, random.Random(1))
    assert child is not None  # XBLOCK, R0_BLOCK, num_warps are tunables
