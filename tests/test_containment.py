"""The OS walls around a candidate (fitness.containment), as the judge reads them from /proc."""

import os
import stat
import tempfile
from pathlib import Path

import pytest
import torch

if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"

from fitness import containment  # noqa: E402
from fitness.judge import EvalOptions, evaluate, workload_for_device  # noqa: E402
from fitness.results import Status  # noqa: E402
from fitness.walls import observed_layers, probe  # noqa: E402
from fitness.workloads import BUILTIN_DIR, load_workload, resolve_workload  # noqa: E402

ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0, reason="the walls need a root judge")


def test_a_required_sandbox_refuses_a_missing_layer(monkeypatch):
    monkeypatch.setenv("EVO_REQUIRE_SANDBOX", "1")
    with pytest.raises(containment.SandboxMissing, match="pid, net"):
        containment.require(["mount", "tmpfs", "user", "no_new_privs", "rlimits"], "test")
    containment.require(list(containment.LAYERS), "test")  # all there: no error
    monkeypatch.setenv("EVO_REQUIRE_SANDBOX", "0")
    containment.require([], "test")  # not required: the verdict only records it


def test_the_judge_reads_no_walls_around_itself():
    """Read from /proc, a process in the judge's own namespaces has no walls; so a child
    claiming to be walled in cannot make the judge believe it."""
    assert observed_layers(os.getpid()) in ([], ["rlimits"])


@ROOT_ONLY
def test_a_root_judge_puts_every_layer_up():
    assert probe("cpu") == list(containment.LAYERS)


@ROOT_ONLY
def test_a_workload_in_a_private_directory_is_judged(tmp_path):
    """The workload (and, in CI, the checkout and venv) under a directory only root may enter:
    the candidate, run as `nobody`, still imports it through its own read-only bind."""
    private = Path(tempfile.mkdtemp(prefix="evo-private-"))
    try:
        os.chmod(private, 0o700)
        assert stat.S_IMODE(os.stat(private).st_mode) == 0o700
        text = (BUILTIN_DIR / "scaled_gelu.py").read_text()
        (private / "scaled_gelu_private.py").write_text(text)
        workload = workload_for_device(load_workload(private / "scaled_gelu_private.py"), "cpu")
        seed = (BUILTIN_DIR / "seeds" / "scaled_gelu_triton.py").read_text()
        res = evaluate(seed, workload, EvalOptions(device="cpu", baselines=False))
        assert res.status is Status.CORRECT, res.reason + res.log
        assert res.isolation == list(containment.LAYERS)
    finally:
        import shutil

        shutil.rmtree(private, ignore_errors=True)


@ROOT_ONLY
def test_every_verdict_names_the_walls_it_was_judged_in():
    workload = workload_for_device(resolve_workload("builtin:row_sum"), "cpu")
    seed = (BUILTIN_DIR / "seeds" / "row_sum_triton.py").read_text()
    res = evaluate(seed, workload, EvalOptions(device="cpu", baselines=False, timing=False))
    assert res.status is Status.CORRECT, res.reason
    assert res.to_json_dict()["isolation"] == list(containment.LAYERS)
