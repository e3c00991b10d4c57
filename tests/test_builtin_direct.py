"""The builtin workloads and their Triton seeds, checked directly under the Triton interpreter.

Each workload's CPU shapes (SHAPES[0] and SHAPES[1]) are applied by overriding its module
constants; the seed must match Model at fp32 tolerances, and Model's output must not be
degenerate (constant, ~0), so that the workload passes the screening it is meant to pass.
"""

import importlib.util
from pathlib import Path

import pytest
import torch

WORKLOADS_DIR = Path(__file__).resolve().parent.parent / "experiments" / "workloads"
WORKLOAD_NAMES = sorted(p.stem for p in WORKLOADS_DIR.glob("*.py") if p.stem != "__init__")
CPU_SHAPE_INDICES = [0, 1]
ATOL = RTOL = 1e-4


@pytest.fixture(autouse=True, scope="module")
def _interpreter():
    """The interpreter for this module's tests only. Set at import, it leaked into every test a
    GPU session collected after it (Inductor's kernels then ran interpreted)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TRITON_INTERPRET", "1")
        yield


def _load_module(path: Path, module_name: str):
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _load_workload(name: str, shape_index: int):
    """A fresh copy of the workload module with SHAPES[shape_index] applied."""
    module = _load_module(WORKLOADS_DIR / f"{name}.py", f"_builtin_{name}_{shape_index}")
    for constant, value in module.SHAPES[shape_index].items():
        assert hasattr(module, constant), f"{name}: SHAPES names unknown constant {constant}"
        setattr(module, constant, value)
    return module


def _load_seed(name: str):
    return _load_module(WORKLOADS_DIR / "seeds" / f"{name}_triton.py", f"_builtin_seed_{name}")


def _outputs(name: str, shape_index: int, input_seed: int):
    workload = _load_workload(name, shape_index)
    seed = _load_seed(name)
    init_inputs = workload.get_init_inputs()
    torch.manual_seed(0)
    model = workload.Model(*init_inputs)
    torch.manual_seed(0)
    model_new = seed.ModelNew(*init_inputs)
    model_new.load_state_dict(model.state_dict())
    torch.manual_seed(input_seed)
    inputs = workload.get_inputs()
    with torch.no_grad():
        ref = model(*inputs)
        out = model_new(*inputs)
    return ref, out


def test_suite_has_a_seed_for_every_workload():
    assert len(WORKLOAD_NAMES) >= 8
    for name in WORKLOAD_NAMES:
        assert (WORKLOADS_DIR / "seeds" / f"{name}_triton.py").is_file(), name


@pytest.mark.parametrize("name", WORKLOAD_NAMES)
def test_shapes_start_with_cpu_sized_overrides(name):
    workload = _load_workload(name, 0)
    assert len(workload.SHAPES) >= 3
    n_input_elements = sum(t.numel() for t in workload.get_inputs())
    assert n_input_elements <= 4096, f"{name}: SHAPES[0] has {n_input_elements} input elements"


@pytest.mark.parametrize("shape_index", CPU_SHAPE_INDICES)
@pytest.mark.parametrize("name", WORKLOAD_NAMES)
def test_seed_matches_reference(name, shape_index):
    for input_seed in (1, 2):
        ref, out = _outputs(name, shape_index, input_seed)
        assert type(out) is torch.Tensor
        assert out.shape == ref.shape and out.dtype == ref.dtype == torch.float32
        max_err = (out - ref).abs().max().item()
        assert torch.allclose(out, ref, atol=ATOL, rtol=RTOL), f"{name}: max abs err {max_err}"


@pytest.mark.parametrize("shape_index", CPU_SHAPE_INDICES)
@pytest.mark.parametrize("name", WORKLOAD_NAMES)
def test_reference_output_is_not_degenerate(name, shape_index):
    workload = _load_workload(name, shape_index)
    torch.manual_seed(0)
    model = workload.Model(*workload.get_init_inputs())
    torch.manual_seed(1)
    inputs = workload.get_inputs()
    with torch.no_grad():
        ref = model(*inputs)
    assert ref.std().item() > 1e-2
    assert not torch.allclose(ref, torch.zeros_like(ref), atol=ATOL, rtol=RTOL)
    assert not torch.allclose(ref, torch.full_like(ref, ref.mean().item()), atol=ATOL, rtol=RTOL)
    for x in inputs:
        if x.shape == ref.shape:
            assert not torch.allclose(ref, x, atol=ATOL, rtol=RTOL), f"{name}: passthrough"
    torch.manual_seed(2)
    other_seed_inputs = workload.get_inputs()
    with torch.no_grad():
        other = model(*other_seed_inputs)
    assert not torch.allclose(ref, other, atol=ATOL, rtol=RTOL), f"{name}: input-independent"
