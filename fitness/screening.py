"""Workload screening: null candidates that a non-degenerate workload must fail (EVALUATION.md)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from fitness.errors import EvoError
from fitness.guardrails import GuardrailConfig
from fitness.judge import EvalOptions, evaluate
from fitness.results import EvalResult
from fitness.workloads import Workload

_PRELUDE = """
from pathlib import Path

import torch
import torch.nn as nn

from fitness.workloads import import_workload_module

_wl = import_workload_module(Path({path!r}), {overrides!r})


def _first(out):
    return out[0] if isinstance(out, (tuple, list)) else out


class ModelNew(nn.Module):
    def __init__(self, *args):
        super().__init__()
        self.ref = _wl.Model(*args)

    def forward(self, *x):
        with torch.no_grad():
{body}
"""

# name -> the body of forward: each returns something that is not a computation of Model on x.
NULL_CANDIDATES = {
    "zeros": "            return torch.zeros_like(_first(self.ref(*x)))",
    "constant_mean": (
        "            o = _first(self.ref(*x))\n"
        "            return torch.full_like(o, o.double().mean().item())"
    ),
    "passthrough": (
        "            o = _first(self.ref(*x))\n"
        "            src = x[0].reshape(-1)[: o.numel()]\n"
        "            return src.reshape(o.shape).to(o.dtype) if src.numel() == o.numel() else o * 0"
    ),
    "other_seed": (
        "            torch.manual_seed(torch.randint(1, 2**30, ()).item() + 17)\n"
        "            dev = x[0].device if isinstance(x[0], torch.Tensor) else 'cpu'\n"
        "            y = [t.to(dev) if isinstance(t, torch.Tensor) else t\n"
        "                 for t in _wl.get_inputs()]\n"
        "            return self.ref(*y)"
    ),
}


def null_source(workload: Workload, name: str) -> str:
    return _PRELUDE.format(
        path=str(workload.path), overrides=dict(workload.overrides), body=NULL_CANDIDATES[name]
    )


@dataclass(frozen=True)
class ScreeningReport:
    workload: str
    degenerate: bool
    passed_by: list[str]
    results: dict[str, EvalResult]

    def to_json_dict(self) -> dict:
        return {
            "workload": self.workload,
            "degenerate": self.degenerate,
            "passed_by": self.passed_by,
        }


def screen(workload: Workload, options: EvalOptions | None = None) -> ScreeningReport:
    """Run every null candidate; a workload that any of them passes is degenerate."""
    opts = replace(
        options or EvalOptions(),
        timing=False,
        baselines=False,
        check_trace=False,
        guardrails=GuardrailConfig(enabled=False),
    )
    results = {
        name: evaluate(null_source(workload, name), workload, opts) for name in NULL_CANDIDATES
    }
    broken = {n: r for n, r in results.items() if r.status.value not in ("mismatch", "correct")}
    if broken:
        name, r = next(iter(broken.items()))
        raise EvoError(
            f"screening {workload.name} is inconclusive: null candidate {name!r} ended in "
            f"{r.status.value} ({r.reason})"
        )
    passed = [name for name, r in results.items() if r.ok]
    return ScreeningReport(workload.name, bool(passed), passed, results)
