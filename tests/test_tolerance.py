"""The error model: honest summation orders pass, forbidden precisions and defects fail.

Kernels are emulated in torch (experiments/bench/tolerance_margins.py), on every input
distribution, five seeds each. The asserted margins are looser than the measured ones
(honest at most 0.46 of the bound, dishonest at least 9 times it) so that seeds do not flake.
"""

from __future__ import annotations

import functools

import pytest
import torch

import fitness.tolerance as tolerance
from experiments.bench import tolerance_margins as tm
from fitness.inputs import Round, build_model, make_inputs
from fitness.precision import Precision
from fitness.tolerance import Bound, ToleranceModel, check, reference_bounds

SEEDS = range(5)


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """The tensors are tiny: on a busy machine a second thread costs 10x (13 s against 0.7 s
    for the matmul variants, measured with another job running)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@functools.cache
def rows(workload: str) -> tuple[tm.Row, ...]:
    return tuple(tm.measure(workload, seeds=SEEDS))


@pytest.mark.parametrize("workload", list(tm.SIZES))
def test_honest_variants_pass_every_time(workload):
    honest = [r for r in rows(workload) if r.variant.honest]
    assert honest
    for r in honest:
        label = f"{r.variant.name} under {r.variant.policy} on {r.dist} inputs"
        assert r.failures == 0, f"{label}: refused, fractions {r.fractions}"
        assert r.worst < 0.6, f"{label}: {r.worst:.3g} of the bound, too close"


@pytest.mark.parametrize("workload", list(tm.SIZES))
def test_dishonest_variants_fail_every_time(workload):
    dishonest = [r for r in rows(workload) if not r.variant.honest]
    assert dishonest
    for r in dishonest:
        label = f"{r.variant.name} under {r.variant.policy} on {r.dist} inputs"
        assert r.failures == len(SEEDS), f"{label}: passed, fractions {r.fractions}"
        assert r.worst > 4, f"{label}: only {r.worst:.3g} times the bound"


def test_acceptance_variants_are_all_measured():
    """The issue's list: K blocks, split-K, other reduction and softmax orders; TF32 and bf16
    under fp32, a missing K term, a skipped bias, an epilogue constant off by 1e-3."""
    names = {(v.name, v.honest, v.policy) for v in tm.variants("matmul_bias_relu")}
    for bk in (16, 32, 64, 128):
        assert (f"K block {bk}", True, Precision.FP32) in names
    assert ("split-K 4", True, Precision.FP32) in names
    for bad in ("TF32", "bf16", "missing K term", "skipped bias", "epilogue 1.001"):
        assert (bad, False, Precision.FP32) in names
    assert ("online", True, Precision.FP32) in {
        (v.name, v.honest, v.policy) for v in tm.variants("softmax")
    }
    assert {"pairwise", "reversed", "blocked"} <= {v.name for v in tm.variants("row_sum")}


def _gemm_round(workload: str, seed: int, dist: str, policy: Precision):
    mod = tm.module(workload)
    model = build_model(mod, mod.Model, "cpu")
    inputs = make_inputs(mod, Round(seed, dist), "cpu")
    with torch.no_grad():
        ref = [model(*inputs)]
        return model, inputs, reference_bounds(model, inputs, ref, policy, seed)


@pytest.mark.parametrize(
    "operand, allowed_under", [(tm.bf16, Precision.BF16), (tm.tf32, Precision.TF32)]
)
def test_a_relaxed_policy_admits_its_precision_and_fp32_does_not(operand, allowed_under):
    spec = tm.GEMMS["matmul_bias_relu"]
    kernel = tm.gemm_kernel(spec, operand=operand)
    for seed in range(3):
        model, inputs, relaxed = _gemm_round("matmul_bias_relu", seed, "heavy", allowed_under)
        _, _, strict = _gemm_round("matmul_bias_relu", seed, "heavy", Precision.FP32)
        out = [kernel(model, inputs)]
        assert check(out, relaxed).reason == ""
        assert "differ beyond the error bound" in check(out, strict).reason


def test_the_fixed_tolerance_refuses_what_the_model_admits():
    """Raw KernelBench-style factors (K = 8192, C ~ sqrt(K)), heavy inputs, a sequential K
    loop: the old atol = rtol = 1e-4 refuses it near the zeros of C; the error model does not."""
    from fitness.judge import compare

    refused = 0
    for seed in range(3):
        g = torch.Generator().manual_seed(seed)
        scale = torch.exp(0.5 * torch.randn(32, 8192, generator=g))
        a = torch.randn(32, 8192, generator=g) * scale
        b = torch.randn(8192, 32, generator=g)
        model = _MatMul()
        with torch.no_grad():
            ref = [model(a, b)]
            bounds = reference_bounds(model, [a, b], ref, Precision.FP32, seed)
        out = [tm.sequential(a, b)]
        verdict = check(out, bounds)
        assert verdict.reason == "" and verdict.fraction < 0.5
        refused += bool(compare(out, ref, 1e-4, 1e-4)[0])
    assert refused >= 2


class _MatMul(torch.nn.Module):
    def forward(self, a, b):
        return a @ b


def test_reason_names_the_count_and_the_worst_fraction():
    model, inputs, bounds = _gemm_round("matmul", 0, "normal", Precision.FP32)
    out = [tm.gemm_kernel(tm.GEMMS["matmul"], operand=tm.tf32)(model, inputs)]
    verdict = check(out, bounds)
    assert verdict.reason.startswith("output: ")
    assert f"of {out[0].numel()} elements differ beyond the error bound" in verdict.reason
    assert f"worst at {verdict.fraction:.3g}x the allowed error" in verdict.reason
    exact = check([bounds[0].center.clone()], bounds)
    assert exact == ("", 0.0, 0.0)


def test_bounds_are_deterministic_and_leave_model_and_inputs_alone():
    mod = tm.module("layernorm")
    model = build_model(mod, mod.Model, "cpu")
    inputs = make_inputs(mod, Round(3, "heavy"), "cpu")
    before = [t.clone() for t in [*model.parameters(), *inputs]]
    with torch.no_grad():
        ref = [model(*inputs)]
    first = reference_bounds(model, inputs, ref, Precision.FP32, 3)
    again = reference_bounds(model, inputs, ref, Precision.FP32, 3)
    other = reference_bounds(model, inputs, ref, Precision.FP32, 4)
    assert torch.equal(first[0].allowed, again[0].allowed)
    assert not torch.equal(first[0].allowed, other[0].allowed)
    assert all(torch.equal(a, b) for a, b in zip(before, [*model.parameters(), *inputs]))
    assert all(p.dtype == torch.float32 for p in model.parameters())
    assert not first[0].allowed.requires_grad and first[0].fallback == ""
    assert first[0].center.dtype == torch.float32 and first[0].allowed.dtype == torch.float32


class _Casts(torch.nn.Module):
    def forward(self, x):
        return (x * 2).float()


class _NoDouble(torch.nn.Module):
    def forward(self, x):
        if x.dtype == torch.float64:
            raise RuntimeError("no float64 kernel")
        return x * 2


@pytest.mark.parametrize("model, why", [(_Casts(), "casts"), (_NoDouble(), "no float64 kernel")])
def test_a_model_without_a_float64_run_falls_back_to_the_fixed_tolerance(model, why):
    x = torch.randn(4, 8)
    bounds = reference_bounds(model, [x], [x * 2], Precision.FP32, 0)
    assert why in bounds[0].fallback and "fixed tolerance" in bounds[0].fallback
    assert torch.allclose(bounds[0].allowed, 1e-4 + 1e-4 * (x * 2).abs())
    assert check([x * 2 + 5e-5], bounds).reason == ""
    assert check([x * 2 + 1e-3], bounds).reason


class _Mixed(torch.nn.Module):
    """A float output in bf16, and an integer output."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(16, 16, dtype=torch.bfloat16))

    def forward(self, x):
        y = x @ self.w
        return y, y.argmax(dim=-1)


def test_half_outputs_get_a_float32_center_and_integer_outputs_are_exact():
    torch.manual_seed(0)
    model = _Mixed()
    x = torch.randn(8, 16, dtype=torch.bfloat16)
    with torch.no_grad():
        ref = list(model(x))
        bounds = reference_bounds(model, [x], ref, Precision.FP32, 0)
    assert bounds[0].dtype == torch.bfloat16 and bounds[0].center.dtype == torch.float32
    assert bounds[1].exact and bounds[0].fallback == ""
    honest = (x.float() @ model.w.detach().float()).bfloat16()  # another order, rounded once
    assert check([honest, ref[1]], bounds).reason == ""
    assert "differs from the reference" in check([honest, ref[1] + 1], bounds).reason
    assert "dtype" in check([honest.float(), ref[1]], bounds).reason


def test_shape_count_and_non_finite_values_are_checked_as_before():
    x = torch.tensor([1.0, float("inf"), float("nan"), -2.0])
    b = Bound(x, torch.float32, torch.full((4,), 1e-3))
    assert check([x.clone()], [b]).reason == ""
    assert check([x + torch.tensor([5e-4, 0, 0, 0])], [b]).fraction == pytest.approx(0.5, 1e-3)
    assert check([x + torch.tensor([2e-3, 0, 0, 0])], [b]).fraction == pytest.approx(2, 1e-3)
    nan_first = x.clone()
    nan_first[0] = float("nan")
    assert "NaN/Inf where the reference has none" in check([nan_first], [b]).reason
    wrong = torch.tensor([1.0, float("-inf"), float("nan"), -2.0])
    assert "different non-finite values" in check([wrong], [b]).reason
    assert "shape" in check([x[:3]], [b]).reason
    assert "returned 2 output tensors" in check([x, x], [b]).reason


def test_chunks_and_ragged_rows_give_the_same_verdicts(monkeypatch):
    """A 1-D output longer than a chunk: its rows are chunks, the last one ragged."""
    x = torch.randn(64, 300)
    model = _RowSum()
    with torch.no_grad():
        ref = [model(x)]
        whole = reference_bounds(model, [x], ref, Precision.FP32, 1)
        monkeypatch.setattr(tolerance, "CHUNK", 25)
        chunked = reference_bounds(model, [x], ref, Precision.FP32, 1)
    honest = [tm.seq_sum(x)]
    dishonest = [tm.pairwise_sum(x[:, :-1])]
    for bounds in (whole, chunked):
        assert check(honest, bounds).reason == ""
        assert check(dishonest, bounds).reason
    assert torch.equal(whole[0].center, chunked[0].center)


class _RowSum(torch.nn.Module):
    def forward(self, x):
        return x.sum(dim=-1)


def test_the_bound_follows_the_terms_not_the_result():
    """Cancellation: a sum near zero of large terms is allowed their rounding, which a bound
    relative to the result would not allow; a sum without cancellation is held to |ref|."""
    cancel = torch.tensor([[1e4, 1.0, -1e4, 1e-3]]).repeat(8, 1)
    plain = torch.tensor([[0.25, 0.25, 0.25, 0.251]]).repeat(8, 1)
    with torch.no_grad():
        loose = reference_bounds(_RowSum(), [cancel], [cancel.sum(-1)], Precision.FP32, 0)
        tight = reference_bounds(_RowSum(), [plain], [plain.sum(-1)], Precision.FP32, 0)
    assert float(loose[0].allowed.min()) > 1e4 * 2.0**-24  # an ulp of the terms
    assert float(tight[0].allowed.max()) < 1e-4  # a quarter of today's 1e-4 + 1e-4 * |ref|


def test_depth_is_the_longest_dot_product_and_widens_the_bound_past_the_floor():
    conv = torch.nn.Conv2d(3, 8, 3)
    x = torch.randn(2, 3, 16, 16)
    with torch.no_grad():
        bounds = reference_bounds(conv, [x], [conv(x)], Precision.FP32, 0)
    assert bounds[0].depth == 3 * 3 * 3
    _, _, gemm = _gemm_round("matmul_bias_relu", 0, "normal", Precision.FP32)
    assert gemm[0].depth == tm.SIZES["matmul_bias_relu"]["IN_FEATURES"]
    tol = ToleranceModel()
    assert tol.growth(0) == tol.growth(tol.depth_floor) == 1.0
    assert tol.growth(4 * tol.depth_floor) == pytest.approx(2.0)


def test_policies_with_tensor_cores_allow_truncating_accumulators():
    """On terms of one sign a truncating accumulator drifts like depth * u: only where the
    policy admits tensor cores is that allowed."""
    g = torch.Generator().manual_seed(0)
    a, b = torch.rand(8, 8192, generator=g), torch.rand(8192, 8, generator=g)
    with torch.no_grad():
        ref = [_MatMul()(a, b)]
        strict = reference_bounds(_MatMul(), [a, b], ref, Precision.FP32, 0)[0]
        relaxed = reference_bounds(_MatMul(), [a, b], ref, Precision.TF32, 0)[0]
    drift = 0.5 * 8192 * 2.0**-24 * strict.center.abs()
    assert bool((relaxed.allowed >= drift).all())
    assert bool((strict.allowed < drift).all())


def test_the_model_key_changes_with_its_constants():
    assert ToleranceModel().key() == tolerance.TOLERANCE.key()
    assert ToleranceModel(accumulation_factor=512).key() != ToleranceModel().key()
