"""Triton candidate for kernelbench:level2/76 (Gemm_Add_ReLU): relu(x @ W^T + bias) with
x (1024, 8192) and W (8192, 8192), exact fp32 (tl.dot with input_precision="ieee").

Matmul-tutorial tiling (128x128 tiles, BLOCK_K=32, GROUP_M=8) that reads nn.Linear's weight
through its strides as W^T; the bias add and ReLU are fused into the epilogue.
"""

import os

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _gemm_add_relu_kernel(
    x_ptr,
    w_ptr,
    bias_ptr,
    y_ptr,
    M,
    N,
    K,
    stride_xm,
    stride_xk,
    stride_wn,
    stride_wk,
    stride_ym,
    stride_yn,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
):
    pid = tl.program_id(0)
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    per_group = GROUP_M * tiles_n
    group = pid // per_group
    first_m = group * GROUP_M
    rows_in_group = tl.minimum(tiles_m - first_m, GROUP_M)
    pid_m = first_m + (pid % per_group) % rows_in_group
    pid_n = (pid % per_group) // rows_in_group

    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    x_ptrs = x_ptr + rm[:, None].to(tl.int64) * stride_xm + rk[None, :] * stride_xk
    w_ptrs = w_ptr + rn[None, :].to(tl.int64) * stride_wn + rk[:, None] * stride_wk
    m_ok = rm[:, None] < M
    n_ok = rn[None, :] < N

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        k_left = K - k0
        a = tl.load(x_ptrs, mask=m_ok & (rk[None, :] < k_left), other=0.0)
        b = tl.load(w_ptrs, mask=(rk[:, None] < k_left) & n_ok, other=0.0)
        acc = tl.dot(a, b, acc, input_precision="ieee")
        x_ptrs += BLOCK_K * stride_xk
        w_ptrs += BLOCK_K * stride_wk

    bias = tl.load(bias_ptr + rn, mask=rn < N, other=0.0)
    out = tl.maximum(acc + bias[None, :], 0.0)
    y_ptrs = y_ptr + rm[:, None].to(tl.int64) * stride_ym + rn[None, :] * stride_yn
    tl.store(y_ptrs, out, mask=m_ok & n_ok)


def _config() -> dict:
    if os.environ.get("TRITON_INTERPRET") == "1":
        return dict(BLOCK_M=16, BLOCK_N=16, BLOCK_K=16, GROUP_M=2, num_warps=4, num_stages=1)
    return dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=32, GROUP_M=8, num_warps=8, num_stages=3)


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, bias_shape):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features, bias=False)
        self.bias = nn.Parameter(torch.randn(bias_shape))

    def forward(self, x):
        x2 = x.reshape(-1, x.shape[-1])
        weight = self.gemm.weight
        bias = self.bias.reshape(-1).contiguous()
        M, K = x2.shape
        N = weight.shape[0]
        y = torch.empty((M, N), device=x.device, dtype=x.dtype)
        cfg = _config()
        grid = (triton.cdiv(M, cfg["BLOCK_M"]) * triton.cdiv(N, cfg["BLOCK_N"]),)
        _gemm_add_relu_kernel[grid](
            x2,
            weight,
            bias,
            y,
            M,
            N,
            K,
            x2.stride(0),
            x2.stride(1),
            weight.stride(0),
            weight.stride(1),
            y.stride(0),
            y.stride(1),
            **cfg,
        )
        return y.reshape(*x.shape[:-1], N)
