"""Triton seed for layernorm: the LayerNorm tutorial's forward kernel.

One program per row; three passes over the row in BLOCK_SIZE chunks (mean, variance, then
normalise with the affine weight and bias), all in fp32.
"""

import os

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _layernorm_kernel(
    x_ptr, y_ptr, w_ptr, b_ptr, n_cols, stride_x, stride_y, eps, BLOCK_SIZE: tl.constexpr
):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * stride_x
    y_row = y_ptr + row * stride_y
    acc = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
    for start in range(0, n_cols, BLOCK_SIZE):
        cols = start + tl.arange(0, BLOCK_SIZE)
        acc += tl.load(x_row + cols, mask=cols < n_cols, other=0.0)
    mean = tl.sum(acc, axis=0) / n_cols
    acc = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
    for start in range(0, n_cols, BLOCK_SIZE):
        cols = start + tl.arange(0, BLOCK_SIZE)
        mask = cols < n_cols
        x = tl.load(x_row + cols, mask=mask, other=0.0)
        diff = tl.where(mask, x - mean, 0.0)
        acc += diff * diff
    var = tl.sum(acc, axis=0) / n_cols
    rstd = 1.0 / tl.sqrt(var + eps)
    for start in range(0, n_cols, BLOCK_SIZE):
        cols = start + tl.arange(0, BLOCK_SIZE)
        mask = cols < n_cols
        x = tl.load(x_row + cols, mask=mask, other=0.0)
        w = tl.load(w_ptr + cols, mask=mask, other=0.0)
        b = tl.load(b_ptr + cols, mask=mask, other=0.0)
        tl.store(y_row + cols, (x - mean) * rstd * w + b, mask=mask)


# Warps per row at most (a row of 256 columns or fewer gets one): the launch parameter that
# the offline operator tunes here; the column chunk follows the row's width.
NUM_WARPS = 8


def _launch_config(n_cols: int) -> tuple[int, int]:
    """(BLOCK_SIZE, num_warps) as in the tutorial: at most 64 KB of fp32 per chunk."""
    max_block = 64 if os.environ.get("TRITON_INTERPRET") == "1" else 65536 // 4
    block = min(max_block, triton.next_power_of_2(n_cols))
    return block, min(max(block // 256, 1), NUM_WARPS)


class ModelNew(nn.Module):
    def __init__(self, normalized_shape: int, eps: float):
        super().__init__()
        self.norm = nn.LayerNorm(normalized_shape, eps=eps)
        with torch.no_grad():
            self.norm.weight.normal_(1.0, 0.5)
            self.norm.bias.normal_(0.0, 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n_cols = x.shape[-1]
        x2 = x.contiguous().reshape(-1, n_cols)
        y = torch.empty_like(x2)
        block, num_warps = _launch_config(n_cols)
        _layernorm_kernel[(x2.shape[0],)](
            x2,
            y,
            self.norm.weight,
            self.norm.bias,
            n_cols,
            x2.stride(0),
            y.stride(0),
            float(self.norm.eps),
            BLOCK_SIZE=block,
            num_warps=num_warps,
        )
        return y.reshape(x.shape)
