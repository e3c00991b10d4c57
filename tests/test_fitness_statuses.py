"""Every status of DESIGN.md is reachable on the CPU, each with a one-line reason."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fitness.guardrails import GuardrailConfig
from fitness.judge import EvalOptions, evaluate, workload_for_device
from fitness.results import JSON_FIELDS, PROTOCOL_VERSION, Status
from fitness.workloads import resolve_workload

ROOT = Path(__file__).resolve().parents[1]
SEED = ROOT / "experiments" / "workloads" / "seeds" / "scaled_gelu_triton.py"
FAST = EvalOptions(device="cpu", baselines=False)


@pytest.fixture(scope="module")
def workload():
    return workload_for_device(resolve_workload("builtin:scaled_gelu"), "cpu")


def seed_source() -> str:
    return SEED.read_text()


FORWARD = "def forward(self, x: torch.Tensor) -> torch.Tensor:\n"


def with_forward_prefix(line: str) -> str:
    """The seed with `line` run first in forward."""
    src = seed_source()
    assert FORWARD in src, "seed layout changed; update this test"
    return src.replace(FORWARD, FORWARD + "        " + line + "\n", 1)


def run(source: str, workload, **kw):
    opts = EvalOptions(**{**FAST.__dict__, **kw})
    res = evaluate(source, workload, opts)
    assert "\n" not in res.reason and res.reason
    return res


def test_correct_seed(workload):
    res = run(seed_source(), workload)
    assert res.status is Status.CORRECT, res.reason + res.log
    assert res.runtime_ms > 0 and res.runtime_iqr_ms >= 0
    assert res.comparable is False  # interpreter timings are never comparable
    assert res.max_abs_err <= 1e-4
    assert res.atol is None and res.rtol is None  # the error model's bound, not a constant
    assert 0 < res.error_fraction <= 1 and res.to_json_dict()["error_fraction"] > 0
    assert res.metrics["rounds"] >= 5 and res.metrics["rechecks"] >= 1
    assert res.device.startswith("cpu") and res.versions["torch"]


def test_an_experiments_own_tolerance_replaces_the_error_model(workload):
    src = seed_source().replace("z = x * scale + shift", "z = x * scale * 1.001 + shift")
    loose = run(src, workload, atol=1e-2, rtol=1e-2, timing=False)
    assert loose.status is Status.CORRECT and loose.atol == loose.rtol == 1e-2, loose.reason
    strict = run(src, workload, atol=1e-4, rtol=1e-4, timing=False)
    assert strict.status is Status.MISMATCH and "atol=0.0001" in strict.reason, strict.reason


def test_generation_failure_without_model_new(workload):
    res = run(seed_source().replace("class ModelNew", "class Other"), workload)
    assert res.status is Status.GENERATION_FAILURE and "ModelNew" in res.reason


def test_compile_error_on_syntax(workload):
    res = run(seed_source() + "\ndef broken(:\n", workload)
    assert res.status is Status.COMPILE_ERROR and "syntax error" in res.reason


def test_compile_error_at_import(workload):
    res = run(seed_source() + "\nundefined_name_at_import\n", workload)
    assert res.status is Status.COMPILE_ERROR, res.reason
    assert "NameError" in res.reason and "load" in res.reason


def test_rejected_by_guardrail(workload):
    res = run(seed_source().replace("import torch\n", "import torch\nimport gc\n", 1), workload)
    assert res.status is Status.REJECTED and res.caught_by == "static"
    assert "gc" in res.reason


def test_runtime_error_in_forward(workload):
    res = run(with_forward_prefix("x = x.view(-1, 7, 3)"), workload)
    assert res.status is Status.RUNTIME_ERROR, res.reason
    assert res.reason.startswith("warmup:") and "RuntimeError" in res.reason


def test_timeout(workload):
    res = run(with_forward_prefix("while x.numel() > 0:\n            pass"), workload, timeout=8.0)
    assert res.status is Status.TIMEOUT, res.reason
    assert "8 s" in res.reason


def test_answering_each_message_just_in_time_is_a_timeout_of_the_phase(workload):
    """Every call sleeps just under the per-message timeout: the phase's own budget (twice
    the timeout for all its messages) ends it, and the reason names the phase."""
    slow = with_forward_prefix("import time\n        time.sleep(2.5)")
    res = run(slow, workload, timeout=3.0, guardrails=GuardrailConfig(enabled=False))
    assert res.status is Status.TIMEOUT, res.reason
    assert "phase 'correctness" in res.reason and "ran out of its 6 s" in res.reason


def test_mismatch(workload):
    src = seed_source()
    assert "z = x * scale + shift" in src, "seed layout changed; update this test"
    res = run(src.replace("z = x * scale + shift", "z = x * scale * 1.001 + shift"), workload)
    assert res.status is Status.MISMATCH, res.reason
    assert "differ beyond the error bound" in res.reason and res.caught_by == "judge"
    assert res.error_fraction > 1


def test_json_cli_prints_exactly_one_object(tmp_path):
    cand = tmp_path / "cand.py"
    cand.write_text(seed_source())
    out = subprocess.run(
        [sys.executable, "-m", "evo", "eval", str(cand), "--workload", "builtin:scaled_gelu",
         "--device", "cpu", "--json"],
        capture_output=True, text=True, timeout=240, check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    obj = json.loads(out.stdout)  # exactly one JSON document on stdout
    assert list(obj) == list(JSON_FIELDS)
    assert obj["status"] == "correct" and obj["protocol_version"] == PROTOCOL_VERSION
    assert obj["baseline_eager_ms"] > 0 and obj["speedup_vs_eager"] > 0
    assert obj["comparable"] is False and obj["baseline_compile_ms"] is None


def test_cli_shows_progress_and_a_summary(tmp_path):
    cand = tmp_path / "cand.py"
    cand.write_text(seed_source())
    out = subprocess.run(
        [sys.executable, "-m", "evo", "eval", str(cand), "--workload", "builtin:scaled_gelu",
         "--device", "cpu"],
        capture_output=True, text=True, timeout=240, check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    for phase in ("reference and inputs", "correctness: ", "timing: ", "baselines"):
        assert phase in out.stderr, out.stderr
    assert "USDT" not in out.stderr  # the profiler's own start and stop lines
    assert "status     correct" in out.stdout and "comparable=False" in out.stdout
    assert "isolation  mount, pid, net" in out.stdout or os.geteuid() != 0


@pytest.mark.parametrize(
    "args, message",
    [
        (["missing.py", "--workload", "builtin:softmax"], "does not exist"),
        (["{seed}", "--workload", "builtin:no_such_thing"], "no_such_thing"),
        (["{plain}", "--workload", "builtin:softmax"], "ModelNew"),
        (["{seed}", "--workload", "kernelbench:level1/1"], "KERNELBENCH_ROOT"),
    ],
)
def test_cli_input_errors_exit_2(tmp_path, args, message, monkeypatch):
    plain = tmp_path / "plain.py"
    plain.write_text("x = 1\n")
    args = [a.format(seed=SEED, plain=plain) for a in args]
    env = {k: v for k, v in __import__("os").environ.items() if k != "KERNELBENCH_ROOT"}
    out = subprocess.run(
        [sys.executable, "-m", "evo", "eval", *args, "--json"],
        capture_output=True, text=True, timeout=120, env=env, check=False,
    )  # fmt: skip
    assert out.returncode == 2, out.stderr
    assert message in out.stderr and "Traceback" not in out.stderr
    assert out.stdout == ""
