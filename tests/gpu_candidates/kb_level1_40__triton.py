"""Triton candidate for kernelbench:level1/40 (LayerNorm): LayerNorm over the last three dims
(64, 256, 256) of x of shape (16, 64, 256, 256), affine, eps 1e-5, fp32.

Only 16 rows of 4M elements each, so one program per row would leave the GPU idle. Three
kernels instead:
1. partial statistics: one program per (row, chunk of CHUNK elements) holds its chunk in
   registers and writes the chunk's mean and sum of squared deviations around that mean;
2. finalize: one program per row combines the chunks exactly (the parallel-variance
   formula: mean = sum(n_c * mean_c) / n, M2 = sum(m2_c + n_c * (mean_c - mean)^2));
3. apply: one program per (row, block of columns) writes (x - mean) * rstd * w + b.
"""

import os

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _ln_partial_kernel(x_ptr, pmean_ptr, pm2_ptr, n, chunks, CHUNK: tl.constexpr):
    pid = tl.program_id(0)
    row = pid // chunks
    chunk = pid % chunks
    start = chunk.to(tl.int64) * CHUNK
    offs = start + tl.arange(0, CHUNK)
    mask = offs < n
    x = tl.load(x_ptr + row.to(tl.int64) * n + offs, mask=mask, other=0.0)
    count = tl.minimum(n - start, CHUNK).to(tl.float32)
    mean = tl.sum(x, axis=0) / count
    d = tl.where(mask, x - mean, 0.0)
    m2 = tl.sum(d * d, axis=0)
    tl.store(pmean_ptr + pid, mean)
    tl.store(pm2_ptr + pid, m2)


@triton.jit
def _ln_finalize_kernel(
    pmean_ptr,
    pm2_ptr,
    mean_ptr,
    rstd_ptr,
    n,
    chunks,
    eps,
    CHUNK: tl.constexpr,
    CBLOCK: tl.constexpr,
):
    row = tl.program_id(0)
    base = row.to(tl.int64) * chunks
    acc = tl.zeros([CBLOCK], dtype=tl.float32)
    for c0 in range(0, chunks, CBLOCK):
        c = c0 + tl.arange(0, CBLOCK)
        ok = c < chunks
        count = tl.minimum(n - c.to(tl.int64) * CHUNK, CHUNK).to(tl.float32)
        pm = tl.load(pmean_ptr + base + c, mask=ok, other=0.0)
        acc += tl.where(ok, count * pm, 0.0)
    mean = tl.sum(acc, axis=0) / n
    acc = tl.zeros([CBLOCK], dtype=tl.float32)
    for c0 in range(0, chunks, CBLOCK):
        c = c0 + tl.arange(0, CBLOCK)
        ok = c < chunks
        count = tl.minimum(n - c.to(tl.int64) * CHUNK, CHUNK).to(tl.float32)
        pm = tl.load(pmean_ptr + base + c, mask=ok, other=0.0)
        pv = tl.load(pm2_ptr + base + c, mask=ok, other=0.0)
        d = pm - mean
        acc += tl.where(ok, pv + count * d * d, 0.0)
    var = tl.sum(acc, axis=0) / n
    tl.store(mean_ptr + row, mean)
    tl.store(rstd_ptr + row, 1.0 / tl.sqrt(var + eps))


@triton.jit
def _ln_apply_kernel(
    x_ptr, w_ptr, b_ptr, mean_ptr, rstd_ptr, y_ptr, n, col_blocks, BLOCK: tl.constexpr
):
    pid = tl.program_id(0)
    row = pid // col_blocks
    cols = (pid % col_blocks).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < n
    base = row.to(tl.int64) * n
    mean = tl.load(mean_ptr + row)
    rstd = tl.load(rstd_ptr + row)
    x = tl.load(x_ptr + base + cols, mask=mask, other=0.0)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0)
    b = tl.load(b_ptr + cols, mask=mask, other=0.0)
    tl.store(y_ptr + base + cols, (x - mean) * rstd * w + b, mask=mask)


def _config() -> tuple[int, int, int]:
    """(CHUNK, CBLOCK, BLOCK)."""
    if os.environ.get("TRITON_INTERPRET") == "1":
        return 64, 16, 64
    return 4096, 1024, 1024


class ModelNew(nn.Module):
    def __init__(self, normalized_shape: tuple):
        super().__init__()
        self.ln = nn.LayerNorm(normalized_shape=normalized_shape)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        weight = self.ln.weight.contiguous()
        bias = self.ln.bias.contiguous()
        n = weight.numel()
        rows = x.numel() // n
        y = torch.empty_like(x)
        chunk, cblock, block = _config()
        chunks = triton.cdiv(n, chunk)
        pmean = torch.empty(rows * chunks, device=x.device, dtype=torch.float32)
        pm2 = torch.empty(rows * chunks, device=x.device, dtype=torch.float32)
        mean = torch.empty(rows, device=x.device, dtype=torch.float32)
        rstd = torch.empty(rows, device=x.device, dtype=torch.float32)
        _ln_partial_kernel[(rows * chunks,)](x, pmean, pm2, n, chunks, CHUNK=chunk, num_warps=8)
        _ln_finalize_kernel[(rows,)](
            pmean, pm2, mean, rstd, n, chunks, float(self.ln.eps), CHUNK=chunk, CBLOCK=cblock
        )
        col_blocks = triton.cdiv(n, block)
        _ln_apply_kernel[(rows * col_blocks,)](
            x, weight, bias, mean, rstd, y, n, col_blocks, BLOCK=block, num_warps=4
        )
        return y
