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
    assert w.name == "builtin:row_sum" and "ModelNew" in w.seeds["triton"]
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
