"""`evo best`: each workload's best kernel out of a run's lineage, ready to use (analysis.best)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from analysis.best import write_best
from analysis.load import AnalysisError
from fitness.judge import source_hash
from tests.analysis_lineages import real_run, write_hand_made_run

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def real_dir(ray_cluster, tmp_path_factory) -> str:
    return real_run(tmp_path_factory)


def test_the_best_kernel_of_each_workload_is_written_with_its_verdict(real_dir, tmp_path):
    out = tmp_path / "best"
    written = write_best(real_dir, str(out))
    kernels = sorted(p for p in written if p.suffix == ".py")
    assert [p.name for p in kernels] == [
        "builtin_matmul__triton.py",
        "builtin_scaled_gelu__triton.py",
    ]
    for kernel in kernels:
        verdict = json.loads(kernel.with_suffix(".json").read_text())
        assert verdict["status"] == "correct"
        assert source_hash(kernel.read_text()) == verdict["source_hash"]


def test_evo_eval_gives_the_written_kernel_the_same_verdict(real_dir, tmp_path):
    out = tmp_path / "best"
    subprocess.run(
        [sys.executable, "-m", "evo", "best", real_dir, "--out", str(out)],
        cwd=ROOT, check=True, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    kernel = out / "builtin_scaled_gelu__triton.py"
    verdict = json.loads(kernel.with_suffix(".json").read_text())
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    got = subprocess.run(
        [sys.executable, "-m", "evo", "eval", str(kernel), "--workload", verdict["workload"],
         "--device", "cpu", "--json"],
        cwd=ROOT, env=env, check=True, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    judged = json.loads(got.stdout)
    assert (judged["status"], judged["source_hash"]) == ("correct", verdict["source_hash"])


def test_the_default_folder_is_in_the_run_and_bad_run_directories_are_named(tmp_path):
    run = tmp_path / "run"
    write_hand_made_run(run)
    written = write_best(str(run))
    assert all(p.parent == run / "best" for p in written)
    with pytest.raises(AnalysisError, match="is not a local directory"):
        write_best("s3://bucket/run")
    empty = subprocess.run(
        [sys.executable, "-m", "evo", "best", str(tmp_path / "missing")],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert empty.returncode == 2 and "does not exist" in empty.stderr
