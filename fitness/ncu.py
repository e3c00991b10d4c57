"""What the capture asks Nsight Compute for, and how its `--csv` answer is read.

The metrics are the standard section metrics the rule analyst reads (DRAM and SM throughput,
achieved occupancy, launch resources, warp stall reasons); an ncu that lacks some of them is
retried without (fitness.profiling).
"""

from __future__ import annotations

import csv
import io
import re

from fitness.profile import NcuKernel

# Warp stall reasons read by the analyst; each is one ncu metric
# smsp__average_warps_issue_stalled_<reason>_per_issue_active.ratio (compute capability >= 7).
STALL_REASONS = (
    "long_scoreboard",
    "short_scoreboard",
    "mio_throttle",
    "lg_throttle",
    "math_pipe_throttle",
    "barrier",
    "wait",
    "not_selected",
    "membar",
    "dispatch_stall",
    "no_instruction",
    "branch_resolving",
)
NCU_METRICS = (
    "gpu__time_duration.sum",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "sm__warps_active.avg.pct_of_peak_sustained_active",
    "launch__registers_per_thread",
    "launch__shared_mem_per_block_static",
    "launch__shared_mem_per_block_dynamic",
    "launch__grid_size",
    "launch__block_size",
) + tuple(f"smsp__average_warps_issue_stalled_{r}_per_issue_active.ratio" for r in STALL_REASONS)

# ncu metric -> NcuKernel field.
_NCU_FIELDS = {
    "gpu__time_duration.sum": "duration_us",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed": "dram_pct",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed": "sm_pct",
    "sm__warps_active.avg.pct_of_peak_sustained_active": "occupancy_pct",
    "launch__registers_per_thread": "registers",
    "launch__shared_mem_per_block_static": "smem_static",
    "launch__shared_mem_per_block_dynamic": "smem_dynamic",
    "launch__grid_size": "grid_size",
    "launch__block_size": "block_size",
}
_STALL_METRIC = re.compile(
    r"smsp__(?:average_warps?_(?:latency_)?|pcsamp_warps_)issue_stalled_([a-z_]+?)"
    r"(?:_per_issue_active|_per_warp_active)?(?:\.ratio|\.pct|\.sum)?"
)
_UNIT_SCALE = {"": 1.0, "K": 1e3, "M": 1e6, "G": 1e9, "Ki": 1024.0, "Mi": 1024.0**2}
_TIME_SCALE_US = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3}


def _number(text: str) -> float | None:
    """An ncu value: "1,234.5" -> 1234.5; "n/a" and "" -> None."""
    text = text.strip().replace(",", "")
    try:
        return float(text)
    except ValueError:
        return None


def _scaled(value: float, unit: str) -> float:
    """Base units: bytes for (K|M|Ki)byte[/block], microseconds for times."""
    unit = unit.strip()
    if unit in _TIME_SCALE_US:
        return value * _TIME_SCALE_US[unit]
    match = re.fullmatch(r"(K|M|G|Ki|Mi)?(?:byte|B)(/.*)?", unit)
    if match:
        return value * _UNIT_SCALE[match.group(1) or ""]
    return value


def parse_ncu_csv(text: str) -> list[NcuKernel]:
    """Parse `ncu --csv` (details page) output into one NcuKernel per kernel name.

    Lines before the header (`"ID",...`) such as `==PROF==` messages are skipped; columns are
    found by name, so extra columns of other ncu versions do not matter. Metrics are averaged
    over a kernel's launches (IDs); unknown metrics are ignored.
    """
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if start is None:
        return []
    body = [line for line in lines[start:] if not line.startswith("==")]
    sums: dict[str, dict[str, list[float]]] = {}
    launches: dict[str, set[str]] = {}
    for row in csv.DictReader(io.StringIO("\n".join(body))):
        name, metric = row.get("Kernel Name") or "", row.get("Metric Name") or ""
        value = _number(row.get("Metric Value") or "")
        if not name or not metric or value is None:
            continue
        launches.setdefault(name, set()).add(row.get("ID") or "")
        value = _scaled(value, row.get("Metric Unit") or "")
        sums.setdefault(name, {}).setdefault(metric, []).append(value)
    return [_ncu_kernel(name, metrics, len(launches[name])) for name, metrics in sums.items()]


def _ncu_kernel(name: str, metrics: dict[str, list[float]], launches: int) -> NcuKernel:
    kernel = NcuKernel(name=name, launches=launches)
    stalls: dict[str, float] = {}
    for metric, values in metrics.items():
        mean = sum(values) / len(values)
        if metric in _NCU_FIELDS:
            setattr(kernel, _NCU_FIELDS[metric], mean)
            continue
        match = _STALL_METRIC.fullmatch(metric)
        if match and not metric.endswith("_not_issued") and match.group(1) != "selected":
            stalls[match.group(1)] = stalls.get(match.group(1), 0.0) + mean
    total = sum(stalls.values())
    if total > 0:
        ranked = sorted(stalls.items(), key=lambda kv: -kv[1])
        kernel.stalls = {k: round(v / total, 4) for k, v in ranked if v > 0}
    return kernel


def unsupported_metrics(output: str, metrics: list[str]) -> set[str]:
    """The requested metrics that ncu's error lines name (this ncu or GPU lacks them).

    Matched on the metric names rather than the wording, which differs between versions.
    """
    errors = [line for line in output.splitlines() if "error" in line.lower()]
    return {m for m in metrics if any(m in line for line in errors)}
