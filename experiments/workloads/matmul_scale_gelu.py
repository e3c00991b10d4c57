"""Bias-free linear layer, scaled, then exact GELU: y = gelu((x @ W^T) * scale), fp32."""

import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH = 2048
IN_FEATURES = 4096
OUT_FEATURES = 2048
SCALE = 2.0

SHAPES = [
    {"BATCH": 32, "IN_FEATURES": 32, "OUT_FEATURES": 32},
    {"BATCH": 33, "IN_FEATURES": 71, "OUT_FEATURES": 47},
    {"BATCH": 1537, "IN_FEATURES": 3001, "OUT_FEATURES": 2049},
]


class Model(nn.Module):
    def __init__(self, in_features: int, out_features: int, scale: float):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features, bias=False)
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(self.linear(x) * self.scale)


def get_inputs():
    return [torch.randn(BATCH, IN_FEATURES)]


def get_init_inputs():
    return [IN_FEATURES, OUT_FEATURES, SCALE]
