"""Triton candidate for kernelbench:level1/88 (MinGPTNewGelu), x of shape (8192, 8192):
y = 0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x^3))), the tanh GELU, in fp32.

A 1-D grid of BLOCK_SIZE-element programs (vector-add tutorial layout). tanh is written with
exp (tanh(u) = sign(u) * (1 - e) / (1 + e), e = exp(-2|u|)), which never overflows and also
runs under the interpreter.
"""

import os

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _new_gelu_kernel(x_ptr, y_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)
    offs = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offs < n_elements
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    inner = 0.7978845608028654 * (x + 0.044715 * (x * x * x))
    e = tl.exp(-2.0 * tl.abs(inner))
    t = (1.0 - e) / (1.0 + e)
    t = tl.where(inner < 0.0, -t, t)
    tl.store(y_ptr + offs, (0.5 * x) * (1.0 + t), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        block = 128 if os.environ.get("TRITON_INTERPRET") == "1" else 1024
        grid = (triton.cdiv(n, block),)
        _new_gelu_kernel[grid](x, y, n, BLOCK_SIZE=block, num_warps=4)
        return y
