"""Rule-based analysis: what limits a kernel, and one concrete change to try next.

The recommendation names the limit (close to speed of light, launch overhead, PyTorch
fallbacks, occupancy, latency, memory or compute) with the numbers that show it, plus
`params_hint`: the direction (+1 larger, -1 smaller) in which the offline parameter
operator's tunable kinds ("block", "group", "warps", "stages") should move.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from fitness.precision import Precision
from fitness.profile import NcuKernel, Profile, Roofline
from fitness.roofline import peaks_for

TUNABLE_KINDS = ("block", "group", "warps", "stages")

NEAR_SOL = 0.8  # sol_fraction at which only fine tuning is left
LAUNCHES_MANY = 3  # kernel launches per forward that suggest fusing
TINY_KERNEL_US = 10.0
BUSY_LOW = 0.5  # fraction of the call during which the GPU runs a kernel
FALLBACK_SHARE = 0.4  # device-time share of kernels the candidate did not write
OCCUPANCY_LOW = 35.0  # achieved occupancy, % of peak
REGISTERS_HIGH = 96
SMEM_HIGH = 64 * 1024  # bytes per block
UTILISATION_LOW = 40.0  # DRAM and SM throughput both below this: neither is the limit
DRAM_SATURATED = 75.0
SM_SATURATED = 80.0
SMALL_GRID = 264  # two waves of programs on a 132-SM H100
STALL_DOMINANT = 0.4
# Stalls of warps that are ready but wait for the scheduler or a math pipe: the SM is busy
# issuing, and low occupancy (a tiled GEMM's, by design) is not what limits it.
ISSUE_BOUND_STALLS = ("not_selected", "math_pipe_throttle", "dispatch_stall")
NOMINAL_DEVICE = "H100"  # whose ridge is used where the profile's device has no peaks


@dataclass
class Recommendation:
    """What the next mutation of a lineage should try, and which tunables to move which way."""

    text: str
    kind: str
    params_hint: dict[str, int] = field(default_factory=dict)
    note: str = ""  # e.g. why an LLM analyst fell back to the rules

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Recommendation:
        return cls(**{k: d[k] for k in ("text", "kind", "params_hint", "note") if k in d})


def _pct(value: float) -> str:
    return f"{value:.0f}%"


def _ms(value: float) -> str:
    return f"{value:.3g} ms"


def _dominant(kernels: list[NcuKernel]) -> NcuKernel | None:
    """The kernel with the most profiled time (the first one when durations are missing)."""
    if not kernels:
        return None
    return max(kernels, key=lambda k: (k.duration_us or 0.0) * k.launches)


def _ridge(roof: Roofline) -> tuple[float | None, str]:
    """The profile's ridge point, else the nominal device's (and a word saying which)."""
    if roof.ridge:
        return roof.ridge, "device"
    peaks = peaks_for(NOMINAL_DEVICE)
    if peaks is None:
        return None, ""
    return peaks.flops(Precision(roof.precision)) / peaks.dram, f"nominal {NOMINAL_DEVICE}"


class RuleAnalyst:
    """Rule-based classification of a profile; the first rule that matches decides.

    Order: speed of light, launches, PyTorch fallbacks, occupancy, latency, then memory vs
    compute (ncu's DRAM% vs SM% where present, else arithmetic intensity vs the ridge point).
    """

    name = "rules"

    def recommend(self, profile: Profile) -> Recommendation:
        for rule in (
            self._near_sol,
            self._launch_bound,
            self._fallback,
            self._occupancy_limited,
            self._latency_bound,
            self._memory_or_compute,
        ):
            rec = rule(profile)
            if rec is not None:
                return rec
        return Recommendation(
            "No roofline or hardware metrics to go on: profile the candidate on a GPU "
            "(with ncu where available) before steering it.",
            "unknown",
        )

    def _near_sol(self, p: Profile) -> Recommendation | None:
        r = p.roofline
        if r.sol_fraction is None or r.sol_fraction < NEAR_SOL:
            return None
        return Recommendation(
            f"At {_pct(100 * r.sol_fraction)} of speed of light ({_ms(r.runtime_ms or 0)} "
            f"against a floor of {_ms(r.sol_ms or 0)}): structural rewrites are unlikely to "
            "pay; sweep num_warps and num_stages around the current values.",
            "near_sol",
        )

    def _launch_bound(self, p: Profile) -> Recommendation | None:
        if p.device_kind != "cuda" or not p.kernels:
            return None
        launches = p.launches_per_call()
        per_launch = p.device_us_per_call() / max(launches, 1e-9)
        runtime = p.roofline.runtime_ms
        busy = p.device_us_per_call() / (runtime * 1e3) if runtime else None
        many_tiny = launches >= LAUNCHES_MANY and per_launch < TINY_KERNEL_US
        idle = busy is not None and busy < BUSY_LOW
        if not (many_tiny or idle):
            return None
        if launches < 2:
            return Recommendation(
                f"Host-bound: the GPU is busy {_pct(100 * busy)} of the {_ms(runtime)} call. "
                "Cut host work per call: no .contiguous() copies or fresh allocations when "
                "not needed, grid and stride arithmetic done once, no autotuning on the path.",
                "launch_bound",
            )
        top = ", ".join(k.name for k in p.kernels[:3])
        busy_text = f"; the GPU is busy {_pct(100 * busy)} of the call" if busy else ""
        return Recommendation(
            f"Launch-bound: {launches:.0f} kernel launches per forward, {per_launch:.3g} us "
            f"each on average{busy_text}. Fuse them into one kernel (now: {top}) so "
            "intermediates stay on chip, and drop host-side tensor ops between launches.",
            "launch_bound",
        )

    def _fallback(self, p: Profile) -> Recommendation | None:
        if p.device_kind != "cuda" or not any(k.own for k in p.kernels):
            return None
        total = sum(k.device_us for k in p.kernels)
        foreign = [k for k in p.kernels if not k.own]
        share = sum(k.device_us for k in foreign) / total if total else 0.0
        if share < FALLBACK_SHARE:
            return None
        names = ", ".join(k.name for k in foreign[:3])
        return Recommendation(
            f"Kernels the candidate did not write take {_pct(100 * share)} of device time "
            f"({names}): move that work into the candidate's own kernel, e.g. fuse the "
            "bias/activation epilogue and write the output in place.",
            "fallback",
        )

    def _occupancy_limited(self, p: Profile) -> Recommendation | None:
        k = _dominant(p.ncu)
        if k is None or k.occupancy_pct is None or k.occupancy_pct >= OCCUPANCY_LOW:
            return None
        stall = k.top_stall()
        if stall and stall[0] in ISSUE_BOUND_STALLS:
            return None  # warps are ready and wait for an issue slot: more would not help
        occ = f"achieved occupancy is {_pct(k.occupancy_pct)} in {k.name}"
        if k.registers is not None and k.registers >= REGISTERS_HIGH:
            return Recommendation(
                f"Occupancy-limited: {occ} with {k.registers:.0f} registers per thread. "
                "Reduce registers: smaller tiles (BLOCK_*) or fewer warps per program, and "
                "keep fewer values live across the inner loop.",
                "occupancy_limited",
                {"block": -1, "warps": -1},
            )
        smem = k.smem_bytes
        if smem is not None and smem >= SMEM_HIGH:
            return Recommendation(
                f"Occupancy-limited: {occ} with {smem / 1024:.0f} KiB of shared memory per "
                "block. Lower num_stages or the K tile so more blocks fit on an SM.",
                "occupancy_limited",
                {"stages": -1, "block": -1},
            )
        return None

    def _latency_bound(self, p: Profile) -> Recommendation | None:
        k = _dominant(p.ncu)
        if k is None or k.dram_pct is None or k.sm_pct is None:
            return None
        if max(k.dram_pct, k.sm_pct) >= UTILISATION_LOW:
            return None
        use = f"DRAM at {_pct(k.dram_pct)} and SM at {_pct(k.sm_pct)} of peak in {k.name}"
        if k.grid_size is not None and k.grid_size < SMALL_GRID:
            return Recommendation(
                f"Latency-bound: {use} with only {k.grid_size:.0f} programs in the grid. Use "
                "a smaller BLOCK (or split the reduction across programs) so several waves "
                "of programs fill every SM.",
                "latency_bound",
                {"block": -1},
            )
        stall = k.top_stall()
        if stall and stall[0] == "long_scoreboard" and stall[1] >= STALL_DOMINANT:
            return Recommendation(
                f"Latency-bound: {use}; warps mostly wait on global loads (long_scoreboard, "
                f"{_pct(100 * stall[1])} of stalls). Keep more loads in flight: more "
                "num_stages (software pipelining) and more warps per program.",
                "latency_bound",
                {"stages": +1, "warps": +1},
            )
        stall_text = f"; top stall {stall[0]} ({_pct(100 * stall[1])})" if stall else ""
        return Recommendation(
            f"Latency-bound: {use}{stall_text}. Give each program more independent work "
            "(a larger BLOCK, unrolled loads) so the memory system and the SMs stay busy.",
            "latency_bound",
            {"block": +1},
        )

    def _memory_or_compute(self, p: Profile) -> Recommendation | None:
        r, k = p.roofline, _dominant(p.ncu)
        ridge, ridge_word = _ridge(r)
        evidence = []
        memory: bool | None = None
        if r.intensity is not None and ridge:
            side = "below" if r.intensity < ridge else "above"
            counted = f"{r.intensity:.3g} FLOP/B" if r.flops else "0 FLOP/B (no matmul or conv)"
            evidence.append(f"arithmetic intensity {counted} is {side} the {ridge_word} ridge")
            evidence[-1] += f" {ridge:.3g}"
            memory = r.intensity < ridge
        if k is not None and k.dram_pct is not None and k.sm_pct is not None:
            evidence.append(f"DRAM at {_pct(k.dram_pct)} vs SM at {_pct(k.sm_pct)} of peak")
            memory = k.dram_pct >= k.sm_pct  # measured beats the model
        if memory is None:
            return None
        if r.sol_fraction is not None:
            evidence.append(f"{_pct(100 * r.sol_fraction)} of speed of light")
        why = "; ".join(evidence)
        stall = k.top_stall() if k is not None else None
        waits_on_loads = bool(
            stall and stall[0] == "long_scoreboard" and stall[1] >= STALL_DOMINANT
        )
        if memory:
            return self._memory(why, k, waits_on_loads)
        return self._compute(why, k, r.precision)

    @staticmethod
    def _memory(why: str, k: NcuKernel | None, waits_on_loads: bool) -> Recommendation:
        hint = {"block": +1, "warps": +1}
        if k is not None and k.dram_pct is not None and k.dram_pct >= DRAM_SATURATED:
            text = (
                f"Memory-bound with DRAM near its peak ({why}): only moving fewer bytes "
                "helps. Fuse neighbouring ops so each input is read once, keep intermediates "
                "in registers, and store narrower dtypes where the precision policy allows."
            )
            return Recommendation(text, "memory_bound", {"block": +1})
        text = (
            f"Memory-bound ({why}). Vectorize loads and stores (contiguous, aligned blocks), "
            "fuse the epilogue so each byte crosses DRAM once, and raise BLOCK_SIZE so each "
            "program moves more bytes."
        )
        if waits_on_loads:
            text += " Warps mostly wait on global loads: add num_stages to pipeline them."
            hint["stages"] = +1
        return Recommendation(text, "memory_bound", hint)

    @staticmethod
    def _compute(why: str, k: NcuKernel | None, precision: str) -> Recommendation:
        hint = {"block": +1, "stages": +1, "group": +1}
        if k is not None and k.sm_pct is not None and k.sm_pct >= SM_SATURATED:
            text = (
                f"Compute-bound with the SMs near peak ({why}): cut instructions per FLOP. "
                "Use tl.dot for the products, hoist index math out of the K loop and use "
                "int32 offsets where sizes allow."
            )
            if precision != Precision.FP32.value:
                text += f" Under the {precision} policy, feed tl.dot {precision} operands."
            return Recommendation(text, "compute_bound", hint)
        tensor = (
            "tensor cores need the tf32/bf16 policy, so under fp32 raise reuse instead"
            if precision == Precision.FP32.value
            else f"use the tensor-core path (tl.dot on {precision} operands)"
        )
        text = (
            f"Compute-bound ({why}). Use larger BLOCK_M/BLOCK_N tiles with more num_stages "
            f"to raise data reuse and GROUP_M swizzling for L2 hits; {tensor}."
        )
        return Recommendation(text, "compute_bound", hint)
