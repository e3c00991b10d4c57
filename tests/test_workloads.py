"""Workload loading and name resolution: KernelBench-format files, overrides, the index."""

import os
import sys
import time
from pathlib import Path

import pytest

from fitness import workloads
from fitness.errors import EvoError
from fitness.workloads import (
    KernelBenchIndex,
    Workload,
    builtin_names,
    import_workload_module,
    list_workloads,
    load_workload,
    resolve_workload,
)

GEMM_ADD_RELU = """\
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_features, out_features, bias_shape):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features, bias=False)
        self.bias = nn.Parameter(torch.randn(bias_shape))

    def forward(self, x):
        return torch.relu(self.gemm(x) + self.bias)


batch_size = 128
in_features = 256
out_features = 512
bias_shape = (out_features,)


def get_inputs():
    return [torch.rand(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features, bias_shape]
"""

NOTHING_BUILT = """\
import torch.nn as nn

N = 4


class Model(nn.Module):
    def __init__(self, n):
        raise RuntimeError("Model was built")


def get_inputs():
    raise RuntimeError("inputs were made")


def get_init_inputs():
    return [N]
"""

BUILTIN_SOFTMAX = """\
import torch
import torch.nn as nn

ROWS = 4096
COLS = 1024
SHAPES = [{"ROWS": 4, "COLS": 8}, {}]


class Model(nn.Module):
    def forward(self, x):
        return torch.softmax(x, dim=-1)


def get_inputs():
    return [torch.randn(ROWS, COLS)]


def get_init_inputs():
    return []
"""

NEEDS_TRANSFORMERS = """\
import torch
from transformers import AutoConfig


class Model(torch.nn.Module):
    pass


def get_inputs():
    return []


def get_init_inputs():
    return []
"""


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


@pytest.fixture
def gemm_file(tmp_path: Path) -> Path:
    return write(tmp_path / "gemm_add_relu.py", GEMM_ADD_RELU)


@pytest.fixture
def kernelbench(tmp_path: Path) -> Path:
    """A small fake KernelBench checkout: ROOT/KernelBench/levelN/ID_Name.py."""
    root = tmp_path / "kb_repo"
    problems = root / "KernelBench"
    write(problems / "level1" / "1_Square_matrix_multiplication_.py", GEMM_ADD_RELU)
    write(problems / "level2" / "76_Gemm_Add_ReLU.py", GEMM_ADD_RELU)
    write(problems / "level2" / "9_Matmul_Subtract.py", NOTHING_BUILT)
    write(problems / "level2" / "README.md", "not a problem")
    write(problems / "level4" / "1_gpt2_bs1_seq1023.py", NEEDS_TRANSFORMERS)
    return root


@pytest.fixture
def builtin_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "builtin"
    write(folder / "softmax.py", BUILTIN_SOFTMAX)
    write(folder / "seeds" / "softmax_triton.py", "# seed\n")
    write(folder / "rmsnorm.py", BUILTIN_SOFTMAX)
    monkeypatch.setattr(workloads, "BUILTIN_DIR", folder)
    return folder


# --- loading a file ---


def test_load_reads_source_constants_and_init_inputs(gemm_file: Path):
    w = load_workload(gemm_file)
    assert w.name == str(gemm_file.resolve()) and w.short_name == "gemm_add_relu"
    assert w.source == GEMM_ADD_RELU
    assert w.constants == {
        "batch_size": 128,
        "in_features": 256,
        "out_features": 512,
        "bias_shape": (512,),
    }
    assert w.init_inputs == (256, 512, (512,))
    assert w.overrides == {} and w.shapes == () and w.seed_path is None and w.level is None


def test_override_is_seen_by_derived_constants_and_get_init_inputs(gemm_file: Path):
    w = load_workload(gemm_file, overrides={"out_features": 64, "batch_size": 2})
    assert w.constants["out_features"] == 64 and w.constants["bias_shape"] == (64,)
    assert w.init_inputs == (256, 64, (64,))
    assert w.overrides == {"out_features": 64, "batch_size": 2}


def test_list_override_becomes_tuple(gemm_file: Path):
    w = load_workload(gemm_file, overrides={"bias_shape": [7]})
    assert w.constants["bias_shape"] == (7,) and w.init_inputs[2] == (7,)


def test_with_overrides_replaces_previous_overrides(gemm_file: Path):
    small = load_workload(gemm_file, overrides={"in_features": 8})
    other = small.with_overrides({"out_features": 16})
    assert other.overrides == {"out_features": 16}
    assert other.constants["in_features"] == 256 and other.constants["out_features"] == 16
    assert other.name == small.name


def test_loads_do_not_share_a_module(gemm_file: Path):
    before = set(sys.modules)
    a = import_workload_module(gemm_file, {"in_features": 1})
    b = import_workload_module(gemm_file, {"in_features": 2})
    assert a is not b and a.__name__ != b.__name__
    assert (a.in_features, b.in_features) == (1, 2)
    assert sys.modules[a.__name__] is a
    load_workload(gemm_file)
    assert set(sys.modules) - before == {a.__name__, b.__name__}
    del sys.modules[a.__name__], sys.modules[b.__name__]


def test_module_name_can_be_chosen(gemm_file: Path):
    module = import_workload_module(gemm_file, module_name="evo_test_chosen_name")
    assert module.__name__ == "evo_test_chosen_name" and module.Model.__module__ == module.__name__
    sys.modules.pop("evo_test_chosen_name")


def test_loading_builds_neither_model_nor_inputs(tmp_path: Path):
    w = load_workload(write(tmp_path / "lazy.py", NOTHING_BUILT))
    assert w.constants == {"N": 4} and w.init_inputs == (4,)


@pytest.mark.parametrize("missing", ["Model", "get_inputs", "get_init_inputs"])
def test_missing_required_name_is_named(tmp_path: Path, missing: str):
    text = GEMM_ADD_RELU.replace(f"class {missing}(", "class Other(").replace(
        f"def {missing}(", "def other("
    )
    path = write(tmp_path / "incomplete.py", text)
    with pytest.raises(EvoError, match=rf"{path.name} does not define {missing}$"):
        load_workload(path)


def test_override_of_unknown_name_is_named(gemm_file: Path):
    with pytest.raises(EvoError, match=r"override 'hidden_size' is not a module-level constant"):
        load_workload(gemm_file, overrides={"hidden_size": 3})
    with pytest.raises(EvoError, match=r"override 'Model' is not a module-level constant"):
        import_workload_module(gemm_file, {"Model": 3})


def test_override_of_non_constant_is_refused(tmp_path: Path):
    path = write(tmp_path / "obj.py", NOTHING_BUILT + "\nlayer = nn.ReLU()\n")
    with pytest.raises(EvoError, match=r"override 'layer' of .*obj.py.*ReLU.* not a constant"):
        load_workload(path, overrides={"layer": 1})


def test_init_inputs_that_are_not_plain_are_summarized(tmp_path: Path):
    text = NOTHING_BUILT.replace("return [N]", "return [N, torch.zeros(2, 3), object()]")
    w = load_workload(write(tmp_path / "tensors.py", "import torch\n" + text))
    assert w.init_inputs == (4, "Tensor(shape=(2, 3), dtype=torch.float32)", "<object>")


def test_failing_get_init_inputs_is_named(tmp_path: Path):
    text = NOTHING_BUILT.replace("return [N]", "return [1 / 0]")
    with pytest.raises(EvoError, match=r"get_init_inputs\(\) of .*: ZeroDivisionError"):
        load_workload(write(tmp_path / "bad_init.py", text))


def test_import_errors_name_the_file_and_the_exception(tmp_path: Path):
    path = write(tmp_path / "broken.py", "import torch\nx = undefined_name\n")
    with pytest.raises(EvoError, match=r"broken.py failed: NameError: name 'undefined_name'"):
        load_workload(path)
    path = write(tmp_path / "syntax.py", "def f(:\n")
    with pytest.raises(EvoError, match=r"syntax.py:1: syntax error"):
        load_workload(path)
    path = write(tmp_path / "needs_pkg.py", "import evo_no_such_package_xyz\n")
    with pytest.raises(EvoError, match=r"imports 'evo_no_such_package_xyz', which is not"):
        load_workload(path)


def test_workload_is_hashable_and_frozen(gemm_file: Path):
    w = load_workload(gemm_file)
    assert hash(w) == hash(load_workload(gemm_file)) and isinstance(w, Workload)
    with pytest.raises(AttributeError):
        w.name = "other"


# --- KernelBench index and resolution ---


@pytest.mark.parametrize("inner", [False, True], ids=["repo_root", "inner_folder"])
@pytest.mark.parametrize(
    "ref",
    [
        "kernelbench:level2/76",
        "kernelbench:level2/76_Gemm_Add_ReLU",
        "kernelbench:level2/76_Gemm_Add_ReLU.py",
    ],
)
def test_resolve_kernelbench_problem(kernelbench: Path, inner: bool, ref: str):
    root = kernelbench / "KernelBench" if inner else kernelbench
    w = resolve_workload(ref, kernelbench_root=root, overrides={"batch_size": 2})
    assert w.name == "kernelbench:level2/76_Gemm_Add_ReLU"
    assert w.short_name == "level2/76_Gemm_Add_ReLU" and w.level == 2
    assert w.path == kernelbench / "KernelBench" / "level2" / "76_Gemm_Add_ReLU.py"
    assert w.constants["batch_size"] == 2


def test_kernelbench_root_comes_from_the_environment(
    kernelbench: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv("KERNELBENCH_ROOT", str(kernelbench))
    assert resolve_workload("kernelbench:level1/1").level == 1
    assert "kernelbench:level2/9_Matmul_Subtract" in list_workloads()


def test_missing_kernelbench_root_says_how_to_set_it(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("KERNELBENCH_ROOT", raising=False)
    with pytest.raises(EvoError, match=r"set KERNELBENCH_ROOT or pass --kernelbench"):
        resolve_workload("kernelbench:level2/76")


def test_unknown_problem_names_it_and_the_root(kernelbench: Path):
    with pytest.raises(EvoError, match=r"no KernelBench problem 'level2/77' under .*kb_repo"):
        resolve_workload("kernelbench:level2/77", kernelbench_root=kernelbench)
    with pytest.raises(EvoError, match=r"'level2/76_Gemm' under .*did you mean level2/76_Gemm"):
        resolve_workload("kernelbench:level2/76_Gemm", kernelbench_root=kernelbench)
    with pytest.raises(EvoError, match=r"'76' is not of the form levelN/ID"):
        resolve_workload("kernelbench:76", kernelbench_root=kernelbench)


def test_root_without_levels_is_refused(tmp_path: Path):
    with pytest.raises(EvoError, match=r"has no levelN folders"):
        KernelBenchIndex(tmp_path)
    with pytest.raises(EvoError, match=r"is not a folder"):
        KernelBenchIndex(tmp_path / "absent")


def test_index_lists_problems_by_level_and_number(kernelbench: Path):
    index = KernelBenchIndex(kernelbench)
    keys = [p.key for p in index.problems()]
    assert keys == [
        "level1/1_Square_matrix_multiplication_",
        "level2/9_Matmul_Subtract",
        "level2/76_Gemm_Add_ReLU",
        "level4/1_gpt2_bs1_seq1023",
    ]
    assert [p.number for p in index.problems(levels=[2])] == [9, 76]


def test_duplicate_problem_number_is_ambiguous(kernelbench: Path):
    write(kernelbench / "KernelBench" / "level2" / "76_Other.py", GEMM_ADD_RELU)
    with pytest.raises(EvoError, match=r"ambiguous.*76_Gemm_Add_ReLU, level2/76_Other"):
        KernelBenchIndex(kernelbench).resolve("level2/76")


def test_level4_without_transformers_says_so(kernelbench: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setitem(sys.modules, "transformers", None)  # makes `import transformers` fail
    with pytest.raises(
        EvoError,
        match=r"level 4 needs the 'transformers' package \(pip install transformers\)",
    ):
        resolve_workload("kernelbench:level4/1", kernelbench_root=kernelbench)


# --- plain paths and builtins ---


def test_resolve_plain_path(gemm_file: Path):
    w = resolve_workload(str(gemm_file))
    assert w.name == str(gemm_file.resolve()) and w.level is None


def test_unrecognized_name_is_refused(tmp_path: Path):
    with pytest.raises(EvoError, match=r"'nope:x' is neither builtin:NAME"):
        resolve_workload("nope:x")
    with pytest.raises(EvoError, match=r"is neither builtin:NAME"):
        resolve_workload(str(tmp_path / "missing.py"))


def test_builtin_resolution_and_seed(builtin_dir: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("KERNELBENCH_ROOT", raising=False)
    assert builtin_names() == ["rmsnorm", "softmax"]
    assert list_workloads() == ["builtin:rmsnorm", "builtin:softmax"]
    w = resolve_workload("builtin:softmax")
    assert w.name == "builtin:softmax" and w.short_name == "softmax"
    assert w.shapes == ({"ROWS": 4, "COLS": 8}, {})
    assert w.seed_path == builtin_dir / "seeds" / "softmax_triton.py"
    assert resolve_workload("builtin:rmsnorm").seed_path is None
    tiny = w.with_overrides(w.shapes[0])
    assert tiny.constants == {"ROWS": 4, "COLS": 8} and tiny.name == "builtin:softmax"


def test_unknown_builtin_lists_available_names(builtin_dir: Path):
    with pytest.raises(
        EvoError, match=r"unknown builtin workload 'gemm'; available: rmsnorm, soft"
    ):
        resolve_workload("builtin:gemm")


def test_shapes_with_unknown_constant_is_refused(builtin_dir: Path):
    write(builtin_dir / "softmax.py", BUILTIN_SOFTMAX.replace('"COLS": 8', '"WIDTH": 8'))
    with pytest.raises(EvoError, match=r"SHAPES in .*softmax.py overrides 'WIDTH'"):
        resolve_workload("builtin:softmax")


@pytest.mark.parametrize("name", builtin_names() or [None])
def test_builtin_workload_loads_with_shapes_and_seed(name: str | None):
    if name is None:
        pytest.skip(f"no builtin workloads in {workloads.BUILTIN_DIR} yet")
    w = resolve_workload(f"builtin:{name}")
    assert w.shapes, f"builtin:{name} has no SHAPES"
    assert w.seed_path is not None, f"builtin:{name} has no seeds/{name}_triton.py"
    for shape in w.shapes:
        assert w.with_overrides(shape).overrides == shape


# --- the real KernelBench ---


def test_every_real_kernelbench_problem_of_levels_1_to_3_loads():
    root = os.environ.get("KERNELBENCH_ROOT")
    if not root:
        pytest.skip("KERNELBENCH_ROOT is not set")
    problems = KernelBenchIndex(root).problems(levels=[1, 2, 3])
    assert problems, f"no level 1-3 problems under {root}"
    failures = []
    start = time.perf_counter()
    for problem in problems:
        try:
            w = resolve_workload(f"kernelbench:{problem.key}", kernelbench_root=root)
            assert w.level == problem.level and w.constants
        except EvoError as exc:
            failures.append(str(exc))
    assert not failures, "\n".join(failures)
    print(f"{len(problems)} problems loaded in {time.perf_counter() - start:.1f} s")
