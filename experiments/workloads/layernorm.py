"""LayerNorm over the last dimension of a 2-D fp32 tensor, with an affine weight and bias.

The affine parameters are drawn at random in `__init__` (nn.LayerNorm starts them at ones and
zeros) so that a kernel which ignores them does not pass.
"""

import torch
import torch.nn as nn

ROWS = 32768
COLS = 4096
EPS = 1e-5

SHAPES = [
    {"ROWS": 16, "COLS": 128},
    {"ROWS": 23, "COLS": 301},
    {"ROWS": 8191, "COLS": 5120},
]


class Model(nn.Module):
    def __init__(self, normalized_shape: int, eps: float):
        super().__init__()
        self.norm = nn.LayerNorm(normalized_shape, eps=eps)
        with torch.no_grad():
            self.norm.weight.normal_(1.0, 0.5)
            self.norm.bias.normal_(0.0, 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x)


def get_inputs():
    return [torch.randn(ROWS, COLS)]


def get_init_inputs():
    return [COLS, EPS]
