"""Residual add then LayerNorm: y = LayerNorm(x + residual) over the last dimension, fp32.

The affine parameters are drawn at random in `__init__` so that a kernel which ignores them
does not pass.
"""

import torch
import torch.nn as nn

ROWS = 16384
COLS = 4096
EPS = 1e-5

SHAPES = [
    {"ROWS": 16, "COLS": 64},
    {"ROWS": 21, "COLS": 173},
    {"ROWS": 6151, "COLS": 3000},
]


class Model(nn.Module):
    def __init__(self, normalized_shape: int, eps: float):
        super().__init__()
        self.norm = nn.LayerNorm(normalized_shape, eps=eps)
        with torch.no_grad():
            self.norm.weight.normal_(1.0, 0.5)
            self.norm.bias.normal_(0.0, 0.5)

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return self.norm(x + residual)


def get_inputs():
    return [torch.randn(ROWS, COLS), torch.randn(ROWS, COLS)]


def get_init_inputs():
    return [COLS, EPS]
