"""The workloads a run evolves: seeds per backend, and a geomean metric's other shapes."""

import pytest

from evo.config import load_config_dict
from evo.workset import run_workloads
from fitness.errors import EvoError
from fitness.workloads import resolve_workload


def cfg(**kw):
    return load_config_dict({"workloads": ["builtin:row_sum"], **kw})


def test_each_workload_brings_its_seed_and_no_extra_shapes_by_default():
    (w,) = run_workloads(cfg())
    (seed,) = w.seeds["triton"]
    assert w.name == "builtin:row_sum" and "ModelNew" in seed["source"]
    assert seed["description"] == "builtin"
    assert w.extra_shapes == []


def test_a_geomean_metric_adds_the_chosen_shapes():
    shapes = [dict(s) for s in resolve_workload("builtin:row_sum").shapes]
    (w,) = run_workloads(cfg(fitness={"metric": "geomean_speedup_vs_eager"}))
    assert w.extra_shapes == shapes
    (w,) = run_workloads(cfg(fitness={"metric": "geomean_speedup_vs_eager", "shapes": [1]}))
    assert w.extra_shapes == [shapes[1]]
    with pytest.raises(EvoError, match="fitness.shapes: builtin:row_sum has 3 SHAPES, no index 9"):
        run_workloads(cfg(fitness={"metric": "geomean_speedup_vs_eager", "shapes": [9]}))


def test_a_workload_without_a_seed_for_its_backends_is_named():
    with pytest.raises(EvoError, match="workload builtin:row_sum: no seed kernel for cuda"):
        run_workloads(cfg(backends=["cuda"]))


def test_inductor_seeding_leaves_a_workload_without_a_seed_to_the_engine(tmp_path):
    """With seed_kernels: inductor a KernelBench-style workload (no builtin seed) is kept,
    its Triton seeds left for the engine to compile; without it, it is an error."""
    (w,) = run_workloads(cfg(seed="inductor"))
    assert [s["description"] for s in w.seeds["triton"]] == ["builtin"]
    path = tmp_path / "row_sum.py"  # the builtin's reference, with no seed beside it
    path.write_text(resolve_workload("builtin:row_sum").source)
    path = str(path)
    (w,) = run_workloads(load_config_dict({"workloads": [path], "seed_kernels": "inductor"}))
    assert w.seeds == {"triton": []}
    with pytest.raises(EvoError, match="seed_kernels: inductor"):
        run_workloads(load_config_dict({"workloads": [path]}))
