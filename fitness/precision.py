"""Precision policies: what matmul precision a candidate may use, and the tolerances that follow."""

from __future__ import annotations

import enum

import torch


class Precision(enum.StrEnum):
    FP32 = "fp32"
    TF32 = "tf32"
    BF16 = "bf16"
    FP16 = "fp16"


_POLICY_TOL = {
    Precision.FP32: 1e-4,
    Precision.TF32: 1e-3,
    Precision.BF16: 1e-2,
    Precision.FP16: 1e-2,
}
_DTYPE_TOL = {torch.float16: 1e-2, torch.bfloat16: 1e-2}


def tolerance(policy: Precision, dtype: torch.dtype) -> float:
    """atol = rtol for an output of `dtype` under `policy` (the wider of the two rules)."""
    return max(_POLICY_TOL[policy], _DTYPE_TOL.get(dtype, 0.0))


def parse_precision(value: str) -> Precision:
    from fitness.errors import EvoError

    try:
        return Precision(value)
    except ValueError:
        raise EvoError(
            f"unknown precision {value!r}; choose one of {', '.join(p.value for p in Precision)}"
        ) from None
