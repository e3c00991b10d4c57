"""Scripted-agent kernel: builtin:softmax in Triton, the seed with 8 warps for wide rows."""

import os

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _softmax_row_kernel(x_ptr, y_ptr, n_cols, stride_x, stride_y, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=-float("inf"))
    x = x - tl.max(x, axis=0)
    num = tl.exp(x)
    den = tl.sum(num, axis=0)
    tl.store(y_ptr + row * stride_y + cols, num / den, mask=mask)


@triton.jit
def _softmax_looped_kernel(x_ptr, y_ptr, n_cols, stride_x, stride_y, BLOCK_SIZE: tl.constexpr):
    # Only launched when n_cols > BLOCK_SIZE, so every lane sees a real value in the first
    # chunk and the running maxima are finite from then on.
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * stride_x
    y_row = y_ptr + row * stride_y
    run_max = tl.full([BLOCK_SIZE], -float("inf"), dtype=tl.float32)
    run_sum = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
    for start in range(0, n_cols, BLOCK_SIZE):
        cols = start + tl.arange(0, BLOCK_SIZE)
        x = tl.load(x_row + cols, mask=cols < n_cols, other=-float("inf"))
        new_max = tl.maximum(run_max, x)
        run_sum = run_sum * tl.exp(run_max - new_max) + tl.exp(x - new_max)
        run_max = new_max
    row_max = tl.max(run_max, axis=0)
    den = tl.sum(run_sum * tl.exp(run_max - row_max), axis=0)
    for start in range(0, n_cols, BLOCK_SIZE):
        cols = start + tl.arange(0, BLOCK_SIZE)
        mask = cols < n_cols
        x = tl.load(x_row + cols, mask=mask, other=-float("inf"))
        tl.store(y_row + cols, tl.exp(x - row_max) / den, mask=mask)


def _num_warps(block: int) -> int:
    if block >= 4096:
        return 8
    if block >= 1024:
        return 8
    return 4


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n_cols = x.shape[-1]
        x2 = x.contiguous().reshape(-1, n_cols)
        y = torch.empty_like(x2)
        grid = (x2.shape[0],)
        # Under the interpreter the limit is small so that the tests reach both kernels.
        max_fused = 128 if os.environ.get("TRITON_INTERPRET") == "1" else 8192
        block = triton.next_power_of_2(n_cols)
        if block <= max_fused:
            kernel = _softmax_row_kernel
        else:
            kernel = _softmax_looped_kernel
            block = max_fused // 2
        kernel[grid](
            x2, y, n_cols, x2.stride(0), y.stride(0), BLOCK_SIZE=block, num_warps=_num_warps(block)
        )
        return y.reshape(x.shape)
