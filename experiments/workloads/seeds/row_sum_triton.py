"""Triton seed for row_sum: one program per row, accumulating column chunks in fp32."""

import os

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _row_sum_kernel(x_ptr, y_ptr, n_cols, stride_row, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    row_ptr = x_ptr + row * stride_row
    acc = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
    for start in range(0, n_cols, BLOCK_SIZE):
        cols = start + tl.arange(0, BLOCK_SIZE)
        acc += tl.load(row_ptr + cols, mask=cols < n_cols, other=0.0)
    tl.store(y_ptr + row, tl.sum(acc, axis=0))


# Warps per row at most (a row of 256 columns or fewer gets one): the launch parameter that
# the offline operator tunes here; the column chunk follows the row's width.
NUM_WARPS = 8


def _launch_config(n_cols: int) -> tuple[int, int]:
    """(BLOCK_SIZE, num_warps); small chunks under the interpreter so the loop is exercised."""
    max_block = 64 if os.environ.get("TRITON_INTERPRET") == "1" else 4096
    block = min(max_block, triton.next_power_of_2(n_cols))
    return block, min(max(block // 256, 1), NUM_WARPS)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n_cols = x.shape[-1]
        x2 = x.contiguous().reshape(-1, n_cols)
        y = torch.empty(x.shape[:-1], device=x.device, dtype=x.dtype)
        block, num_warps = _launch_config(n_cols)
        _row_sum_kernel[(x2.shape[0],)](
            x2, y, n_cols, x2.stride(0), BLOCK_SIZE=block, num_warps=num_warps
        )
        return y
