"""Verdicts: the seven statuses and the `EvalResult` record that `evo eval --json` prints."""

from __future__ import annotations

import dataclasses
import enum
import json
from dataclasses import dataclass, field
from typing import Any

# Bump whenever the correctness or timing protocol changes: it keys every cache.
PROTOCOL_VERSION = 5


class Status(enum.StrEnum):
    GENERATION_FAILURE = "generation_failure"
    REJECTED = "rejected"
    COMPILE_ERROR = "compile_error"
    RUNTIME_ERROR = "runtime_error"
    TIMEOUT = "timeout"
    MISMATCH = "mismatch"
    CORRECT = "correct"


# The fields of `evo eval --json`, in order; a stable interface (DESIGN.md).
JSON_FIELDS = (
    "status",
    "reason",
    "runtime_ms",
    "runtime_iqr_ms",
    "baseline_eager_ms",
    "baseline_compile_ms",
    "speedup_vs_eager",
    "speedup_vs_compile",
    "sol_ms",
    "sol_fraction",
    "max_abs_err",
    "max_rel_err",
    "error_fraction",
    "device",
    "versions",
    "workload",
    "backend",
    "source_hash",
    "precision",
    "comparable",
    "audit",
    "isolation",
    "protocol_version",
)


@dataclass
class EvalResult:
    """One candidate's verdict. `reason` is one line; `log` holds the long story."""

    status: Status
    reason: str
    workload: str = ""
    backend: str = ""
    source_hash: str = ""
    precision: str = "fp32"
    atol: float | None = None
    rtol: float | None = None
    comparable: bool = False
    runtime_ms: float | None = None
    runtime_iqr_ms: float | None = None
    baseline_eager_ms: float | None = None
    baseline_compile_ms: float | None = None
    speedup_vs_eager: float | None = None
    speedup_vs_compile: float | None = None
    sol_ms: float | None = None
    sol_fraction: float | None = None
    audit: bool = False
    max_abs_err: float | None = None
    max_rel_err: float | None = None  # older verdicts; `error_fraction` replaces it
    # The largest error as a fraction of the allowed bound (fitness.tolerance): <= 1 passes.
    error_fraction: float | None = None
    device: str = ""
    versions: dict[str, str] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)
    caught_by: str = ""  # which layer decided a failing verdict: static, runtime, judge
    # The OS walls the candidate's process ran in, read from /proc (fitness.walls, LAYERS).
    isolation: list[str] = field(default_factory=list)
    eval_seconds: float = 0.0
    protocol_version: int = PROTOCOL_VERSION
    log: str = ""

    def __post_init__(self) -> None:
        self.status = Status(self.status)
        self.reason = " ".join(str(self.reason).split())[:500]

    @property
    def ok(self) -> bool:
        return self.status is Status.CORRECT

    def to_json_dict(self) -> dict[str, Any]:
        """The stable `evo eval --json` object."""
        d = dataclasses.asdict(self)
        d["status"] = self.status.value
        return {k: d[k] for k in JSON_FIELDS}

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["status"] = self.status.value
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> EvalResult:
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})

    def to_json(self) -> str:
        return json.dumps(self.to_json_dict())
