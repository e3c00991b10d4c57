"""Speed of light: the floor time set by a device's peak rates (EVALUATION.md, Plausibility)."""

from __future__ import annotations

from dataclasses import dataclass

from fitness.precision import Precision


@dataclass(frozen=True)
class DevicePeaks:
    """Datasheet peaks (dense, boost clock): FLOP/s per matmul precision and DRAM bytes/s."""

    fp32: float
    tf32: float
    half: float
    dram: float

    def flops(self, policy: Precision) -> float:
        return {
            Precision.FP32: self.fp32,
            Precision.TF32: self.tf32,
            Precision.BF16: self.half,
            Precision.FP16: self.half,
        }[policy]


# Matched by substring of torch.cuda.get_device_name(), first match wins.
PEAKS: tuple[tuple[str, DevicePeaks], ...] = (
    ("H200", DevicePeaks(fp32=67e12, tf32=494.7e12, half=989.4e12, dram=4.8e12)),
    ("H100 PCIe", DevicePeaks(fp32=51e12, tf32=378e12, half=756e12, dram=2.0e12)),
    ("H100 NVL", DevicePeaks(fp32=60e12, tf32=417e12, half=835e12, dram=3.9e12)),
    ("H100", DevicePeaks(fp32=67e12, tf32=494.7e12, half=989.4e12, dram=3.35e12)),
    ("A100", DevicePeaks(fp32=19.5e12, tf32=156e12, half=312e12, dram=2.039e12)),
    ("L40S", DevicePeaks(fp32=91.6e12, tf32=183e12, half=366e12, dram=0.864e12)),
    ("A10", DevicePeaks(fp32=31.2e12, tf32=62.5e12, half=125e12, dram=0.6e12)),
)


def peaks_for(device_name: str) -> DevicePeaks | None:
    for key, peaks in PEAKS:
        if key in device_name:
            return peaks
    return None


def sol_ms(flops: int, min_bytes: int, device_name: str, policy: Precision) -> float | None:
    """The larger of compute time and memory time at peak; None on an unknown device."""
    peaks = peaks_for(device_name)
    if peaks is None or (flops <= 0 and min_bytes <= 0):
        return None
    return max(flops / peaks.flops(policy), min_bytes / peaks.dram) * 1e3
