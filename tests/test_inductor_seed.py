"""Compiler seeds on the CPU: real Inductor captures (tests/fixtures/inductor/, written on an
H100 by tests/test_inductor_gpu.py with EVO_SEED_FIXTURES) rewritten into candidates, and the
engine's handling of `seed_kernels: inductor` where no GPU can compile them."""

from __future__ import annotations

import ast
import copy
import json
import random
import re
from pathlib import Path

import pytest

from evo.config import load_config_dict
from evo.engine import Engine
from evo.lineage import read_frame
from fitness.errors import EvoError
from fitness.guardrails import GuardrailConfig, check
from fitness.inductor_seed import library_calls, seed_source, seeds_from_capture
from fitness.workloads import resolve_workload
from operators.offline import ParamOperator, find_params

HERE = Path(__file__).resolve().parent
CAPTURES = HERE / "fixtures" / "inductor"
WORKLOADS = HERE / "fixtures" / "workloads"


def load(name: str) -> tuple:
    return resolve_workload(str(WORKLOADS / f"{name}.py")), json.loads(
        (CAPTURES / f"{name}.json").read_text()
    )


def by_mode(name: str) -> dict:
    workload, capture = load(name)
    return {s.mode: s for s in seeds_from_capture(capture, workload)}


def test_a_gemm_capture_gives_a_cublas_seed_and_an_all_triton_seed():
    seeds = by_mode("gemm_bias_relu")
    assert set(seeds) == {"default", "max-autotune"}
    assert seeds["default"].library_calls == ["extern_kernels.mm"]
    assert "extern_kernels.mm" in seeds["default"].reason
    assert seeds["max-autotune"].library_calls == [] and seeds["max-autotune"].reason == ""
    for s in seeds.values():
        ast.parse(s.source)
        assert "class ModelNew(nn.Module)" in s.source and "triton_heuristics" not in s.source
        assert "get_raw_stream" not in s.source and "assert_size_stride" not in s.source


def test_strict_guardrails_name_the_library_gemm_and_pass_the_triton_seed():
    seeds = by_mode("gemm_bias_relu")
    strict = check(seeds["default"].source, "triton")
    assert not strict.ok and "extern_kernels.mm" in strict.reason, strict.reason
    lenient = check(
        seeds["default"].source, "triton", config=GuardrailConfig(allow_library_gemm=True)
    )
    assert lenient.ok, lenient.reason
    triton_only = check(seeds["max-autotune"].source, "triton")
    assert triton_only.ok, triton_only.reason


def test_the_gemm_templates_tiles_become_launch_parameters_with_a_following_grid():
    source = by_mode("gemm_bias_relu")["max-autotune"].source
    launch = re.search(r"triton_tem_\w+\[(lambda meta: .*?)\]\((.*)\)\n", source)
    assert launch, source
    grid, args = launch.groups()
    assert "meta['BLOCK_M']" in grid and "meta['BLOCK_N']" in grid
    for tile in ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M"):
        assert re.search(rf"{tile}=\d+", args), args
        assert not re.search(rf"^\s*{tile}\s*:\s*tl\.constexpr\s*=\s*\d+", source, re.M)
        assert re.search(rf"def triton_tem_\w+\([^)]*{tile}: tl\.constexpr", source)
    assert "num_warps=4, num_stages=2" in args  # the autotuner's pick, from the capture
    assert 'input_precision="ieee"' in source and "allow_tf32=ALLOW_TF32" not in source
    names = {p.name for p in find_params(source)}
    assert {"BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "num_warps", "num_stages"} <= names


def test_model_new_keeps_the_references_constructor_and_feeds_the_graph_in_order():
    source = by_mode("gemm_bias_relu")["default"].source
    tree = ast.parse(source)
    (cls,) = [n for n in tree.body if isinstance(n, ast.ClassDef)]
    assert cls.name == "ModelNew" and not re.search(r"\bModel\b", source)
    assert "super(ModelNew, self).__init__()" in source  # KernelBench's spelling, renamed
    assert "self.linear = nn.Linear(in_features, out_features)" in source
    forward = re.search(r"out = _call\(\[(.*)\]\)", source).group(1)
    assert forward == (
        "self.get_parameter('linear.weight').detach(), "
        "self.get_parameter('linear.bias').detach(), inputs[0]"
    )


def test_a_reduction_seed_launches_with_the_chosen_blocks_and_is_tunable():
    (seed,) = by_mode("softmax_scale").values()
    assert seed.mode == "default" and seed.library_calls == []
    assert re.search(r"\[_grid\(\(2048, 'XBLOCK'\)\)\]\(.*XBLOCK=1, R0_BLOCK=4096", seed.source)
    assert check(seed.source, "triton").ok
    op = ParamOperator(target="gpu")
    children = {op.mutate(seed.source, random.Random(k)) for k in range(20)}
    assert None not in children and len(children) > 3
    moved = {p.name for c in children for p in find_params(c)} & {"XBLOCK", "R0_BLOCK"}
    assert moved == {"XBLOCK", "R0_BLOCK"}


def test_a_skipped_mode_gives_no_seed_and_a_failed_one_its_reason():
    workload, capture = load("softmax_scale")
    assert "skipped" in capture["modes"]["max-autotune"]
    capture = copy.deepcopy(capture)
    capture["modes"]["max-autotune"] = {"error": "BackendCompilerFailed: boom"}
    seeds = seeds_from_capture(capture, workload)
    assert [(s.mode, s.source is None) for s in seeds] == [
        ("default", False),
        ("max-autotune", True),
    ]
    assert seeds[1].reason == "torch.compile failed: BackendCompilerFailed: boom"


@pytest.mark.parametrize(
    "edit, reason",
    [
        (lambda k: k.update(grid_type="SplitScanGrid"), "grid type SplitScanGrid is not supported"),
        (lambda k: k["signature"].update(YBLOCK="constexpr"), "no value for its constexpr YBLOCK"),
    ],
)
def test_what_a_seed_cannot_carry_is_an_error_that_says_so(edit, reason):
    workload, capture = load("softmax_scale")
    cap = copy.deepcopy(capture["modes"]["default"])
    edit(next(iter(cap["kernels"].values())))
    with pytest.raises(EvoError, match=re.escape(reason)):
        seed_source(cap, workload, "default", "2.11")


def test_a_kernel_without_a_captured_config_or_of_another_kind_is_refused():
    workload, capture = load("gemm_bias_relu")
    cap = copy.deepcopy(capture["modes"]["default"])
    cap["kernels"] = {}
    with pytest.raises(EvoError, match="no launch config was captured"):
        seed_source(cap, workload, "default", "2.11")
    cap = copy.deepcopy(capture["modes"]["default"])
    cap["code"] = cap["code"].replace("async_compile.triton(", "async_compile.cpp(", 1)
    with pytest.raises(EvoError, match="a seed holds Triton only"):
        seed_source(cap, workload, "default", "2.11")


def test_library_calls_read_the_wrapper_not_its_comments():
    _, capture = load("softmax_scale")
    code = capture["modes"]["default"]["code"]
    assert "aten." in code  # Inductor's comments name the ATen ops it fused
    assert library_calls(code) == []
    _, gemm = load("gemm_bias_relu")
    assert library_calls(gemm["modes"]["default"]["code"]) == ["extern_kernels.mm"]


# -- the engine, where no GPU can compile (the CI machine)


def engine_config(tmp_path: Path, workloads: list[str]) -> dict:
    return {
        "name": "seeds",
        "workloads": workloads,
        "population": {"islands": 1, "in_flight": 1, "cap": 4, "elites": 1},
        "migration": {"topology": "none"},
        "fitness": {"samples": 3},
        "budgets": {"max_evals": 1},
        "seed_kernels": "inductor",
        "analyst": {"enabled": False},
    }


def test_without_a_gpu_compiler_seeds_are_an_event_and_an_unseeded_workload_an_error(
    ray_cluster, tmp_path
):
    cfg = load_config_dict(engine_config(tmp_path, [str(WORKLOADS / "softmax_scale.py")]))
    with pytest.raises(EvoError, match="no workload has a seed"):
        Engine(cfg, str(tmp_path / "run"), quiet=True).run()
    events = read_frame(str(tmp_path / "run"), "events")
    seeds = [json.loads(d) for d in events[events.kind == "seed"].detail]
    assert any("CUDA" in s.get("reason", "") or "GPU" in s.get("reason", "") for s in seeds), seeds
    assert any(s.get("dropped") == "triton" for s in seeds), seeds


def test_a_workload_with_shapes_keeps_its_builtin_seed_and_says_why_it_got_no_compiler_seed(
    ray_cluster, tmp_path
):
    cfg = load_config_dict(engine_config(tmp_path, ["builtin:row_sum"]))
    res = Engine(cfg, str(tmp_path / "run"), quiet=True).run()
    assert res["evaluated"] == 1, res
    rows = read_frame(str(tmp_path / "run"), "candidates")
    assert list(rows.operator) == ["seed"] and list(rows.status) == ["correct"]
    events = read_frame(str(tmp_path / "run"), "events")
    (detail,) = [json.loads(d) for d in events[events.kind == "seed"].detail]
    assert detail["made"] is False and "SHAPES" in detail["reason"]


def test_a_constexpr_numel_passed_by_position_is_launched_by_position():
    """A reduction to one value: Inductor marks xnumel constexpr yet passes it by position."""
    workload, capture = load("softmax_scale")
    cap = copy.deepcopy(capture["modes"]["default"])
    (info,) = cap["kernels"].values()
    info["signature"]["xnumel"] = "constexpr"
    info["constants"] = {"xnumel": 2048}
    source, _ = seed_source(cap, workload, "default", "2.11")
    assert re.search(
        r"\[_grid\(\(2048, 'XBLOCK'\)\)\]\(arg0_1, buf2, 2048, 3000, XBLOCK=1,", source
    )
    assert "xnumel=" not in source


def test_a_resume_compiles_nothing_and_keeps_the_seeds_the_run_began_with(tmp_path):
    from evo.rundir import RunDir
    from evo.seeding import add_compiler_seeds, seed_path
    from evo.workset import run_workloads

    path = str(WORKLOADS / "softmax_scale.py")
    cfg = load_config_dict(engine_config(tmp_path, [path]))
    rd = RunDir(str(tmp_path / "run"))
    (seed,) = by_mode("softmax_scale").values()
    rd.write_text(seed_path(path), json.dumps({"workload": path, "seeds": [seed.to_dict()]}))
    events = []
    (work,) = add_compiler_seeds(
        cfg, rd, [], run_workloads(cfg), lambda *e: events.append(e), True, resume=True
    )
    assert [s["source"] for s in work.seeds["triton"]] == [seed.source]
    assert work.seeds["triton"][0]["description"] == "torch.compile (Inductor, mode default)"
    assert events == []  # nothing compiled, nothing new to say
    with pytest.raises(EvoError, match="needs a GPU fitness worker"):
        add_compiler_seeds(cfg, rd, [], run_workloads(cfg), lambda *e: None, True)


def test_seed_files_of_two_paths_that_flatten_alike_do_not_collide(tmp_path):
    from evo.rundir import RunDir
    from evo.seeding import seed_path

    a, b = "/a/b_c.py", "/a_b/c.py"
    assert seed_path(a) != seed_path(b)
    rd = RunDir(str(tmp_path / "run"))
    rd.write_text("artifacts/seeds/_a_b_c.py.json", "{}")  # a run from before the hash
    assert seed_path(a, rd) == "artifacts/seeds/_a_b_c.py.json"
    rd.write_text(seed_path(b), "{}")
    assert seed_path(b, rd) == seed_path(b)
