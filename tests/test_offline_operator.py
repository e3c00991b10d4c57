"""The offline parameter operator: finding tunable literals, mutating, crossing and describing.

The integration test at the end evaluates mutated seeds on the CPU interpreter: a parameter
step within its valid set must leave an honest kernel correct.
"""

import os

import torch

if not torch.cuda.is_available():  # as in test_exploits.py: a GPU session keeps real kernels
    os.environ["TRITON_INTERPRET"] = "1"

import random  # noqa: E402
import re  # noqa: E402

import pytest  # noqa: E402

from fitness.judge import EvalOptions, evaluate, workload_for_device  # noqa: E402
from fitness.results import Status  # noqa: E402
from fitness.workloads import BUILTIN_DIR, resolve_workload  # noqa: E402
from operators.offline import (  # noqa: E402
    TARGETS,
    Param,
    ParamOperator,
    find_params,
    neighbours,
    param_kind,
    valid_values,
)

SEEDS = BUILTIN_DIR / "seeds"

CALL_SOURCE = """
import torch.nn as nn

def launch(kernel, grid, x, n, block):
    kernel[grid](x, n, BLOCK_M=128, BLOCK_N=64, num_warps=8, num_stages=3, scale=2,
                 BLOCK_SIZE=block, BLOCK_K=2 * 16, GROUP_M=True)

class ModelNew(nn.Module):
    pass
"""

CONFIG_SOURCE = """
import torch.nn as nn
import triton

CONFIGS = [
    triton.Config({"BLOCK_SIZE_M": 64, "GROUP_SIZE_M": 8, 'TILE_N': 32}, num_warps=4,
                  num_stages=2),
    triton.Config({"BLOCK_SIZE_M": 128, "GROUP_SIZE_M": 4, "other": 7}, num_warps=8),
]
CFG = dict(BLOCK=256, num_warps=2)
CFG2 = {"BLOCK": 1.5, "NUM_WARPS": 4, 3: 4}

class ModelNew(nn.Module):
    pass
"""

ASSIGN_SOURCE = """
import torch.nn as nn

BLOCK_SIZE = 1024
NUM_STAGES: int = 3
label = "é ü"; NUM_WARPS = 0x4
WIDTH = 512

def forward(x):
    BLOCK_M, BLOCK_N = 32, 64
    TILE_K = x.shape[1]
    GROUP_M = 8
    return x

class ModelNew(nn.Module):
    pass
"""


def seed(name: str) -> str:
    return (SEEDS / f"{name}_triton.py").read_text()


def summary(source: str) -> list[tuple[str, int, str]]:
    return [(p.name, p.value, p.kind) for p in find_params(source)]


def masked(source: str) -> str:
    """The source with every tunable literal replaced by a placeholder."""
    out = source
    for p in reversed(find_params(source)):
        out = out[: p.start] + "#" + out[p.end :]
    return out


# --- find_params ---------------------------------------------------------------------------


def test_find_params_reads_call_keywords_and_skips_computed_values():
    assert summary(CALL_SOURCE) == [
        ("BLOCK_M", 128, "block"),
        ("BLOCK_N", 64, "block"),
        ("num_warps", 8, "warps"),
        ("num_stages", 3, "stages"),
    ]
    params = find_params(CALL_SOURCE)
    assert [CALL_SOURCE[p.start : p.end] for p in params] == ["128", "64", "8", "3"]
    assert len({p.scope for p in params}) == 1  # one call: one parameter set


def test_find_params_reads_config_dicts_and_dict_calls():
    assert summary(CONFIG_SOURCE) == [
        ("BLOCK_SIZE_M", 64, "block"),
        ("GROUP_SIZE_M", 8, "group"),
        ("TILE_N", 32, "block"),
        ("num_warps", 4, "warps"),
        ("num_stages", 2, "stages"),
        ("BLOCK_SIZE_M", 128, "block"),
        ("GROUP_SIZE_M", 4, "group"),
        ("num_warps", 8, "warps"),
        ("BLOCK", 256, "block"),
        ("num_warps", 2, "warps"),
        ("NUM_WARPS", 4, "warps"),
    ]
    params = find_params(CONFIG_SOURCE)
    assert all(CONFIG_SOURCE[p.start : p.end] == str(p.value) for p in params)
    scopes = [p.scope for p in params]
    assert len(set(scopes[:3])) == 1 and scopes[0] != scopes[5]  # one dict each


def test_find_params_reads_assignments_at_any_level_with_true_offsets():
    assert summary(ASSIGN_SOURCE) == [
        ("BLOCK_SIZE", 1024, "block"),
        ("NUM_STAGES", 3, "stages"),
        ("NUM_WARPS", 4, "warps"),
        ("BLOCK_M", 32, "block"),
        ("BLOCK_N", 64, "block"),
        ("GROUP_M", 8, "group"),
    ]
    texts = [ASSIGN_SOURCE[p.start : p.end] for p in find_params(ASSIGN_SOURCE)]
    assert texts == ["1024", "3", "0x4", "32", "64", "8"]  # after non-ASCII text too
    module, function = find_params(ASSIGN_SOURCE)[0].scope, find_params(ASSIGN_SOURCE)[3].scope
    assert module != function


def test_find_params_of_unparsable_source_is_empty():
    assert find_params("BLOCK_SIZE = 1024\ndef broken(:\n") == []


# --- valid values ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "kind", "value", "steps"),
    [
        ("BLOCK_K", "block", 16, (32,)),  # tl.dot needs 16
        ("BLOCK_SIZE_M", "block", 256, (128,)),
        ("BLOCK_M", "block", 8, (16,)),  # out of range: only back into it
        ("BLOCK_SIZE", "block", 1024, (512, 2048)),
        ("BLOCK_SIZE", "block", 8192, (4096,)),
        ("BLOCK_SIZE", "block", 1000, (512, 1024)),  # back onto powers of two
        ("BLOCK", "block", 32, (64,)),
        ("num_warps", "warps", 16, (8,)),
        ("num_warps", "warps", 3, (2, 4)),
        ("num_stages", "stages", 1, (2,)),
        ("NUM_STAGES", "stages", 5, (4,)),
        ("GROUP_M", "group", 8, (4, 16)),
    ],
)
def test_neighbours_are_one_step_in_the_valid_set(name, kind, value, steps):
    assert neighbours(Param(name, value, 0, 1, kind)) == steps


def test_flat_block_sizes_stay_within_an_eighth_of_their_value():
    assert min(valid_values(Param("BLOCK_SIZE", 2048, 0, 1, "block"))) == 256
    assert min(valid_values(Param("BLOCK_SIZE", 64, 0, 1, "block"))) == 32
    assert max(valid_values(Param("BLOCK_SIZE", 64, 0, 1, "block"))) == 8192


# --- mutate ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["matmul", "scaled_gelu"])
def test_mutate_changes_only_tunable_literals_one_step(name):
    source = seed(name)
    before = find_params(source)
    op = ParamOperator(max_changes=2)
    for i in range(200):
        child = op.mutate(source, random.Random(i))
        assert child is not None and child != source
        assert masked(child) == masked(source)
        after = find_params(child)
        assert [(p.name, p.scope) for p in after] == [(p.name, p.scope) for p in before]
        changed = [(p, q) for p, q in zip(before, after) if p.value != q.value]
        assert 1 <= len({(p.name, p.scope) for p, _ in changed}) <= 2
        for p, q in changed:
            assert q.value in neighbours(p) and q.value in valid_values(p)


def test_mutate_moves_up_and_down_and_respects_max_changes():
    op = ParamOperator(max_changes=1)
    source = seed("matmul")
    before = find_params(source)
    moves = set()
    for i in range(100):
        after = find_params(op.mutate(source, random.Random(i)))
        changed = [(p, q) for p, q in zip(before, after) if p.value != q.value]
        assert len(changed) == 1
        moves.add((changed[0][0].name, changed[0][1].value > changed[0][0].value))
    assert ("num_warps", True) in moves and ("num_warps", False) in moves
    assert {name for name, _ in moves} == {p.name for p in before}


def test_mutate_moves_same_name_params_of_one_set_together():
    source = (
        "import torch.nn as nn\n"
        'CFG = {"BLOCK": 64, "num_warps": 4, "BLOCK": 128}\n'
        "def config(x):\n"
        "    if x:\n"
        "        NUM_STAGES = 2\n"
        "    else:\n"
        "        NUM_STAGES = 3\n"
        "class ModelNew(nn.Module):\n"
        "    pass\n"
    )
    op = ParamOperator(max_changes=1)
    seen = set()
    for i in range(50):
        pairs = zip(find_params(source), find_params(op.mutate(source, random.Random(i))))
        moves = [q.value - p.value for p, q in pairs]
        assert (moves[0] == 0) == (moves[2] == 0) and moves[0] * moves[2] >= 0
        assert (moves[3] == 0) == (moves[4] == 0) and moves[3] * moves[4] >= 0
        seen.add(tuple(m != 0 for m in moves))
    assert len(seen) == 3  # BLOCK, num_warps or NUM_STAGES, one set at a time


def test_mutate_with_linked_names_moves_every_occurrence_the_same_way():
    source = seed("matmul")
    op = ParamOperator(max_changes=1, link_names=True)
    for i in range(50):
        pairs = zip(find_params(source), find_params(op.mutate(source, random.Random(i))))
        changed = [(p.name, q.value > p.value) for p, q in pairs if p.value != q.value]
        assert len(changed) == 2 and changed[0] == changed[1]


def test_mutate_is_deterministic_given_the_rng_state():
    op = ParamOperator(max_changes=3)
    first, second = random.Random(7), random.Random(7)
    runs = [op.mutate(CONFIG_SOURCE, first) for _ in range(5)]
    assert runs == [op.mutate(CONFIG_SOURCE, second) for _ in range(5)]
    assert len(set(runs)) > 1  # the rng's state, not only its seed, decides
    assert len({op.mutate(CONFIG_SOURCE, random.Random(i)) for i in range(20)}) > 5


@pytest.mark.parametrize(
    "source",
    [
        "import torch.nn as nn\nclass ModelNew(nn.Module):\n    pass\n",  # nothing tunable
        "BLOCK_SIZE = 1024\n",  # no ModelNew to keep
        "BLOCK_SIZE = 1024\nclass ModelNew(:\n",  # not Python
    ],
)
def test_mutate_returns_none_without_something_to_tune(source):
    assert ParamOperator().mutate(source, random.Random(0)) is None


def test_each_builtin_seed_offers_its_launch_parameters_or_nothing():
    assert find_params(seed("softmax")) == []  # its block must cover the row: computed only
    assert ParamOperator().mutate(seed("softmax"), random.Random(0)) is None
    for name in ["add_layernorm", "layernorm", "rmsnorm", "row_sum"]:  # the chunk is computed
        assert summary(seed(name)) == [("NUM_WARPS", 8, "warps")], name
        child = ParamOperator().mutate(seed(name), random.Random(0))
        assert re.search(r"^NUM_WARPS = (4|16)$", child, re.M), name
    assert summary(seed("scaled_gelu")) == [("BLOCK_SIZE", 1024, "block")]
    for name in ["matmul", "matmul_bias_relu", "matmul_scale_gelu"]:
        names = [p.name for p in find_params(seed(name))]
        assert names == ["BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "num_warps", "num_stages"] * 2


def test_max_changes_below_one_is_refused():
    with pytest.raises(ValueError, match="max_changes"):
        ParamOperator(max_changes=0)


# --- crossover ------------------------------------------------------------------------------


def with_values(source: str, values: dict[tuple[str, int], int]) -> str:
    """`source` with the n-th occurrence of each named param set to a new value."""
    out, seen = source, {}
    params = find_params(source)
    keys = []
    for p in params:
        keys.append((p.name, seen.get(p.name, 0)))
        seen[p.name] = seen.get(p.name, 0) + 1
    for key, p in reversed(list(zip(keys, params))):
        if key in values:
            out = out[: p.start] + str(values[key]) + out[p.end :]
    return out


def test_crossover_takes_whole_parameter_sets_from_b():
    a = seed("matmul")
    b = with_values(
        a, {("BLOCK_M", 0): 32, ("num_warps", 0): 2, ("BLOCK_K", 1): 64, ("num_stages", 1): 4}
    )
    op = ParamOperator()
    outcomes = set()
    for i in range(50):
        child = op.crossover(a, b, random.Random(i))
        assert child is not None and masked(child) == masked(a)
        values = [p.value for p in find_params(child)]
        interpreter, gpu = tuple(values[:6]), tuple(values[6:])
        assert interpreter in {(16, 16, 16, 2, 4, 1), (32, 16, 16, 2, 2, 1)}
        assert gpu in {(128, 128, 32, 8, 8, 3), (128, 128, 64, 8, 8, 4)}
        outcomes.add((interpreter[0], gpu[2]))
    assert outcomes == {(32, 32), (16, 64), (32, 64)}  # never nothing from b


def test_crossover_matches_by_name_and_occurrence_and_keeps_a_valid():
    a = CONFIG_SOURCE  # BLOCK_SIZE_M 64 / 128 and GROUP_SIZE_M 8 / 4 in two dicts
    b = "BLOCK_SIZE_M = 16\nBLOCK_SIZE_M = 32\nnum_warps = 64\nGROUP_SIZE_M = 2\n"
    op = ParamOperator()
    children = set()
    for i in range(30):
        child = op.crossover(a, b, random.Random(i))
        assert child is not None
        values = [p.value for p in find_params(child)]
        assert values[3] == 4 and values[7] == 8  # num_warps=64 is not a valid value
        assert values[5:7] == [128, 4] or values[5] == 32  # b has no second GROUP_SIZE_M
        assert values[:2] in ([64, 8], [16, 2])  # the first dict is taken whole or not at all
        children.add(child)
    assert len(children) == 3


def test_crossover_returns_none_without_a_differing_shared_param():
    op = ParamOperator()
    a = seed("matmul")
    assert op.crossover(a, a, random.Random(0)) is None
    assert op.crossover(a, seed("scaled_gelu"), random.Random(0)) is None
    assert op.crossover(a, seed("softmax"), random.Random(0)) is None
    assert op.crossover(seed("softmax"), a, random.Random(0)) is None


# --- describe -------------------------------------------------------------------------------


def test_describe_lists_the_changed_params_in_order():
    op = ParamOperator()
    before = "BLOCK_M = 128\nBLOCK_N = 64\nnum_warps = 8\n"
    after = "BLOCK_M = 64\nBLOCK_N = 64\nnum_warps = 4\n"
    assert op.describe(before, after) == "BLOCK_M 128->64, num_warps 8->4"
    assert op.describe(before, before) == "no parameter changes"
    child = op.mutate(seed("matmul"), random.Random(3))
    line = op.describe(seed("matmul"), child)
    assert "\n" not in line and re.fullmatch(r"(\w+ \d+->\d+)(, \w+ \d+->\d+)*", line)


# --- integration: mutated seeds still evaluate -----------------------------------------------


def test_mutated_seeds_evaluate_to_a_recorded_status_and_stay_correct():
    workloads = {
        "matmul": resolve_workload("builtin:matmul").with_overrides({"M": 48, "N": 48, "K": 48}),
        "scaled_gelu": workload_for_device(resolve_workload("builtin:scaled_gelu"), "cpu"),
    }
    opts = EvalOptions(device="cpu", baselines=False, samples=3)
    op = ParamOperator()
    for name, workload in workloads.items():
        source = seed(name)
        interpreter = [p.value for p in find_params(source)][:6]  # the CPU branch's values
        rng = random.Random(1)
        correct_runs_changed = []
        for _ in range(3):
            child = op.mutate(source, rng)
            assert child is not None and child != source
            res = evaluate(child, workload, opts)
            assert isinstance(res.status, Status), res.reason
            if res.status is Status.CORRECT:
                values = [p.value for p in find_params(child)][:6]
                correct_runs_changed.append(values != interpreter)
        assert any(correct_runs_changed), name  # a correct child that ran changed values


# --- targets: the interpreter's branch and the GPU's ----------------------------------------


def test_the_seed_interpreter_branch_binds_the_interpreters_tunables_only():
    params = find_params(seed("matmul"))
    by_target = {t: {p.name: p.value for p in params if p.target == t} for t in TARGETS}
    assert by_target["interpreter"]["BLOCK_M"] == 16 and by_target["interpreter"]["num_stages"] == 1
    assert by_target["gpu"]["BLOCK_M"] == 128 and by_target["gpu"]["num_warps"] == 8


@pytest.mark.parametrize("target", TARGETS)
def test_a_targeted_operator_leaves_the_other_targets_tunables_alone(target):
    source = seed("matmul")
    before = find_params(source)
    op = ParamOperator(max_changes=3, target=target)
    for i in range(100):
        after = find_params(op.mutate(source, random.Random(i)))
        moved = {p.target for p, q in zip(before, after) if p.value != q.value}
        assert moved and moved <= {target, None}, moved


IF_FORMS = [
    (
        'if os.environ.get("TRITON_INTERPRET") == "1":\n    B = dict(BLOCK_SIZE=64)\n'
        "else:\n    B = dict(BLOCK_SIZE=1024)\n",
        {64: "interpreter", 1024: "gpu"},
    ),
    (
        'if os.getenv("TRITON_INTERPRET") != "1":\n    BLOCK_SIZE = 1024\n'
        "else:\n    BLOCK_SIZE = 64\n",
        {64: "interpreter", 1024: "gpu"},
    ),
    ('if not os.environ.get("TRITON_INTERPRET"):\n    BLOCK_SIZE = 1024\n', {1024: "gpu"}),
    (
        "def cfg():\n    if INTERP == 1:\n        return dict(BLOCK_SIZE=64)\n"
        "    return dict(BLOCK_SIZE=1024)\n",
        {64: None, 1024: None},
    ),  # no TRITON_INTERPRET: both
    ("BLOCK_SIZE = 256\n", {256: None}),
]


@pytest.mark.parametrize(("code", "want"), IF_FORMS)
def test_interpreter_branches_are_recognised_in_their_usual_forms(code, want):
    got = {p.value: p.target for p in find_params("import os\n" + code)}
    assert got == want


def test_an_unknown_target_is_refused():
    with pytest.raises(ValueError, match="target"):
        ParamOperator(target="tpu")


def test_the_analysts_hint_picks_and_steers_the_first_parameter_moved():
    """A memory-bound hint (block +1, warps +1) makes every mutation grow a block size or a
    warp count; without a hint, mutations also shrink them and touch other kinds."""
    source = seed("matmul")
    op = ParamOperator(max_changes=1, target="gpu")
    before = find_params(source)
    for i in range(60):
        after = find_params(op.mutate(source, random.Random(i), hint={"block": 1, "warps": 1}))
        (moved,) = [(p, q) for p, q in zip(before, after) if p.value != q.value][:1]
        p, q = moved
        assert p.kind in ("block", "warps") and q.value > p.value, (p, q)
    kinds, down = set(), 0
    for i in range(60):
        after = find_params(op.mutate(source, random.Random(i)))
        for p, q in zip(before, after):
            if p.value != q.value:
                kinds.add(p.kind)
                down += q.value < p.value
    assert kinds - {"block", "warps"} and down > 0


# --- Inductor's block names (compiler seeds) ------------------------------------------------

INDUCTOR_SOURCE = """
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def red(in_ptr, out_ptr, xnumel, r0_numel, XBLOCK: tl.constexpr, R0_BLOCK: tl.constexpr):
    xoffset = tl.program_id(0) * XBLOCK


@triton.jit
def per(in_ptr, out_ptr, xnumel, r0_numel, XBLOCK: tl.constexpr):
    R0_BLOCK: tl.constexpr = tl.constexpr(32)
    xoffset = tl.program_id(0) * XBLOCK


class ModelNew(nn.Module):
    def forward(self, x, y):
        red[grid](x, y, 8192, XBLOCK=1024, R0_BLOCK=64, num_warps=4, num_stages=1)
        per[grid](x, y, 8192, 32, XBLOCK=1, num_warps=2, num_stages=1)
        return y
"""


@pytest.mark.parametrize("name", ["XBLOCK", "YBLOCK", "R0_BLOCK", "RBLOCK"])
def test_inductor_block_names_are_block_tunables(name):
    assert param_kind(name) == "block"


@pytest.mark.parametrize("name", ["WBLOCK", "xblock", "R0_BLOCKS", "XBLOCK_N", "r0_numel"])
def test_names_merely_like_inductors_are_not_tunable(name):
    assert param_kind(name) is None


def test_inductor_blocks_are_powers_of_two_within_inductors_own_limits():
    """Up to 8192, but XBLOCK at most 4096 and YBLOCK/ZBLOCK 1024: Inductor leaves the masks
    out where numel is a multiple of those, so a larger block would write past the end."""
    assert valid_values(Param("XBLOCK", 1, 0, 1, "block")) == tuple(2**i for i in range(13))
    assert valid_values(Param("R0_BLOCK", 8, 0, 1, "block")) == tuple(2**i for i in range(14))
    assert valid_values(Param("YBLOCK", 1024, 0, 1, "block")) == tuple(2**i for i in range(7, 11))
    assert valid_values(Param("ZBLOCK", 64, 0, 1, "block"))[-1] == 1024
    assert min(valid_values(Param("RBLOCK", 1000, 0, 1, "block"))) == 64  # 512 // 8
    assert valid_values(Param("XBLOCK", 4096, 0, 1, "block")) == (512, 1024, 2048, 4096)
    assert neighbours(Param("XBLOCK", 4096, 0, 1, "block")) == (2048,)
    # other block sizes keep their floor of 32
    assert min(valid_values(Param("BLOCK_SIZE", 8, 0, 1, "block"))) == 32


@pytest.mark.parametrize(
    ("name", "value", "steps"),
    [
        ("XBLOCK", 1, (2,)),  # a reduction's one row per program may grow
        ("XBLOCK", 1024, (512, 2048)),
        ("R0_BLOCK", 64, (32, 128)),
        ("R0_BLOCK", 16, (8, 32)),  # below the flat blocks' floor of 32
        ("RBLOCK", 8192, (4096,)),
        ("YBLOCK", 3, (2, 4)),  # back onto powers of two
        ("BLOCK", 8, (32,)),  # not Inductor's: only back into [32, 8192]
    ],
)
def test_inductor_block_neighbours(name, value, steps):
    assert neighbours(Param(name, value, 0, 1, "block")) == steps


def test_find_params_reads_inductor_launches_but_not_frozen_constexprs():
    assert summary(INDUCTOR_SOURCE) == [
        ("XBLOCK", 1024, "block"),
        ("R0_BLOCK", 64, "block"),
        ("num_warps", 4, "warps"),
        ("num_stages", 1, "stages"),
        ("XBLOCK", 1, "block"),
        ("num_warps", 2, "warps"),
        ("num_stages", 1, "stages"),
    ]
    texts = [INDUCTOR_SOURCE[p.start : p.end] for p in find_params(INDUCTOR_SOURCE)]
    assert texts == ["1024", "64", "4", "1", "1", "2", "1"]


def test_a_frozen_constexpr_block_is_not_tunable_but_a_literal_one_is():
    frozen = "R0_BLOCK: tl.constexpr = tl.constexpr(32)\nclass ModelNew:\n    pass\n"
    assert find_params(frozen) == []
    assert ParamOperator().mutate(frozen, random.Random(0)) is None
    literal = frozen.replace("tl.constexpr(32)", "32")
    assert summary(literal) == [("R0_BLOCK", 32, "block")]


def test_the_gpu_operator_moves_inductor_blocks_one_step():
    op = ParamOperator(target="gpu")
    before = find_params(INDUCTOR_SOURCE)
    child = op.mutate(INDUCTOR_SOURCE, random.Random(0))
    assert child is not None and child != INDUCTOR_SOURCE
    assert masked(child) == masked(INDUCTOR_SOURCE)
    assert any(p.value != q.value for p, q in zip(before, find_params(child)))

    op = ParamOperator(max_changes=1, target="gpu")
    moved = set()
    for i in range(200):
        child = op.mutate(INDUCTOR_SOURCE, random.Random(i))
        assert "R0_BLOCK: tl.constexpr = tl.constexpr(32)" in child  # frozen stays frozen
        assert masked(child) == masked(INDUCTOR_SOURCE)
        changed = [(p, q) for p, q in zip(before, find_params(child)) if p.value != q.value]
        assert len(changed) == 1
        ((p, q),) = changed
        assert q.value in neighbours(p)
        moved.add((p.name, p.value, q.value))
    assert ("XBLOCK", 1, 2) in moved  # XBLOCK=1 can only grow, and does
    assert {("XBLOCK", 1024, 512), ("XBLOCK", 1024, 2048)} <= moved
    assert {("R0_BLOCK", 64, 32), ("R0_BLOCK", 64, 128)} <= moved
