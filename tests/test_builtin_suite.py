"""The builtin suite through the fitness service: seeds correct, workloads not degenerate."""

import json
import subprocess
import sys

import pytest

from fitness.judge import EvalOptions, evaluate, workload_for_device
from fitness.screening import NULL_CANDIDATES, null_source, screen
from fitness.workloads import builtin_names, load_workload, resolve_workload

NAMES = builtin_names()


def test_suite_covers_the_required_kinds():
    assert len(NAMES) >= 8
    for required in ("softmax", "layernorm", "matmul", "matmul_bias_relu", "matmul_scale_gelu"):
        assert required in NAMES


@pytest.mark.parametrize("name", NAMES)
def test_seed_is_correct(name):
    w = workload_for_device(resolve_workload(f"builtin:{name}"), "cpu")
    res = evaluate(w.seed_path.read_text(), w, EvalOptions(device="cpu", baselines=False))
    assert res.status.value == "correct", f"{res.reason}\n{res.log}"


@pytest.mark.parametrize("name", NAMES)
def test_workload_passes_screening(name):
    w = workload_for_device(resolve_workload(f"builtin:{name}"), "cpu")
    report = screen(w, EvalOptions(device="cpu"))
    assert not report.degenerate, report.passed_by
    for null, res in report.results.items():
        assert res.status.value == "mismatch", f"{null}: {res.status} {res.reason}"


DEGENERATE = """
import torch
import torch.nn as nn

N = 64


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(-x.abs())  # zero for every input


def get_inputs():
    return [torch.randn(N, N)]


def get_init_inputs():
    return []
"""


def test_a_tiny_output_is_judged_by_its_own_scale(tmp_path):
    """The error bound follows the computation (fitness.tolerance): an output of about 1e-9
    is no longer matched by zeros, as it was under a fixed atol of 1e-4."""
    path = tmp_path / "tiny_output.py"
    path.write_text(DEGENERATE.replace("torch.relu(-x.abs())  # zero for every input", "x * 1e-9"))
    assert not screen(load_workload(path), EvalOptions(device="cpu")).degenerate


def test_screening_flags_a_degenerate_workload(tmp_path):
    path = tmp_path / "tiny_output.py"
    path.write_text(DEGENERATE)
    report = screen(load_workload(path), EvalOptions(device="cpu"))
    assert report.degenerate
    assert "zeros" in report.passed_by and "constant_mean" in report.passed_by


def test_workloads_check_cli_json(tmp_path):
    path = tmp_path / "tiny_output.py"
    path.write_text(DEGENERATE)
    out = subprocess.run(
        [sys.executable, "-m", "evo", "workloads", "check", str(path), "--device", "cpu", "--json"],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    obj = json.loads(out.stdout)
    assert set(obj) == {"workload", "degenerate", "passed_by"}
    assert obj["degenerate"] is True and "zeros" in obj["passed_by"]


def test_null_candidates_are_complete_modules():
    w = workload_for_device(resolve_workload("builtin:softmax"), "cpu")
    for name in NULL_CANDIDATES:
        compile(null_source(w, name), name, "exec")


def test_workloads_list_cli():
    out = subprocess.run(
        [sys.executable, "-m", "evo", "workloads", "list"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert out.returncode == 0
    assert {f"builtin:{n}" for n in NAMES} <= set(out.stdout.split())
