"""Linear layer then ReLU: y = relu(x @ W^T + b), fp32, x of shape (BATCH, IN_FEATURES)."""

import torch
import torch.nn as nn

BATCH = 4096
IN_FEATURES = 2048
OUT_FEATURES = 2048

SHAPES = [
    {"BATCH": 32, "IN_FEATURES": 32, "OUT_FEATURES": 32},
    {"BATCH": 41, "IN_FEATURES": 67, "OUT_FEATURES": 35},
    {"BATCH": 3001, "IN_FEATURES": 1999, "OUT_FEATURES": 2053},
]


class Model(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.linear(x))


def get_inputs():
    return [torch.randn(BATCH, IN_FEATURES)]


def get_init_inputs():
    return [IN_FEATURES, OUT_FEATURES]
