"""Triton seed for rmsnorm: one program per row, a sum-of-squares pass then a scaling pass."""

import os

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _rmsnorm_kernel(x_ptr, y_ptr, w_ptr, n_cols, stride_x, stride_y, eps, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * stride_x
    y_row = y_ptr + row * stride_y
    acc = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
    for start in range(0, n_cols, BLOCK_SIZE):
        cols = start + tl.arange(0, BLOCK_SIZE)
        x = tl.load(x_row + cols, mask=cols < n_cols, other=0.0)
        acc += x * x
    inv_rms = 1.0 / tl.sqrt(tl.sum(acc, axis=0) / n_cols + eps)
    for start in range(0, n_cols, BLOCK_SIZE):
        cols = start + tl.arange(0, BLOCK_SIZE)
        mask = cols < n_cols
        x = tl.load(x_row + cols, mask=mask, other=0.0)
        w = tl.load(w_ptr + cols, mask=mask, other=0.0)
        tl.store(y_row + cols, x * inv_rms * w, mask=mask)


# Warps per row at most (a row of 256 columns or fewer gets one): the launch parameter that
# the offline operator tunes here; the column chunk follows the row's width.
NUM_WARPS = 8


def _launch_config(n_cols: int) -> tuple[int, int]:
    """(BLOCK_SIZE, num_warps) as in the LayerNorm tutorial."""
    max_block = 64 if os.environ.get("TRITON_INTERPRET") == "1" else 65536 // 4
    block = min(max_block, triton.next_power_of_2(n_cols))
    return block, min(max(block // 256, 1), NUM_WARPS)


class ModelNew(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(1.0 + 0.5 * torch.randn(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n_cols = x.shape[-1]
        x2 = x.contiguous().reshape(-1, n_cols)
        y = torch.empty_like(x2)
        block, num_warps = _launch_config(n_cols)
        _rmsnorm_kernel[(x2.shape[0],)](
            x2,
            y,
            self.weight,
            n_cols,
            x2.stride(0),
            y.stride(0),
            float(self.eps),
            BLOCK_SIZE=block,
            num_warps=num_warps,
        )
        return y.reshape(x.shape)
