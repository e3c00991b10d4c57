"""Margins of the error model in fitness/tolerance.py, measured with emulated kernels.

Each variant is a plain torch function that computes a builtin workload the way a kernel
might: honest ones in another summation order (GEMM K blocks, split-K, sequential FMA-like
accumulation, pairwise and blocked reductions, online softmax); dishonest ones at a forbidden
precision or with a defect (TF32 or bf16 operands, a missing term, a skipped bias, an epilogue
constant off by 1e-3). For each variant, workload and input distribution the script prints the
worst fraction of the allowed error over seeds: the largest for honest variants (they must stay
below 1), the smallest for dishonest ones (they must stay above 1).

    python -m experiments.bench.tolerance_margins [--seeds 5] [--device cuda] [--workload NAME]
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache

import torch
import torch.nn.functional as F

from fitness.inputs import Round, build_model, make_inputs
from fitness.precision import Precision
from fitness.tolerance import TOLERANCE, ToleranceModel, check, reference_bounds
from fitness.workloads import import_workload_module, resolve_workload

DISTS = ("workload", "normal", "heavy")
SIZES = {  # CPU sizes: KernelBench-like reduction lengths, few rows
    "matmul": {"M": 32, "N": 32, "K": 2048},
    "matmul_bias_relu": {"BATCH": 32, "IN_FEATURES": 1024, "OUT_FEATURES": 48},
    "matmul_scale_gelu": {"BATCH": 32, "IN_FEATURES": 1024, "OUT_FEATURES": 48},
    "row_sum": {"ROWS": 64, "COLS": 1024},
    "softmax": {"ROWS": 64, "COLS": 1024},
    "layernorm": {"ROWS": 64, "COLS": 1024},
    "rmsnorm": {"ROWS": 64, "COLS": 1024},
    "add_layernorm": {"ROWS": 64, "COLS": 1024},
    "scaled_gelu": {"ROWS": 64, "COLS": 512},
}

GPU_SIZES = {  # --device cuda: longer reductions and more rows
    "matmul": {"M": 512, "N": 512, "K": 16384},
    "matmul_bias_relu": {"BATCH": 512, "IN_FEATURES": 8192, "OUT_FEATURES": 512},
    "matmul_scale_gelu": {"BATCH": 512, "IN_FEATURES": 8192, "OUT_FEATURES": 512},
    "row_sum": {"ROWS": 1024, "COLS": 16384},
    "softmax": {"ROWS": 1024, "COLS": 16384},
    "layernorm": {"ROWS": 1024, "COLS": 8192},
    "rmsnorm": {"ROWS": 1024, "COLS": 8192},
    "add_layernorm": {"ROWS": 1024, "COLS": 8192},
    "scaled_gelu": {"ROWS": 1024, "COLS": 8192},
}

Kernel = Callable[[torch.nn.Module, list], torch.Tensor]


@dataclass(frozen=True)
class Variant:
    """One emulated kernel: honest ones must pass under `policy`, dishonest ones must fail."""

    name: str
    honest: bool
    kernel: Kernel
    policy: Precision = Precision.FP32


@dataclass(frozen=True)
class Row:
    """A variant's fractions of the allowed error, one per seed, on one distribution."""

    workload: str
    variant: Variant
    dist: str
    fractions: tuple[float, ...]
    failures: int  # seeds whose verdict was a mismatch

    @property
    def worst(self) -> float:
        return max(self.fractions) if self.variant.honest else min(self.fractions)


# ---------------------------------------------------------------- rounding of operands


def tf32(x: torch.Tensor) -> torch.Tensor:
    """fp32 rounded to TF32's 10-bit mantissa, to nearest even, as tensor cores read it."""
    i = x.contiguous().view(torch.int32)
    i = (i + 0xFFF + ((i >> 13) & 1)) & ~0x1FFF
    return i.view(torch.float32)


def bf16(x: torch.Tensor) -> torch.Tensor:
    return x.bfloat16().float()


def fp16(x: torch.Tensor) -> torch.Tensor:
    return x.half().float()


# ---------------------------------------------------------------- summation orders


def blocked(a: torch.Tensor, b: torch.Tensor, bk: int) -> torch.Tensor:
    """A @ B accumulated in fp32 one K block at a time, in block order (a tiled GEMM)."""
    acc = a.new_zeros(a.shape[0], b.shape[1])
    for k in range(0, a.shape[1], bk):
        acc = acc + a[:, k : k + bk] @ b[k : k + bk]
    return acc


def split_k(a: torch.Tensor, b: torch.Tensor, parts: int = 4) -> torch.Tensor:
    """Partial products per K slice (each blocked), then added: a split-K GEMM."""
    step = -(-a.shape[1] // parts)
    acc = a.new_zeros(a.shape[0], b.shape[1])
    for k in range(0, a.shape[1], step):
        acc = acc + blocked(a[:, k : k + step], b[k : k + step], 32)
    return acc


def sequential(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """One rank-1 update per K term, rounded twice each: a strict fp32 FMA loop, or worse."""
    acc = a.new_zeros(a.shape[0], b.shape[1])
    for k in range(a.shape[1]):
        acc = acc + a[:, k : k + 1] * b[k : k + 1]
    return acc


def seq_sum(x: torch.Tensor) -> torch.Tensor:
    acc = x.new_zeros(x.shape[:-1])
    for k in range(x.shape[-1]):
        acc = acc + x[..., k]
    return acc


def reversed_sum(x: torch.Tensor) -> torch.Tensor:
    return seq_sum(x.flip(-1))


def pairwise_sum(x: torch.Tensor) -> torch.Tensor:
    while x.shape[-1] > 1:
        if x.shape[-1] % 2:
            x = F.pad(x, (0, 1))
        x = x[..., 0::2] + x[..., 1::2]
    return x[..., 0]


def blocked_sum(x: torch.Tensor, block: int = 128) -> torch.Tensor:
    """A tree sum within each block, then the blocks in order: a reduction over chunks."""
    x = F.pad(x, (0, -x.shape[-1] % block))
    parts = pairwise_sum(x.unflatten(-1, (-1, block)))
    return seq_sum(parts)


SUMS = {"sequential": seq_sum, "reversed": reversed_sum, "pairwise": pairwise_sum}
SUMS["blocked"] = blocked_sum


def gelu_erf(z: torch.Tensor) -> torch.Tensor:
    return 0.5 * z * (1.0 + torch.erf(z * (1.0 / math.sqrt(2.0))))


# ---------------------------------------------------------------- GEMM workloads


@dataclass(frozen=True)
class Gemm:
    """A GEMM workload taken apart: its operands and its epilogue (const scales the epilogue's
    constant; bias=False skips the bias)."""

    operands: Callable[[torch.nn.Module, list], tuple[torch.Tensor, torch.Tensor]]
    epilogue: Callable[[torch.nn.Module, torch.Tensor, float, bool], torch.Tensor]
    has_bias: bool = False


def _linear_operands(model, inputs):
    return inputs[0], model.linear.weight.detach().t()


def _bias_relu(model, acc, const, bias):
    y = acc + model.linear.bias.detach() if bias else acc
    return torch.where(y > 0, y * const, 0.0)


GEMMS = {
    "matmul": Gemm(lambda m, i: (i[0], i[1]), lambda m, acc, const, bias: acc * const),
    "matmul_bias_relu": Gemm(_linear_operands, _bias_relu, has_bias=True),
    "matmul_scale_gelu": Gemm(
        _linear_operands, lambda m, acc, const, bias: gelu_erf(acc * (m.scale * const))
    ),
}


def gemm_kernel(
    spec: Gemm,
    order: Callable = lambda a, b: blocked(a, b, 32),
    operand: Callable = lambda x: x,
    drop_term: bool = False,
    const: float = 1.0,
    bias: bool = True,
) -> Kernel:
    def kernel(model, inputs):
        a, b = spec.operands(model, inputs)
        a, b = operand(a.float()), operand(b.float())
        if drop_term:
            a, b = a[:, :-1], b[:-1]
        return spec.epilogue(model, order(a, b), const, bias)

    return kernel


def gemm_variants(spec: Gemm) -> list[Variant]:
    honest = [
        Variant(f"K block {bk}", True, gemm_kernel(spec, lambda a, b, bk=bk: blocked(a, b, bk)))
        for bk in (16, 32, 64, 128)
    ]
    honest += [
        Variant("split-K 4", True, gemm_kernel(spec, split_k)),
        Variant("sequential K", True, gemm_kernel(spec, sequential)),
        Variant("library", True, gemm_kernel(spec, torch.matmul)),
        Variant("TF32", True, gemm_kernel(spec, operand=tf32), Precision.TF32),
        Variant("bf16", True, gemm_kernel(spec, operand=bf16), Precision.BF16),
        Variant("fp16", True, gemm_kernel(spec, operand=fp16), Precision.FP16),
    ]
    dishonest = [
        Variant("TF32", False, gemm_kernel(spec, operand=tf32)),
        Variant("bf16", False, gemm_kernel(spec, operand=bf16)),
        Variant("missing K term", False, gemm_kernel(spec, drop_term=True)),
        Variant("epilogue 1.001", False, gemm_kernel(spec, const=1.001)),
    ]
    if spec.has_bias:
        dishonest.append(Variant("skipped bias", False, gemm_kernel(spec, bias=False)))
    return honest + dishonest


# ---------------------------------------------------------------- reductions and elementwise


def row_sum_variants() -> list[Variant]:
    out = [Variant(name, True, lambda m, i, f=f: f(i[0])) for name, f in SUMS.items()]
    return out + [
        Variant("missing term", False, lambda m, i: pairwise_sum(i[0][:, :-1])),
        Variant("bf16 inputs", False, lambda m, i: pairwise_sum(bf16(i[0]))),
    ]


def _rms(x, w, eps, total=seq_sum, drop=False, const=1.0):
    n = x.shape[-1]
    sq = x * x
    ms = total(sq[:, :-1] if drop else sq) / n
    return x * torch.rsqrt(ms + eps)[:, None] * (w * const)


def rmsnorm_variants() -> list[Variant]:
    def v(name, honest, **kw):
        return Variant(name, honest, lambda m, i: _rms(i[0], m.weight.detach(), m.eps, **kw))

    out = [v(f"{name} sum", True, total=f) for name, f in SUMS.items()]
    return out + [
        v("missing term", False, drop=True),
        v("weight 1.001", False, const=1.001),
        Variant("bf16 inputs", False, lambda m, i: _rms(bf16(i[0]), m.weight.detach(), m.eps)),
    ]


def _layernorm(x, norm, total=seq_sum, how="two-pass", ddof=0, bias=True, drop=False):
    n = x.shape[-1]
    mean = total(x[:, :-1] if drop else x) / n
    if how == "one-pass":
        var = total(x * x) / n - mean * mean
    elif how == "welford":
        mean, var = _welford(x)
    else:
        d = x - mean[:, None]
        var = total(d * d) / (n - ddof)
    y = (x - mean[:, None]) * torch.rsqrt(var + norm.eps)[:, None] * norm.weight.detach()
    return y + norm.bias.detach() if bias else y


def _welford(x: torch.Tensor, block: int = 128) -> tuple[torch.Tensor, torch.Tensor]:
    """Blockwise mean and variance merged with Chan's update, as a one-pass kernel would."""
    count, mean, m2 = (x.new_zeros(x.shape[0]) for _ in range(3))
    for k in range(0, x.shape[1], block):
        xb = x[:, k : k + block]
        nb = xb.shape[1]
        mb = xb.mean(dim=1)
        m2b = ((xb - mb[:, None]) ** 2).sum(dim=1)
        delta = mb - mean
        total = count + nb
        mean = mean + delta * (nb / total)
        m2 = m2 + m2b + delta * delta * (count * nb / total)
        count = total
    return mean, m2 / count


def layernorm_variants(add: bool) -> list[Variant]:
    def v(name, honest, pre=lambda x: x, **kw):
        def kernel(m, i):
            x = i[0] + i[1] if add else i[0]
            return _layernorm(pre(x), m.norm, **kw)

        return Variant(name, honest, kernel)

    out = [v(f"{name} sums", True, total=f) for name, f in SUMS.items()]
    return out + [
        v("one-pass", True, how="one-pass", total=pairwise_sum),
        v("welford", True, how="welford"),
        v("unbiased variance", False, ddof=1),
        v("skipped bias", False, bias=False),
        v("missing term", False, drop=True),
        v("bf16 inputs", False, pre=bf16),
    ]


def _softmax(x, total=seq_sum, const=1.0, drop=False):
    x = x * const
    e = torch.exp(x - x.max(dim=-1, keepdim=True).values)
    return e / total(e[:, :-1] if drop else e)[:, None]


def _online_softmax(x: torch.Tensor, block: int = 128) -> torch.Tensor:
    """Running max and sum over blocks, the sum rescaled when the max grows (one pass)."""
    m = x.new_full((x.shape[0],), -torch.inf)
    s = x.new_zeros(x.shape[0])
    for k in range(0, x.shape[1], block):
        xb = x[:, k : k + block]
        m_new = torch.maximum(m, xb.max(dim=1).values)
        s = s * torch.exp(m - m_new) + torch.exp(xb - m_new[:, None]).sum(dim=1)
        m = m_new
    return torch.exp(x - m[:, None]) / s[:, None]


def _exp2_softmax(x: torch.Tensor) -> torch.Tensor:
    e = torch.exp2((x - x.max(dim=-1, keepdim=True).values) * math.log2(math.e))
    return e / pairwise_sum(e)[:, None]


def softmax_variants() -> list[Variant]:
    out = [
        Variant(f"{name} sum", True, lambda m, i, f=f: _softmax(i[0], f))
        for name, f in SUMS.items()
    ]
    return out + [
        Variant("online", True, lambda m, i: _online_softmax(i[0])),
        Variant("exp2", True, lambda m, i: _exp2_softmax(i[0])),
        Variant("temperature 1.001", False, lambda m, i: _softmax(i[0], const=1.001)),
        Variant("missing term", False, lambda m, i: _softmax(i[0], drop=True)),
        Variant("bf16 inputs", False, lambda m, i: _softmax(bf16(i[0]))),
    ]


def scaled_gelu_variants() -> list[Variant]:
    def z(m, i, const=1.0):
        return i[0] * (m.scale * const) + m.shift

    def erfc_gelu(m, i):
        t = z(m, i)
        return 0.5 * t * torch.erfc(-t * (1.0 / math.sqrt(2.0)))

    return [
        Variant("erf formula", True, lambda m, i: gelu_erf(z(m, i))),
        Variant("erfc formula", True, erfc_gelu),
        Variant("scale 1.001", False, lambda m, i: gelu_erf(z(m, i, 1.001))),
        Variant("tanh GELU", False, lambda m, i: F.gelu(z(m, i), approximate="tanh")),
        Variant("bf16 inputs", False, lambda m, i: gelu_erf(bf16(z(m, i)))),
    ]


def variants(workload: str) -> list[Variant]:
    if workload in GEMMS:
        return gemm_variants(GEMMS[workload])
    return {
        "row_sum": row_sum_variants,
        "rmsnorm": rmsnorm_variants,
        "layernorm": lambda: layernorm_variants(add=False),
        "add_layernorm": lambda: layernorm_variants(add=True),
        "softmax": softmax_variants,
        "scaled_gelu": scaled_gelu_variants,
    }[workload]()


# ---------------------------------------------------------------- measuring


@cache
def module(workload: str, device: str = "cpu"):
    path = resolve_workload(f"builtin:{workload}").path
    return import_workload_module(path, (SIZES if device == "cpu" else GPU_SIZES)[workload])


def measure(
    workload: str,
    seeds=range(5),
    dists=DISTS,
    tol: ToleranceModel = TOLERANCE,
    only: Callable[[Variant], bool] = lambda v: True,
    device: str = "cpu",
) -> list[Row]:
    """Every variant of `workload` on each distribution and seed, against the reference's
    bounds under the variant's policy (computed once per round and policy)."""
    mod = module(workload, device)
    model = build_model(mod, mod.Model, device)
    chosen = [v for v in variants(workload) if only(v)]
    rows = []
    for dist in dists:
        runs: dict[Variant, list] = {v: [] for v in chosen}
        for seed in seeds:
            inputs = make_inputs(mod, Round(seed, dist), device)
            with torch.no_grad():
                ref = [model(*inputs)]
                bounds = {}
                for v in chosen:
                    if v.policy not in bounds:
                        bounds[v.policy] = reference_bounds(model, inputs, ref, v.policy, seed, tol)
                    runs[v].append(check([v.kernel(model, inputs)], bounds[v.policy]))
        for v, got in runs.items():
            fractions = tuple(c.fraction for c in got)
            rows.append(Row(workload, v, dist, fractions, sum(bool(c.reason) for c in got)))
    return rows


def table(rows: list[Row]) -> str:
    """One line per variant: the worst fraction over seeds on each distribution."""
    head = f"{'':9} {'workload':18} {'variant':18} {'policy':6} "
    lines = [head + " ".join(f"{d:>9}" for d in DISTS)]
    by_variant: dict[tuple[str, Variant], dict[str, Row]] = {}
    for r in rows:
        by_variant.setdefault((r.workload, r.variant), {})[r.dist] = r
    for (workload, v), by_dist in by_variant.items():
        kind = "honest" if v.honest else "dishonest"
        cells = " ".join(f"{by_dist[d].worst:9.3g}" if d in by_dist else f"{'-':>9}" for d in DISTS)
        lines.append(f"{kind:9} {workload:18} {v.name:18} {v.policy:6} {cells}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--workload", action="append", help="default: all in SIZES")
    parser.add_argument("--device", default="cpu", help="cuda: GPU_SIZES, cuBLAS reference")
    args = parser.parse_args()
    torch.set_num_threads(1)  # tiny tensors: a second thread only adds contention
    rows = []
    for w in args.workload or list(SIZES):
        rows += measure(w, seeds=range(args.seeds), device=args.device)
    print(f"error model {TOLERANCE.key()} on {args.device}; worst over {args.seeds} seeds")
    print(table(rows))
    honest = [r for r in rows if r.variant.honest]
    dishonest = [r for r in rows if not r.variant.honest]
    print(
        f"honest: max fraction {max(r.worst for r in honest):.3g}, "
        f"{sum(r.failures for r in honest)} refused; dishonest: min fraction "
        f"{min(r.worst for r in dishonest):.3g}, "
        f"{sum(len(r.fractions) - r.failures for r in dishonest)} passed"
    )


if __name__ == "__main__":
    main()
