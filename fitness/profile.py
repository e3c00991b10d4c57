"""The profile record the profiler-analysis actor reads: kernel table, ncu metrics, roofline.

Stored as JSON under RUN/artifacts/profiles/; readers ignore keys they do not know, so a
profile written by a newer version still loads.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fitness.precision import Precision
from fitness.roofline import peaks_for
from fitness.roofline import sol_ms as roofline_sol_ms

PROFILE_SCHEMA_VERSION = 1


@dataclass
class KernelRow:
    """One row of the kernel table, summed over the profiled calls.

    On CUDA a row is a device kernel (or memcpy/memset) and `device_us` its GPU time; on the
    CPU (and the Triton interpreter) a row is an aten op and `device_us` its self CPU time.
    `own` marks the candidate's own kernels (names defined in its source).
    """

    name: str
    calls: int
    device_us: float
    self_us: float = 0.0
    host_us: float = 0.0
    own: bool = False


@dataclass
class NcuKernel:
    """Nsight Compute metrics of one kernel, averaged over its profiled launches.

    Percentages are of the device's peak; `stalls` maps a warp stall reason to its share of
    all stall cycles (0..1), largest first.
    """

    name: str
    launches: int = 1
    duration_us: float | None = None
    dram_pct: float | None = None
    sm_pct: float | None = None
    occupancy_pct: float | None = None
    registers: float | None = None
    smem_static: float | None = None
    smem_dynamic: float | None = None
    grid_size: float | None = None
    block_size: float | None = None
    stalls: dict[str, float] = field(default_factory=dict)

    @property
    def smem_bytes(self) -> float | None:
        if self.smem_static is None and self.smem_dynamic is None:
            return None
        return (self.smem_static or 0.0) + (self.smem_dynamic or 0.0)

    def top_stall(self) -> tuple[str, float] | None:
        return max(self.stalls.items(), key=lambda kv: kv[1]) if self.stalls else None


@dataclass
class Roofline:
    """Speed-of-light numbers: arithmetic intensity (FLOP/byte) against the device's ridge."""

    flops: float = 0.0
    min_bytes: float = 0.0
    runtime_ms: float | None = None
    sol_ms: float | None = None
    sol_fraction: float | None = None
    intensity: float | None = None
    ridge: float | None = None  # peak FLOP/s / peak DRAM bytes/s; None on an unknown device
    precision: str = "fp32"

    @classmethod
    def build(
        cls,
        flops: float,
        min_bytes: float,
        device_name: str,
        precision: str = "fp32",
        runtime_ms: float | None = None,
        sol_ms: float | None = None,
    ) -> Roofline:
        """Fill intensity, ridge and speed of light from fitness.roofline's device tables."""
        policy = Precision(precision)
        peaks = peaks_for(device_name)
        ridge = peaks.flops(policy) / peaks.dram if peaks else None
        if sol_ms is None and peaks is not None:
            sol_ms = roofline_sol_ms(int(flops), int(min_bytes), device_name, policy)
        fraction = sol_ms / runtime_ms if sol_ms and runtime_ms else None
        return cls(
            flops=float(flops),
            min_bytes=float(min_bytes),
            runtime_ms=runtime_ms,
            sol_ms=sol_ms,
            sol_fraction=fraction,
            intensity=flops / min_bytes if min_bytes > 0 else None,
            ridge=ridge,
            precision=policy.value,
        )

    @classmethod
    def from_result(cls, result: Any, precision: str | None = None) -> Roofline:
        """From a fitness `EvalResult` (its metrics carry flops and min_bytes)."""
        out = cls.build(
            result.metrics.get("flops", 0.0),
            result.metrics.get("min_bytes", 0.0),
            result.device,
            precision or result.precision or "fp32",
            result.runtime_ms,
            result.sol_ms,
        )
        if result.sol_fraction is not None:
            out.sol_fraction = result.sol_fraction
        return out


@dataclass
class Profile:
    """A candidate's profile: kernel table, optional ncu metrics, roofline, notes."""

    workload: str
    device: str  # torch.cuda.get_device_name() or "cpu"
    device_kind: str = "cpu"  # "cuda" | "cpu"
    calls: int = 1  # forward calls covered by `kernels`
    kernels: list[KernelRow] = field(default_factory=list)
    ncu: list[NcuKernel] = field(default_factory=list)
    roofline: Roofline = field(default_factory=Roofline)
    interpreted: bool = False  # Triton ran under TRITON_INTERPRET: times are not GPU times
    notes: list[str] = field(default_factory=list)
    schema_version: int = PROFILE_SCHEMA_VERSION

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=1)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Profile:
        d = _known(cls, d)
        d["kernels"] = [KernelRow(**_known(KernelRow, k)) for k in d.get("kernels", [])]
        d["ncu"] = [NcuKernel(**_known(NcuKernel, k)) for k in d.get("ncu", [])]
        d["roofline"] = Roofline(**_known(Roofline, d.get("roofline") or {}))
        return cls(**d)

    @classmethod
    def from_json(cls, text: str) -> Profile:
        return cls.from_dict(json.loads(text))

    def device_us_per_call(self) -> float:
        return sum(k.device_us for k in self.kernels) / max(self.calls, 1)

    def launches_per_call(self) -> float:
        return sum(k.calls for k in self.kernels) / max(self.calls, 1)


def _known(cls: type, d: dict[str, Any]) -> dict[str, Any]:
    """`d` without keys that `cls` does not have (profiles written by a newer version)."""
    names = {f.name for f in dataclasses.fields(cls)}
    return {k: v for k, v in d.items() if k in names}


def safe_id(candidate_id: str) -> str:
    """A file name for a candidate id: anything but letters, digits, '.', '_', '-' becomes '_'."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", candidate_id).strip(".") or "_"


def save_profile(run_dir: str | Path, candidate_id: str, profile: Profile) -> Path:
    """Write `RUN/artifacts/profiles/<safe id>.json` atomically; returns its path."""
    folder = Path(run_dir) / "artifacts" / "profiles"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{safe_id(candidate_id)}.json"
    tmp = path.with_suffix(f".json.tmp{os.getpid()}")
    tmp.write_text(profile.to_json())
    os.replace(tmp, path)
    return path
