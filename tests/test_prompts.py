"""Prompt templates: every operator renders for every backend, golden files pin the structure,
and overrides, auxiliary code and guardrails show up where they should.

Set EVO_UPDATE_GOLDEN=1 to rewrite tests/golden/prompts/ after an intended change.
"""

from __future__ import annotations

import ast
import dataclasses
import difflib
import os
import re
from pathlib import Path

import pytest

from fitness.results import EvalResult, Status
from operators.prompting import (
    GUARDRAIL_KEYS,
    OPERATORS,
    PROMPTS_DIR,
    CodeSample,
    DeviceFacts,
    PromptContext,
    PromptError,
    PromptOverrides,
    Verdict,
    fence,
    load_aux_code,
    render,
    truncate_log,
)

BACKENDS = ("triton", "cuda")
GOLDEN = Path(__file__).parent / "golden" / "prompts"
ROOT = Path(__file__).parent.parent

REFERENCE = """\
import torch
import torch.nn as nn

ROWS = 4096
COLS = 1000


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sum(x, dim=-1)


def get_inputs():
    return [torch.randn(ROWS, COLS)]


def get_init_inputs():
    return []
"""

TRITON_KERNEL = """\
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _row_sum(x_ptr, y_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols, other=0.0)
    tl.store(y_ptr + row, tl.sum(x, axis=0))


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty(x.shape[0], device=x.device, dtype=x.dtype)
        _row_sum[(x.shape[0],)](x, y, x.shape[1], BLOCK=triton.next_power_of_2(x.shape[1]))
        return y
"""

CUDA_KERNEL = '''\
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_SRC = r"""
__global__ void row_sum(const float* x, float* y, int cols) { /* ... */ }
torch::Tensor run(torch::Tensor x) { /* ... */ }
"""
_ext = load_inline(name="rs", cpp_sources="torch::Tensor run(torch::Tensor x);",
                   cuda_sources=_SRC, functions=["run"])


class ModelNew(nn.Module):
    def forward(self, x):
        return _ext.run(x.contiguous())
'''

KERNEL = {"triton": TRITON_KERNEL, "cuda": CUDA_KERNEL}
OTHER = {"triton": "cuda", "cuda": "triton"}
EDIT_FORMAT = {"mutate": "diff", "crossover": "diff", "repair": "rewrite"}
CORRECT = {
    "status": "correct",
    "reason": "",
    "runtime_ms": 0.2134,
    "speedup_vs_eager": 1.42,
    "speedup_vs_compile": 0.87,
    "sol_fraction": 0.31,
    "precision": "fp32",
}
ERROR_LOG = "\n".join(
    ["Traceback (most recent call last):"]
    + [f'  File "candidate.py", line {i}, in forward' for i in range(1, 120)]
    + ["triton.compiler.errors.CompilationError: at 7:8: mask must be boolean"]
)


def full_context(operator: str, backend: str) -> PromptContext:
    """A context with every part filled, as the golden files show it."""
    source = KERNEL[OTHER[backend]] if operator == "translate" else KERNEL[backend]
    failed = EvalResult(Status.COMPILE_ERROR, "triton compile failed: mask must be boolean")
    return PromptContext(
        reference=REFERENCE,
        workload="builtin:row_sum",
        step=12,
        parent=CodeSample(source, failed if operator == "repair" else CORRECT, "island 0 best"),
        second_parent=CodeSample(KERNEL[backend], {**CORRECT, "speedup_vs_eager": 1.1}),
        inspirations=[
            CodeSample(KERNEL[backend], {**CORRECT, "speedup_vs_eager": 2.05}, "top"),
            CodeSample(KERNEL[backend], None, "diverse"),
        ],
        error=ERROR_LOG if operator == "repair" else "",
        recommendation="The kernel is latency bound: process several rows per program.",
        device=DeviceFacts("NVIDIA H100 80GB HBM3", "9.0", 132, 50 * 2**20, 67e12, 3.35e12),
        guardrails={"required": [r"tl\.sum|__shfl"], "banned": [r"\bview_as\b"]},
        edit_format=EDIT_FORMAT.get(operator, "rewrite"),
        source_backend=OTHER[backend] if operator == "translate" else "",
        aux_code=[("helpers/reduce.py", "def tree_reduce(xs):\n    return sum(xs)\n")],
    )


def minimal_context(operator: str, backend: str) -> PromptContext:
    """Only the parts `operator` cannot do without."""
    extra = {
        "initial": {},
        "mutate": {"parent": KERNEL[backend]},
        "repair": {"parent": KERNEL[backend], "error": "boom"},
        "crossover": {"parent": KERNEL[backend], "second_parent": KERNEL[backend]},
        "translate": {"parent": KERNEL[OTHER[backend]], "source_backend": OTHER[backend]},
    }[operator]
    return PromptContext(reference=REFERENCE, **extra)


def as_text(p) -> str:
    return f"=== system ({p.template_names[0]}) ===\n{p.system}\n=== user ===\n{p.user}"


CASES = [(op, be) for op in OPERATORS for be in BACKENDS]


@pytest.mark.parametrize("operator,backend", CASES)
def test_golden(operator, backend):
    text = as_text(render(operator, backend, full_context(operator, backend)))
    path = GOLDEN / f"{operator}__{backend}.txt"
    if os.environ.get("EVO_UPDATE_GOLDEN") == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    want = path.read_text(encoding="utf-8")
    if text != want:
        diff = "".join(
            difflib.unified_diff(want.splitlines(True), text.splitlines(True), str(path), "now")
        )
        pytest.fail(f"prompt differs from {path} (EVO_UPDATE_GOLDEN=1 rewrites it):\n{diff}")


@pytest.mark.parametrize("operator,backend", CASES)
def test_full_context_shows_every_part(operator, backend):
    ctx = full_context(operator, backend)
    p = render(operator, backend, ctx)
    assert p.template_names == ("system.j2", f"{operator}.j2")
    for part in (
        "## Reference: builtin:row_sum",
        "return torch.sum(x, dim=-1)",
        "## Other kernels from the population",
        "Verdict: correct: 0.2134 ms, 2.05x vs PyTorch eager",
        "132 SMs, 50 MiB L2 cache, peak 67 TFLOP/s (fp32), 3.35 TB/s memory bandwidth",
        "process several rows per program",
        "### `helpers/reduce.py`",
        "## Your reply",
    ):
        assert part in p.user, part
    assert r"`tl\.sum|__shfl`" in p.system and r"`\bview_as\b`" in p.system
    assert ("island 0 best" in p.user) == (operator != "initial")  # initial has no parent
    assert ("## Error output" in p.user) == (operator == "repair")
    assert ("## Parent B" in p.user) == (operator == "crossover")
    assert ("## Example of the format" in p.user) == (operator in ("initial", "translate"))
    assert ("<<<<<<< SEARCH" in p.user) == (p.edit_format == "diff")


@pytest.mark.parametrize("operator,backend", CASES)
def test_minimal_context_leaves_optional_parts_out(operator, backend):
    p = render(operator, backend, minimal_context(operator, backend))
    for absent in ("## Device", "## Profiler", "## Auxiliary", "## Other kernels", "Verdict:"):
        assert absent not in p.user, absent
    assert "class Model(nn.Module)" in p.user
    assert "{{" not in p.user and "{%" not in p.user
    assert "\n\n\n## " not in p.user and "\n\n\n\n" not in p.user  # one blank line between parts


@pytest.mark.parametrize(
    "operator,missing,needle",
    [
        ("mutate", {"parent": None}, "mutate needs ctx.parent"),
        ("repair", {"error": "  "}, "repair needs ctx.error"),
        ("crossover", {"second_parent": None}, "crossover needs ctx.second_parent"),
        ("translate", {"source_backend": ""}, "translate needs ctx.source_backend"),
        ("translate", {"source_backend": "triton"}, "source and target backend are both"),
        ("translate", {"source_backend": "metal"}, "unknown source backend 'metal'"),
        ("initial", {"reference": ""}, "initial needs ctx.reference"),
        ("mutate", {"edit_format": "patch"}, "unknown edit format 'patch'"),
    ],
)
def test_missing_or_wrong_parts_raise(operator, missing, needle):
    ctx = dataclasses.replace(full_context(operator, "triton"), **missing)
    with pytest.raises(PromptError, match=re.escape(needle)):
        render(operator, "triton", ctx)


def test_unknown_operator_and_backend():
    with pytest.raises(PromptError, match="unknown operator 'mutant'"):
        render("mutant", "triton", minimal_context("initial", "triton"))
    with pytest.raises(PromptError, match="unknown backend 'metal'"):
        render("initial", "metal", minimal_context("initial", "triton"))


def test_device_facts_from_a_dict_show_what_is_known():
    ctx = dataclasses.replace(minimal_context("initial", "cuda"), device=None)
    ctx = PromptContext(**{**ctx.__dict__, "device": {"name": "NVIDIA A100", "sm_count": 108}})
    assert "## Device\n\nNVIDIA A100: 108 SMs.\n" in render("initial", "cuda", ctx).user


def test_initial_and_translate_always_ask_for_a_full_file():
    for op in ("initial", "translate"):
        ctx = dataclasses.replace(minimal_context(op, "cuda"), edit_format="diff")
        p = render(op, "cuda", ctx)
        assert p.edit_format == "rewrite" and "SEARCH" not in p.user
    p = render(
        "mutate", "cuda", dataclasses.replace(minimal_context("mutate", "cuda"), edit_format="diff")
    )
    assert p.edit_format == "diff" and "<<<<<<< SEARCH" in p.user


def test_strict_undefined_names_the_variable():
    bad = PromptOverrides(replace={"mutate": "Improve {{ ctx.parnet.source }}"})
    with pytest.raises(PromptError, match="parnet"):
        render("mutate", "triton", minimal_context("mutate", "triton"), bad)


def test_overrides_replace_and_append_global_and_per_operator(tmp_path):
    custom = tmp_path / "my_mutate.j2"
    custom.write_text('{% extends "_base.j2" %}{% block task %}CUSTOM TASK{% endblock %}')
    overrides = PromptOverrides(
        replace={"mutate": custom, "system": "SYSTEM for {{ backend.name }}"},
        append={"*": "GLOBAL NOTE", "repair": "REPAIR NOTE", "system": "SYSTEM NOTE"},
    )
    p = render("mutate", "cuda", minimal_context("mutate", "cuda"), overrides)
    assert p.system == "SYSTEM for cuda\n\nSYSTEM NOTE\n"
    assert p.user.startswith("# Task\n\nCUSTOM TASK\n\n## Reference")
    assert p.user.endswith("GLOBAL NOTE\n") and "REPAIR NOTE" not in p.user
    assert p.template_names == ("override:system", "append:system", str(custom), "append:*")
    r = render("repair", "cuda", minimal_context("repair", "cuda"), overrides)
    assert r.user.endswith("GLOBAL NOTE\n\nREPAIR NOTE\n")
    assert "Find the cause" in r.user  # repair keeps its own template


def test_overrides_by_step_and_later_sets_win():
    early = PromptOverrides(append={"*": "EARLY"}, steps=range(0, 10))
    late = PromptOverrides(append={"mutate": "LATE"}, replace={"mutate": "LATE ONLY"}, steps={50})
    always = PromptOverrides(append={"mutate": "ALWAYS"})
    ctx = minimal_context("mutate", "triton")
    users = {
        step: render("mutate", "triton", dataclasses.replace(ctx, step=step), [early, late, always])
        for step in (None, 3, 10, 50)
    }
    assert "EARLY" not in users[None].user and "EARLY" in users[3].user
    assert "EARLY" not in users[10].user and "LATE" not in users[10].user
    assert users[3].user.endswith("EARLY\n\nALWAYS\n")
    assert users[50].user == "LATE ONLY\n\nLATE\n\nALWAYS\n"


def test_override_dirs_shadow_builtin_templates(tmp_path):
    (tmp_path / "mutate.j2").write_text(
        '{% extends "_base.j2" %}{% block task %}FROM DIR{% endblock %}'
    )
    p = render(
        "mutate", "triton", minimal_context("mutate", "triton"), PromptOverrides(dirs=[tmp_path])
    )
    assert "FROM DIR" in p.user and "## Reference" in p.user
    plain = render("mutate", "triton", minimal_context("mutate", "triton"))
    assert "FROM DIR" not in plain.user


def test_bad_overrides_raise(tmp_path):
    with pytest.raises(PromptError, match="unknown append key 'mutat'"):
        PromptOverrides(append={"mutat": "x"})
    with pytest.raises(PromptError, match="unknown replace key"):
        PromptOverrides(replace={"*": "x"})
    missing = PromptOverrides(replace={"mutate": str(tmp_path / "nope.j2")})
    with pytest.raises(PromptError, match="no such file"):
        render("mutate", "triton", minimal_context("mutate", "triton"), missing)
    broken = PromptOverrides(replace={"mutate": "{% if %}"})
    with pytest.raises(PromptError, match="prompt template for 'mutate'"):
        render("mutate", "triton", minimal_context("mutate", "triton"), broken)


def test_aux_code_goes_to_chosen_operators(tmp_path):
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "b.cu").write_text("__device__ float twice(float x) { return 2 * x; }\n")
    (tmp_path / "lib" / "a.py").write_text("A = 1\n")
    (tmp_path / "lib" / "__pycache__").mkdir()
    (tmp_path / "lib" / "__pycache__" / "a.py").write_text("CACHED = 1\n")
    (tmp_path / "lib" / "notes.bin").write_text("binary")
    files = load_aux_code([tmp_path / "lib"])
    assert [Path(p).name for p, _ in files] == ["a.py", "b.cu"]
    overrides = PromptOverrides(aux_code={"repair": files})
    repair = render("repair", "cuda", minimal_context("repair", "cuda"), overrides)
    assert "## Auxiliary code" in repair.user
    assert (
        "```cuda\n__device__ float twice" in repair.user and "```python\nA = 1\n```" in repair.user
    )
    mutate = render("mutate", "cuda", minimal_context("mutate", "cuda"), overrides)
    assert "## Auxiliary code" not in mutate.user
    with pytest.raises(PromptError, match="no such file or folder"):
        load_aux_code([tmp_path / "missing"])


def test_guardrails_in_plain_words():
    def system(guardrails, precision="fp32", backend="triton"):
        ctx = dataclasses.replace(
            minimal_context("initial", backend), guardrails=guardrails, precision=precision
        )
        return render("initial", backend, ctx).system

    strict = system(None)
    assert "It must contain a @triton.jit kernel." in strict
    assert "No PyTorch compute outside `__init__`" in strict
    assert 'input_precision="ieee"' in strict
    cuda = system(None, backend="cuda")
    assert "a __global__ CUDA kernel and a load_inline build" in cuda
    assert "no cuBLAS" in cuda and "in the C++ source" in cuda
    assert "allowed as glue" in system({"allow_torch_ops": True})
    assert "Static checks are off" in system({"enabled": False})
    assert "TF32 matmul is allowed" in system(None, precision="tf32")
    assert "half-precision types are allowed" in system(None, precision="bf16")

    @dataclasses.dataclass(frozen=True)
    class LikeGuardrailConfig:
        enabled: bool = True
        required: tuple = (r"tl\.dot",)
        banned: tuple = ()
        allow_torch_ops: bool = False
        allow_library_gemm: bool = False

    assert r"`tl\.dot`" in system(LikeGuardrailConfig())
    with pytest.raises(PromptError, match="unknown key 'allow_everything'"):
        system({"allow_everything": True})


def test_guardrail_keys_follow_guardrail_config():
    """The dict keys accepted are GuardrailConfig's fields (read without importing torch)."""
    tree = ast.parse((ROOT / "fitness" / "guardrails.py").read_text())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "GuardrailConfig")
    fields = {n.target.id for n in cls.body if isinstance(n, ast.AnnAssign)}
    assert set(GUARDRAIL_KEYS) == fields


def test_error_log_is_cut_sensibly():
    log = "\n".join(f"\x1b[31mline {i}\x1b[0m" for i in range(200)) + "\n" + "x" * 1000
    cut = truncate_log(log, max_lines=20)
    lines = cut.splitlines()
    assert len(lines) == 20 and lines[0] == "line 0" and lines[9] == "line 9"
    assert lines[10] == "[... 182 lines cut ...]" and lines[-2] == "line 199"
    assert lines[-1].endswith(" [...]") and len(lines[-1]) < 400
    assert truncate_log("a\nb") == "a\nb"
    p = render("repair", "triton", full_context("repair", "triton"))
    assert "lines cut ..." in p.user and "mask must be boolean" in p.user


def test_fence_outgrows_backticks_inside():
    assert fence("x = 1\n", "python") == "```python\nx = 1\n```"
    assert fence('doc = """\n```\ncode\n```\n"""').startswith("````\n")


def test_verdicts_from_results_and_dicts():
    r = EvalResult(Status.MISMATCH, "max abs err 0.3", runtime_ms=1.5, precision="fp32")
    v = Verdict.of(r)
    assert (v.status, v.reason, v.runtime_ms) == ("mismatch", "max abs err 0.3", 1.5)
    assert Verdict.of(r.to_json_dict()) == v
    with pytest.raises(PromptError, match="needs a status"):
        Verdict.of({"reason": "x"})
    ctx = dataclasses.replace(minimal_context("repair", "triton"), parent=CodeSample("x", r))
    assert (
        "Verdict: mismatch (max abs err 0.3): 1.5 ms, precision fp32."
        in render("repair", "triton", ctx).user
    )


def test_examples_meet_the_guardrails():
    """The one-shot examples teach the contract, so they must pass the strict checks."""
    from fitness.guardrails import check

    for backend in BACKENDS:
        user = render("initial", backend, minimal_context("initial", backend)).user
        example = user.split("a complete answer file is:\n\n```python\n")[1].split("\n```")[0]
        assert "class ModelNew(nn.Module)" in example
        verdict = check(example, backend)
        assert verdict.ok, (backend, verdict.reason)


def test_templates_are_files():
    names = {p.name for p in PROMPTS_DIR.glob("*.j2")}
    assert {f"{op}.j2" for op in OPERATORS} | {"system.j2", "_base.j2"} <= names
