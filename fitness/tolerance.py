"""Error bounds that follow the computation: how far an honest kernel's rounding may take it.

The reference child runs the workload's Model twice more in float64: on the round's inputs
and weights as they are (the exact answer, near enough), and on copies multiplied elementwise
by 1 + u*r, r standard normal and u the policy's unit roundoff. The first gives the center and
the fp32 reference's own error; the second the output's sensitivity to rounding every operand
once, which scales with the magnitude of the summed terms (|A||B| for a GEMM), not with |ref|,
so a result that cancels is judged against the terms that cancelled. `check` then holds each
candidate element to `ToleranceModel`'s bound around the center. Costs: two float64 forwards,
and float64 copies of the inputs, weights and two outputs at a time.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import flop_registry

from fitness.precision import Precision, tolerance

CHUNK = 1 << 24  # elements handled at a time, so the temporaries stay small

POLICY_UNIT = {
    Precision.FP32: 2.0**-24,
    Precision.TF32: 2.0**-11,
    Precision.BF16: 2.0**-8,
    Precision.FP16: 2.0**-11,
}
DTYPE_UNIT = {
    torch.float64: 2.0**-53,
    torch.float32: 2.0**-24,
    torch.float16: 2.0**-11,
    torch.bfloat16: 2.0**-8,
}
ACCUMULATOR_UNIT = 2.0**-24  # every policy accumulates in fp32


@dataclass(frozen=True)
class ToleranceModel:
    """The constants of the bound on element i of an output (see docs/EVALUATION.md):

    allowed_i = reference_factor * E_i + (input_factor + g * accumulation_factor * u_acc / u) * S_i
                + (g * accumulation_ulps * u_acc + t * depth * u_acc + output_ulps * u_out)
                * |exact_i| + tiny

    E_i = |ref32_i - exact_i| and S_i = |perturbed_i - exact_i|, each raised to row_floor
    times the median of its row (a single rounding sample can be near zero by chance). u is
    the policy's unit (or the output dtype's, where larger), u_acc that of the fp32
    accumulators every policy uses, u_out the output dtype's. The input term admits the
    operand rounding a policy allows; the accumulation terms another summation order, which
    grows like sqrt(n) S_i for terms of mixed sign and like n u_acc |exact_i| at worst for
    terms of one sign (norms, softmax denominators). g = growth(depth), depth the longest dot
    product of the model's matmuls, convolutions and attention. t = truncation_factor where
    the policy admits tensor cores (not fp32): their accumulators truncate instead of
    rounding, so on terms of one sign the error grows linearly with depth (0.15 depth u_acc
    for TF32 and bf16 GEMMs on an H200 at K = 524288, positive inputs). The constants were
    chosen and are checked by experiments/bench/tolerance_margins.py.
    """

    reference_factor: float = 16.0
    input_factor: float = 32.0
    accumulation_factor: float = 1024.0
    accumulation_ulps: float = 512.0
    output_ulps: float = 2.0
    row_floor: float = 1.0
    depth_floor: int = 4096
    truncation_factor: float = 0.5

    def key(self) -> str:
        """A short string for caches: a verdict made under other constants is not reused."""
        return (
            f"tol1:{self.reference_factor:g},{self.input_factor:g},"
            f"{self.accumulation_factor:g},{self.accumulation_ulps:g},{self.output_ulps:g},"
            f"{self.row_floor:g},{self.depth_floor},{self.truncation_factor:g}"
        )

    def growth(self, depth: int) -> float:
        """How much the accumulation terms widen for a dot product `depth` terms long:
        rounding errors add up like a random walk, so sqrt(depth / depth_floor), at least 1."""
        return math.sqrt(max(depth, self.depth_floor) / self.depth_floor)


TOLERANCE = ToleranceModel()


@dataclass(frozen=True, eq=False)
class Bound:
    """What the judge needs for one output: the center to measure from and the error allowed
    there (elementwise, float32); `allowed` None means the output must be equal (integer)."""

    center: torch.Tensor
    dtype: torch.dtype  # the output's dtype; half outputs have a float32 center
    allowed: torch.Tensor | None = None
    fallback: str = ""  # why the fixed tolerance stood in for the model, '' if it did not
    depth: int = 0  # the longest dot product the model computes, 0 if none was counted

    @property
    def exact(self) -> bool:
        return self.allowed is None


class Check(NamedTuple):
    """A comparison's outcome: '' or a one-line reason, the worst error as a fraction of the
    allowed error (<= 1 passes), and the largest absolute error."""

    reason: str
    fraction: float
    max_abs_err: float


def reference_bounds(
    model: torch.nn.Module,
    inputs: list,
    outputs: list[torch.Tensor],
    policy: Precision,
    seed: int,
    tol: ToleranceModel = TOLERANCE,
) -> list[Bound]:
    """Bounds for the reference's `outputs` on `inputs`: two float64 runs of `model`, whose
    weights and inputs are copied, never changed. The perturbation is seeded by `seed`."""
    floats = [o for o in outputs if o.is_floating_point()]
    if not floats:
        return [Bound(o, o.dtype) for o in outputs]
    u = max([POLICY_UNIT[policy]] + [DTYPE_UNIT.get(o.dtype, 2.0**-24) for o in floats])
    with torch.no_grad():
        try:
            with _Depth() as probe:
                exact = _run64(model, inputs, 0.0, seed)
            perturbed = _run64(model, inputs, u, seed)
            problem = _mismatch(outputs, exact) or _mismatch(outputs, perturbed)
        except Exception as e:  # any op without a float64 kernel, or memory
            exact = perturbed = None
            problem = f"the float64 reference failed ({type(e).__name__}: {str(e)[:200]})"
        if problem:
            note = f"{problem}; fixed tolerance"
            return [_fixed(o, policy, note) for o in outputs]
        return [
            _bound(o, e, p, u, tol, probe.depth, policy != Precision.FP32)
            if o.is_floating_point()
            else Bound(o, o.dtype)
            for o, e, p in zip(outputs, exact, perturbed)
        ]


class _Depth(TorchDispatchMode):
    """The longest dot product among the ops torch's FLOP counter knows (matmuls, convolutions,
    attention): per call, its FLOPs over twice its output's elements (K for a GEMM)."""

    def __init__(self):
        super().__init__()
        self.depth = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        count = flop_registry.get(func._overloadpacket)
        first = next((t for t in pytree.tree_leaves(out) if isinstance(t, torch.Tensor)), None)
        if count is not None and first is not None and first.numel():
            try:
                flops = count(*args, **kwargs, out_val=out)
            except Exception:  # a formula that does not fit this call: no depth from it
                return out
            self.depth = max(self.depth, int(flops // (2 * first.numel())))
        return out


def _run64(model: torch.nn.Module, inputs: list, u: float, seed: int) -> list[torch.Tensor]:
    """The model's outputs in float64, each floating weight and input times (1 + u*r)."""
    gens: dict[torch.device, torch.Generator] = {}
    named = itertools.chain(model.named_parameters(), model.named_buffers())
    state = {name: _widen(t, u, seed, gens) for name, t in named}
    args = [_widen(x, u, seed, gens) if isinstance(x, torch.Tensor) else x for x in inputs]
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)  # tensors the forward makes are float64 too
    try:
        out = torch.func.functional_call(model, state, tuple(args))
    finally:
        torch.set_default_dtype(default)
    return list(out) if isinstance(out, (tuple, list)) else [out]


def _widen(t: torch.Tensor, u: float, seed: int, gens: dict) -> torch.Tensor:
    """A float64 copy of `t`, perturbed a chunk at a time so the noise costs no full copy."""
    if not t.is_floating_point():
        return t
    y = t.detach().to(torch.float64, memory_format=torch.contiguous_format, copy=True)
    if u:
        if y.device not in gens:
            gens[y.device] = torch.Generator(device=y.device).manual_seed(seed)
        g, flat = gens[y.device], y.view(-1)
        for s in range(0, flat.numel(), CHUNK):
            part = flat[s : s + CHUNK]
            r = torch.randn(part.shape, dtype=part.dtype, device=part.device, generator=g)
            part.mul_(r.mul_(u).add_(1.0))
    return y


def _mismatch(outputs: list[torch.Tensor], runs: list) -> str:
    if len(runs) != len(outputs):
        return f"the float64 reference returned {len(runs)} outputs, not {len(outputs)}"
    for o, r in zip(outputs, runs):
        if not isinstance(r, torch.Tensor) or tuple(r.shape) != tuple(o.shape):
            return "the float64 reference's outputs differ in shape"
        if o.is_floating_point() and r.dtype != torch.float64:
            return f"the float64 reference returned {r.dtype} (the model casts)"
    return ""


def _fixed(out: torch.Tensor, policy: Precision, note: str) -> Bound:
    """Today's rule, atol = rtol = tolerance(policy, dtype), as a bound around the fp32 output."""
    tol = tolerance(policy, out.dtype)
    return fixed_bound(out, tol, tol, note)


def fixed_bound(out: torch.Tensor, atol: float, rtol: float, note: str = "") -> Bound:
    """The fixed rule |o - out| <= atol + rtol * |out| as a bound (an experiment that sets its
    own atol and rtol, or a model without a float64 run)."""
    if not out.is_floating_point():
        return Bound(out, out.dtype, fallback=note)
    allowed = out.detach().abs().float().mul_(rtol).add_(atol)
    return Bound(out, out.dtype, allowed, note)


def _bound(
    ref: torch.Tensor,
    exact: torch.Tensor,
    perturbed: torch.Tensor,
    u: float,
    tol: ToleranceModel,
    depth: int,
    tensor_cores: bool,
) -> Bound:
    """Center and allowed error of one floating output, computed a block of rows at a time."""
    wide = torch.float64 if ref.dtype == torch.float64 else torch.float32
    center = torch.empty(ref.shape, dtype=wide, device=ref.device)
    allowed = torch.empty(ref.shape, dtype=torch.float32, device=ref.device)
    row = max(1, min(ref.shape[-1] if ref.dim() >= 2 else ref.numel(), CHUNK))
    step = max(1, CHUNK // row) * row  # whole rows; a 1-D output's rows are CHUNK long
    flats = [t.reshape(-1) for t in (ref, exact, perturbed, center, allowed)]
    u_out = DTYPE_UNIT.get(ref.dtype, 2.0**-24)
    tiny = torch.finfo(ref.dtype).tiny
    g = tol.growth(depth)
    sens = tol.input_factor + g * tol.accumulation_factor * ACCUMULATOR_UNIT / u
    ulps = g * tol.accumulation_ulps + (tol.truncation_factor * depth if tensor_cores else 0.0)
    rel = ulps * ACCUMULATOR_UNIT + tol.output_ulps * u_out
    for start in range(0, ref.numel(), step):
        r, e, p, c, a = (f[start : start + step] for f in flats)
        e32 = e.to(wide)
        ok = torch.isfinite(r) & torch.isfinite(e32)  # elsewhere r is the center
        c.copy_(torch.where(ok, e32, r.to(wide)))
        ref_err = _row_floor((r.double() - e).abs_().float().where(ok, 0.0), row, tol.row_floor)
        drift = (p - e).abs_().float().nan_to_num_(nan=torch.inf).where(ok, 0.0)
        drift = _row_floor(drift, row, tol.row_floor)
        a.copy_(ref_err.mul_(tol.reference_factor).add_(drift, alpha=sens))
        a.add_(e32.abs().float().mul_(rel).where(ok, 0.0)).add_(tiny)
        a.masked_fill_(torch.isfinite(r) & ~torch.isfinite(e32), torch.inf)
    return Bound(center, ref.dtype, allowed, depth=depth)


def _row_floor(v: torch.Tensor, row: int, q: float) -> torch.Tensor:
    """max(v, q * the median of the row's positive entries): a floor from the whole row."""
    if q <= 0 or v.numel() == 0:
        return v
    rows = v.view(-1, row if v.numel() % row == 0 else v.numel())  # a ragged tail: one row
    med = rows.where(rows > 0, torch.nan).nanmedian(dim=1).values.nan_to_num_(nan=0.0)
    return torch.maximum(rows, med.mul_(q).unsqueeze(1)).view(-1)


def check(outs: list[torch.Tensor], bounds: list[Bound]) -> Check:
    """Candidate outputs against their bounds: shape, dtype, equality for exact outputs, and
    |out - center| <= allowed elsewhere, NaN/Inf only where the center has the same."""
    if len(outs) != len(bounds):
        return Check(f"returned {len(outs)} output tensors, expected {len(bounds)}", 0.0, 0.0)
    fraction = max_abs = 0.0
    for k, (o, b) in enumerate(zip(outs, bounds)):
        tag = f"output {k}" if len(bounds) > 1 else "output"
        want = tuple(b.center.shape)
        if tuple(o.shape) != want:
            return Check(f"{tag} has shape {tuple(o.shape)}, expected {want}", 0.0, 0.0)
        if o.dtype != b.dtype:
            return Check(f"{tag} has dtype {o.dtype}, expected {b.dtype}", 0.0, 0.0)
        if b.exact:
            if not _equal(o, b.center):
                return Check(f"{tag} differs from the reference (exact dtype {b.dtype})", 0.0, 0.0)
            continue
        reason, frac, err = _within(o, b, tag)
        fraction, max_abs = max(fraction, frac), max(max_abs, err)
        if reason:
            return Check(reason, fraction, max_abs)
    return Check("", fraction, max_abs)


def _equal(o: torch.Tensor, ref: torch.Tensor) -> bool:
    of, rf = o.reshape(-1), ref.reshape(-1)
    return all(
        torch.equal(of[s : s + CHUNK].to(rf.device), rf[s : s + CHUNK])
        for s in range(0, rf.numel(), CHUNK)
    )


def _within(o: torch.Tensor, b: Bound, tag: str) -> tuple[str, float, float]:
    of, cf, af = o.reshape(-1), b.center.reshape(-1), b.allowed.reshape(-1)
    wide = torch.float64 if cf.dtype == torch.float64 else torch.float32
    fraction = max_abs = 0.0
    bad = 0
    for s in range(0, cf.numel(), CHUNK):
        cc, ac = cf[s : s + CHUNK].to(wide), af[s : s + CHUNK]
        oc = of[s : s + CHUNK].to(cc.device, wide)
        err = oc - cc
        if not bool(torch.isfinite(err).all()):  # finite - finite is finite: rare path
            cfin = torch.isfinite(cc)
            if bool((cfin & ~torch.isfinite(oc)).any()):
                return f"{tag} has NaN/Inf where the reference has none", torch.inf, torch.inf
            same = (oc == cc) | (oc.isnan() & cc.isnan())
            if bool((~cfin & ~same).any()):
                return f"{tag} has different non-finite values than the reference", 0.0, 0.0
            err, ac = err[cfin], ac[cfin]
        if err.numel() == 0:
            continue
        err.abs_()
        max_abs = max(max_abs, float(err.max()))
        bad += int((err > ac).sum())
        fraction = max(fraction, float((err / ac).max()))
    if bad:
        return (
            f"{tag}: {bad} of {cf.numel()} elements differ beyond the error bound (worst at "
            f"{fraction:.3g}x the allowed error, max abs err {max_abs:.3g})",
            fraction,
            max_abs,
        )
    return "", fraction, max_abs
