"""CUDA candidate for builtin:matmul_bias_relu: relu(x @ W^T + b) in one SGEMM kernel
(128x128 tiles, BK=8, 8x8 fp32 register tiles) with the bias and ReLU in its epilogue."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_CUDA_SRC = r"""
#include <torch/types.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <algorithm>
#include <cstdint>

// relu(acc + bias[col])
__device__ __forceinline__ float mbr_epilogue(float acc, int64_t col, const float* bias,
                                              float p0, float p1) {
  const float v = acc + bias[col];
  return v > 0.0f ? v : 0.0f;
}

// Classic shared-memory SGEMM in plain fp32 FMA. A block of 256 threads computes a
// 128 x 128 tile of C, stepping through K in slices of 8. Each thread accumulates an 8 x 8
// register tile, split into four 4 x 4 quads (rows ty*4 and 64 + ty*4, columns tx*4 and
// 64 + tx*4) so that its shared-memory reads are aligned float4s without bank conflicts.
// The shared tiles are double-buffered: the next K slice is fetched into registers while
// the current one is multiplied. Every global load and store is bounds-checked, so any
// M, N, K (ragged edges included) is handled.
constexpr int BM = 128;
constexpr int BN = 128;
constexpr int BK = 8;
constexpr int THREADS = 256;

// B_IS_NK: B is stored (N, K) row-major (nn.Linear's weight, so C = A @ W^T);
// otherwise B is (K, N) row-major.
template <bool B_IS_NK>
__global__ __launch_bounds__(THREADS, 2) void mbr_sgemm_kernel(
    const float* __restrict__ A, const float* __restrict__ B, const float* __restrict__ bias,
    float* __restrict__ C, int64_t M, int64_t N, int64_t K, float p0, float p1) {
  __shared__ __align__(16) float As[2][BK][BM];
  __shared__ __align__(16) float Bs[2][BK][BN];

  const int tid = threadIdx.x;
  const int tx = tid % 16;
  const int ty = tid / 16;
  const int64_t m0 = (int64_t)blockIdx.y * BM;
  const int64_t n0 = (int64_t)blockIdx.x * BN;

  // A slice (BM x BK): each thread loads 4 consecutive k of one row.
  const int a_r = tid / 2;
  const int a_k = (tid % 2) * 4;
  // B slice (BK x BN): (N, K) storage: 4 consecutive k of one n; (K, N): 4 consecutive n.
  const int b_k = B_IS_NK ? (tid % 2) * 4 : tid / 32;
  const int b_n = B_IS_NK ? tid / 2 : (tid % 32) * 4;

  float ra[4];
  float rb[4];
  float acc[8][8];
#pragma unroll
  for (int i = 0; i < 8; ++i) {
#pragma unroll
    for (int j = 0; j < 8; ++j) acc[i][j] = 0.0f;
  }

  auto load_slice = [&](int64_t k0) {
    const int64_t am = m0 + a_r;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int64_t k = k0 + a_k + i;
      ra[i] = (am < M && k < K) ? A[am * K + k] : 0.0f;
    }
    if constexpr (B_IS_NK) {
      const int64_t bn = n0 + b_n;
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int64_t k = k0 + b_k + i;
        rb[i] = (bn < N && k < K) ? B[bn * K + k] : 0.0f;
      }
    } else {
      const int64_t k = k0 + b_k;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int64_t n = n0 + b_n + j;
        rb[j] = (k < K && n < N) ? B[k * N + n] : 0.0f;
      }
    }
  };
  auto store_slice = [&](int buf) {
#pragma unroll
    for (int i = 0; i < 4; ++i) As[buf][a_k + i][a_r] = ra[i];
    if constexpr (B_IS_NK) {
#pragma unroll
      for (int i = 0; i < 4; ++i) Bs[buf][b_k + i][b_n] = rb[i];
    } else {
#pragma unroll
      for (int j = 0; j < 4; ++j) Bs[buf][b_k][b_n + j] = rb[j];
    }
  };

  const int64_t num_slices = (K + BK - 1) / BK;
  if (num_slices > 0) {
    load_slice(0);
    store_slice(0);
  }
  __syncthreads();

  for (int64_t t = 0; t < num_slices; ++t) {
    const int cur = (int)(t & 1);
    if (t + 1 < num_slices) load_slice((t + 1) * BK);
#pragma unroll
    for (int k = 0; k < BK; ++k) {
      const float4 a0 = *reinterpret_cast<const float4*>(&As[cur][k][ty * 4]);
      const float4 a1 = *reinterpret_cast<const float4*>(&As[cur][k][ty * 4 + 64]);
      const float4 b0 = *reinterpret_cast<const float4*>(&Bs[cur][k][tx * 4]);
      const float4 b1 = *reinterpret_cast<const float4*>(&Bs[cur][k][tx * 4 + 64]);
      const float a[8] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
      const float b[8] = {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w};
#pragma unroll
      for (int i = 0; i < 8; ++i) {
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
      }
    }
    // The other buffer was last read before the previous barrier: safe to overwrite.
    if (t + 1 < num_slices) store_slice(cur ^ 1);
    __syncthreads();
  }

#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const int64_t row = m0 + ty * 4 + (i & 3) + (i >> 2) * 64;
    if (row < M) {
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const int64_t col = n0 + tx * 4 + (j & 3) + (j >> 2) * 64;
        if (col < N) C[row * N + col] = mbr_epilogue(acc[i][j], col, bias, p0, p1);
      }
    }
  }
}

// Launches the SGEMM on the current stream; C must be (M, N) contiguous.
template <bool B_IS_NK>
static void mbr_launch_sgemm(const float* A, const float* B, const float* bias, float* C,
                            int64_t M, int64_t N, int64_t K, float p0, float p1) {
  if (M == 0 || N == 0) return;
  const int64_t grid_x = (N + BN - 1) / BN;
  const int64_t grid_y = (M + BM - 1) / BM;
  TORCH_CHECK(grid_x <= 2147483647LL && grid_y <= 65535LL, "matrix too large for the grid");
  const dim3 grid((unsigned)grid_x, (unsigned)grid_y);
  mbr_sgemm_kernel<B_IS_NK><<<grid, THREADS, 0, c10::cuda::getCurrentCUDAStream()>>>(
      A, B, bias, C, M, N, K, p0, p1);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

static void mbr_check(const torch::Tensor& t, const char* what) {
  TORCH_CHECK(t.is_cuda(), what, " must be a CUDA tensor");
  TORCH_CHECK(t.scalar_type() == torch::kFloat32, what, " must be float32");
  TORCH_CHECK(t.is_contiguous(), what, " must be contiguous");
}

// out = epilogue(x @ w^T): x (M, K), w (N, K), bias (N) or empty.
torch::Tensor linear_bias_relu_forward(torch::Tensor x, torch::Tensor w, torch::Tensor bias,
                   double p0, double p1) {
  mbr_check(x, "x");
  mbr_check(w, "weight");
  TORCH_CHECK(x.dim() == 2 && w.dim() == 2, "x and weight must be 2-D");
  const int64_t M = x.size(0);
  const int64_t K = x.size(1);
  const int64_t N = w.size(0);
  TORCH_CHECK(w.size(1) == K, "weight has ", w.size(1), " columns, expected ", K);
  const float* bias_ptr = nullptr;
  if (bias.numel() > 0) {
    mbr_check(bias, "bias");
    TORCH_CHECK(bias.numel() == N, "bias has ", bias.numel(), " elements, expected ", N);
    bias_ptr = bias.data_ptr<float>();
  }
  const c10::cuda::CUDAGuard guard(x.device());
  auto out = torch::empty({M, N}, x.options());
  mbr_launch_sgemm<true>(x.data_ptr<float>(), w.data_ptr<float>(), bias_ptr,
                         out.data_ptr<float>(), M, N, K, (float)p0, (float)p1);
  return out;
}
"""

_CPP_SRC = (
    "torch::Tensor linear_bias_relu_forward(torch::Tensor x, torch::Tensor w, torch::Tensor bias, "
    "double p0, double p1);"
)

_ext = load_inline(
    name="evo_gpu_cand_builtin_matmul_bias_relu",
    cpp_sources=_CPP_SRC,
    cuda_sources=_CUDA_SRC,
    functions=["linear_bias_relu_forward"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x2 = x.reshape(-1, x.shape[-1]).contiguous()
        weight = self.linear.weight.contiguous()
        y = _ext.linear_bias_relu_forward(x2, weight, self.linear.bias.contiguous(), 0.0, 0.0)
        return y.reshape(*x.shape[:-1], weight.shape[0])
