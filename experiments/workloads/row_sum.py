"""Row reduction: the sum of each row of a 2-D fp32 tensor, shape (ROWS,).

Rows are about a thousand long: the sum of N standard normals has magnitude sqrt(N), and the
rounding of an honest but different summation order grows with it (measured on an H100 at 4096
columns: 30% of the fp32 tolerance atol=rtol=1e-4, on rows whose sum is near zero).
"""

import torch
import torch.nn as nn

ROWS = 131072
COLS = 1024

SHAPES = [
    {"ROWS": 16, "COLS": 128},
    {"ROWS": 37, "COLS": 333},
    {"ROWS": 100003, "COLS": 1500},
]


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sum(x, dim=-1)


def get_inputs():
    return [torch.randn(ROWS, COLS)]


def get_init_inputs():
    return []
