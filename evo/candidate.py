"""The candidate record: one proposed child, and the lineage row it becomes once judged.

A `Proposal` is what an island hands to the fitness service: plain data, so it crosses actor
boundaries and checkpoints as JSON. `candidate_row` joins it with the verdict into the row
that `candidates/` stores (the schema is in `evo.lineage`).
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime

from fitness.errors import EvoError

# The verdict fields copied into a row as they are (the rest of the row is the proposal's).
_RESULT_FIELDS = (
    "status", "reason", "precision", "atol", "rtol", "comparable", "protocol_version",
    "runtime_ms", "runtime_iqr_ms", "baseline_eager_ms", "baseline_compile_ms",
    "speedup_vs_eager", "speedup_vs_compile", "sol_ms", "sol_fraction", "audit",
    "max_abs_err", "max_rel_err", "error_fraction", "isolation", "device", "versions",
    "eval_seconds",
)  # fmt: skip


@dataclass
class Proposal:
    """A child an island wants judged: where it comes from and its source."""

    candidate_id: str
    workload: str
    backend: str
    island: str
    step: int
    source: str
    source_hash: str
    operator: str
    parent_ids: tuple[str, ...] = ()
    model: str = ""
    llm_call_id: str = ""
    recommendation: str = ""
    extra: dict = field(default_factory=dict)  # e.g. the operator's one-line description

    def to_dict(self) -> dict:
        d = asdict(self)
        d["parent_ids"] = list(self.parent_ids)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> Proposal:
        return cls(**{**d, "parent_ids": tuple(d.get("parent_ids", ()))})


def candidate_id(run_id: str, island: str, step: int) -> str:
    """Unique per row: the run, the island and the island's sequence number."""
    return f"{run_id}/{island}/{step:06d}"


FitnessFn = Callable[[dict, dict], "float | tuple[float, dict] | None"]


def fitness_function(metric: str) -> FitnessFn:
    """The fitness of a verdict: a named speedup, or a user function given by dotted path.

    A user function receives the verdict (the `evo eval` JSON fields) and the candidate's
    artifacts (`source`, `workload`, `backend`) and returns the fitness, or (fitness, extra
    metrics); the extra metrics go into the row's `metrics`.
    """
    if metric in ("speedup_vs_eager", "speedup_vs_compile"):
        return lambda verdict, artifacts: verdict.get(metric)
    if metric in ("geomean_speedup_vs_eager", "geomean_speedup_vs_compile"):
        # A workload with one shape has no geomean in its metrics: its one speedup is it.
        base = metric.removeprefix("geomean_")
        return lambda verdict, artifacts: (verdict.get("metrics") or {}).get(
            metric, verdict.get(base)
        )
    module, _, name = metric.rpartition(":") if ":" in metric else metric.rpartition(".")
    if not module:
        raise EvoError(f"fitness.metric: {metric!r} is neither a speedup nor a dotted path")
    try:
        fn = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as e:
        raise EvoError(f"fitness.metric: cannot import {metric!r}: {e}") from None
    if not callable(fn):
        raise EvoError(f"fitness.metric: {metric!r} is not callable")
    return fn


def score(fn: FitnessFn, verdict: dict, prop: Proposal) -> tuple[float | None, dict]:
    """(fitness, extra metrics) of a verdict; only a correct one has a fitness."""
    if verdict.get("status") != "correct":
        return None, {}
    artifacts = {"source": prop.source, "workload": prop.workload, "backend": prop.backend}
    out = fn(verdict, artifacts)
    extra: dict = {}
    if isinstance(out, tuple):
        out, extra = out
    if out is None or not isinstance(out, (int, float)) or not math.isfinite(out):
        return None, dict(extra)
    return float(out), {k: float(v) for k, v in dict(extra).items()}


def candidate_row(
    run_id: str, prop: Proposal, verdict: dict, fitness: float | None, extra: dict
) -> dict:
    """The `candidates/` row of a judged proposal."""
    row = {k: verdict.get(k) for k in _RESULT_FIELDS}
    metrics = {k: float(v) for k, v in (verdict.get("metrics") or {}).items()}
    metrics.update(extra)
    metrics["code_size"] = float(len(prop.source))
    if prop.extra.get("repair_attempt"):  # the repairs of its failed lineage so far
        metrics["repair_attempt"] = float(prop.extra["repair_attempt"])
    row.update(
        run_id=run_id,
        candidate_id=prop.candidate_id,
        source_hash=prop.source_hash,
        workload=prop.workload,
        backend=prop.backend,
        island=prop.island,
        step=prop.step,
        parent_ids=list(prop.parent_ids),
        operator=prop.operator,
        model=prop.model,
        llm_call_id=prop.llm_call_id,
        source=prop.source,
        fitness=fitness,
        metrics=metrics,
        recommendation=prop.recommendation,
        versions={k: str(v) for k, v in (verdict.get("versions") or {}).items()},
        created_at=datetime.now(UTC),
        is_migrant=False,
    )
    return row


def verdict_from_row(row: dict) -> dict:
    """The verdict a recorded row holds (a deterministic replay takes it instead of judging
    again); the inverse of `candidate_row` for the verdict's fields."""
    v = {k: row.get(k) for k in _RESULT_FIELDS}
    v["versions"] = dict(row.get("versions") or {})  # a Parquet map reads back as pairs
    v["metrics"] = dict(row.get("metrics") or {})
    return v


def failed_verdict(status: str, reason: str, prop: dict) -> dict:
    """A verdict the engine itself reaches (a fitness worker that died under a proposal)."""
    return {
        "status": status,
        "reason": reason,
        "workload": prop["workload"],
        "backend": prop["backend"],
        "source_hash": prop["source_hash"],
        "metrics": {},
        "versions": {},
        "comparable": False,
        "audit": False,
    }
