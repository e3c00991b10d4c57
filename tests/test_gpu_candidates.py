"""Hand-written GPU candidates through the real fitness service (run with `-m gpu`).

tests/gpu_candidates/ holds honest Triton and CUDA C++ kernels named `<key>__<backend>.py`,
where key is `builtin_<name>` (the workload `builtin:<name>`) or `kb_level<L>_<id>` (the
workload `kernelbench:level<L>/<id>`, which needs KERNELBENCH_ROOT). Each must come out
`correct` with a comparable GPU timing. The CUDA candidates are compiled ahead, all at once
and in parallel, into EVO_EXTENSION_DIR (default /tmp/evo-ext), so later runs reuse them.
The builtin Triton seeds (experiments/workloads/seeds/) are evaluated the same way.
"""

from __future__ import annotations

import math
import os
import re
from pathlib import Path

import pytest

from fitness.judge import EvalOptions, evaluate
from fitness.results import Status
from fitness.workloads import KERNELBENCH_ENV, resolve_workload

pytestmark = pytest.mark.gpu

ROOT = Path(__file__).resolve().parents[1]
CANDIDATE_DIR = ROOT / "tests" / "gpu_candidates"
SEED_DIR = ROOT / "experiments" / "workloads" / "seeds"
EXT = os.environ.get("EVO_EXTENSION_DIR", "/tmp/evo-ext")
SAMPLES = 30
BUILD_JOBS = 8

_NAME = re.compile(
    r"^(?:builtin_(?P<builtin>\w+?)|kb_level(?P<level>\d+)_(?P<id>\d+))__(?P<backend>triton|cuda)$"
)


def parse_candidate(path: Path) -> tuple[str, str]:
    """(workload name, backend) from a candidate's file name."""
    m = _NAME.match(path.stem)
    assert m, f"{path.name} is not named <key>__<backend>.py"
    if m["builtin"]:
        return f"builtin:{m['builtin']}", m["backend"]
    return f"kernelbench:level{m['level']}/{m['id']}", m["backend"]


CANDIDATES = sorted(CANDIDATE_DIR.glob("*__*.py"))
SEEDS = sorted(SEED_DIR.glob("*_triton.py"))


def needs_kernelbench(path: Path) -> bool:
    return parse_candidate(path)[0].startswith("kernelbench:")


def load_workload(name: str):
    if name.startswith("kernelbench:"):
        root = os.environ.get(KERNELBENCH_ENV)
        if not root:
            pytest.skip("KERNELBENCH_ROOT is not set")
        return resolve_workload(name, kernelbench_root=root)
    return resolve_workload(name)


def options(backend: str, baselines: bool = False) -> EvalOptions:
    return EvalOptions(
        device="cuda",
        backend=backend,
        extension_dir=EXT,
        samples=SAMPLES,
        baselines=baselines,
    )


def describe(path: Path, res) -> str:
    return f"{path.name}: {res.status}: {res.reason}\n{res.log}"


@pytest.fixture(scope="module")
def cuda_builds() -> dict:
    """Build every CUDA candidate whose workload is available, in parallel, once."""
    from fitness.compile import device_arch, prebuild_many

    paths = [
        p
        for p in CANDIDATES
        if parse_candidate(p)[1] == "cuda"
        and (os.environ.get(KERNELBENCH_ENV) or not needs_kernelbench(p))
    ]
    results = prebuild_many(
        [p.read_text() for p in paths],
        extension_dir=EXT,
        arch=device_arch(),
        jobs=BUILD_JOBS,
    )
    builds = {}
    for path, r in zip(paths, results, strict=True):
        print(f"build {path.name}: ok={r.ok} {r.seconds:.1f}s {r.reason}")
        builds[path.name] = r
    return builds


@pytest.mark.timeout(3600)
def test_cuda_candidates_build(cuda_builds):
    failed = {name: f"{r.reason}\n{r.log}" for name, r in cuda_builds.items() if not r.ok}
    assert not failed, "\n\n".join(f"{name}: {why}" for name, why in failed.items())
    assert all(r.seconds > 0 for r in cuda_builds.values())


@pytest.mark.timeout(3600)  # the first CUDA candidate waits for every build
@pytest.mark.parametrize("path", CANDIDATES, ids=lambda p: p.stem)
def test_candidate_is_correct_on_gpu(path: Path, request):
    name, backend = parse_candidate(path)
    workload = load_workload(name)
    if backend == "cuda":
        build = request.getfixturevalue("cuda_builds")[path.name]
        assert build.ok, f"{path.name} did not build: {build.reason}\n{build.log}"
    res = evaluate(path.read_text(), workload, options(backend))
    assert res.status is Status.CORRECT, describe(path, res)
    assert res.runtime_ms is not None and res.runtime_ms > 0, describe(path, res)
    assert res.comparable is True
    assert res.workload == workload.name and res.backend == backend


@pytest.mark.timeout(900)
@pytest.mark.parametrize("path", SEEDS, ids=lambda p: p.stem)
def test_builtin_seed_is_correct_on_gpu(path: Path):
    workload = resolve_workload(f"builtin:{path.stem.removesuffix('_triton')}")
    res = evaluate(path.read_text(), workload, options("triton"))
    assert res.status is Status.CORRECT, describe(path, res)
    assert res.runtime_ms is not None and res.runtime_ms > 0, describe(path, res)
    assert res.comparable is True


def _positive(value) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value) and value > 0


@pytest.mark.timeout(3600)
@pytest.mark.parametrize(
    "path",
    [CANDIDATE_DIR / "builtin_layernorm__cuda.py", SEED_DIR / "layernorm_triton.py"],
    ids=lambda p: p.stem,
)
def test_baselines_and_speed_of_light(path: Path, request):
    backend = "cuda" if path.stem.endswith("__cuda") else "triton"
    if backend == "cuda":
        build = request.getfixturevalue("cuda_builds")[path.name]
        assert build.ok, f"{path.name} did not build: {build.reason}\n{build.log}"
    res = evaluate(path.read_text(), resolve_workload("builtin:layernorm"), options(backend, True))
    assert res.status is Status.CORRECT, describe(path, res)
    fields = {
        k: getattr(res, k)
        for k in (
            "runtime_ms",
            "baseline_eager_ms",
            "baseline_compile_ms",
            "speedup_vs_eager",
            "speedup_vs_compile",
            "sol_ms",
            "sol_fraction",
        )
    }
    assert all(_positive(v) for v in fields.values()), f"{fields}\n{res.log}"
    assert 0 < res.sol_fraction <= 1, fields
    assert res.speedup_vs_eager == pytest.approx(res.baseline_eager_ms / res.runtime_ms)
    assert res.speedup_vs_compile == pytest.approx(res.baseline_compile_ms / res.runtime_ms)
