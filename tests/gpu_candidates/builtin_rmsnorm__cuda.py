"""CUDA candidate for builtin:rmsnorm: y = x / sqrt(mean(x^2) + eps) * weight over the last dim.

One block of 256 threads per row: a sum-of-squares pass reduced with warp shuffles, then a
scaling pass with the weight; fp32 throughout.
"""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_CUDA_SRC = r"""
#include <torch/types.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cstdint>

constexpr int THREADS = 256;

__device__ __forceinline__ float rms_warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Block-wide sum; every thread gets the result.
__device__ float rms_block_sum(float v, float* scratch) {
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int nwarps = blockDim.x >> 5;
  v = rms_warp_sum(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  if (warp == 0) {
    float w = lane < nwarps ? scratch[lane] : 0.0f;
    w = rms_warp_sum(w);
    if (lane == 0) scratch[0] = w;
  }
  __syncthreads();
  return scratch[0];
}

__global__ __launch_bounds__(THREADS) void rmsnorm_rows_kernel(const float* __restrict__ x,
                                                               const float* __restrict__ w,
                                                               float* __restrict__ y,
                                                               int64_t n_cols, float eps) {
  __shared__ float scratch[32];
  const int64_t off = (int64_t)blockIdx.x * n_cols;
  const float* xr = x + off;
  float* yr = y + off;

  float ss = 0.0f;
  for (int64_t c = threadIdx.x; c < n_cols; c += blockDim.x) {
    const float v = xr[c];
    ss += v * v;
  }
  const float mean_sq = rms_block_sum(ss, scratch) / (float)n_cols;
  const float inv_rms = 1.0f / sqrtf(mean_sq + eps);

  for (int64_t c = threadIdx.x; c < n_cols; c += blockDim.x) yr[c] = xr[c] * inv_rms * w[c];
}

torch::Tensor rmsnorm_rows_forward(torch::Tensor x, torch::Tensor w, double eps) {
  TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kFloat32, "x must be CUDA float32");
  TORCH_CHECK(x.is_contiguous() && x.dim() == 2, "x must be a contiguous 2-D tensor");
  const int64_t rows = x.size(0);
  const int64_t cols = x.size(1);
  TORCH_CHECK(w.is_cuda() && w.scalar_type() == torch::kFloat32 && w.is_contiguous() &&
                  w.numel() == cols, "weight must be a contiguous CUDA float32 of n_cols");
  const c10::cuda::CUDAGuard guard(x.device());
  auto y = torch::empty_like(x);
  if (rows == 0 || cols == 0) return y;
  TORCH_CHECK(rows <= 2147483647LL, "too many rows");
  rmsnorm_rows_kernel<<<(unsigned)rows, THREADS, 0, c10::cuda::getCurrentCUDAStream()>>>(
      x.data_ptr<float>(), w.data_ptr<float>(), y.data_ptr<float>(), cols, (float)eps);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return y;
}
"""

_CPP_SRC = "torch::Tensor rmsnorm_rows_forward(torch::Tensor x, torch::Tensor w, double eps);"

_ext = load_inline(
    name="evo_gpu_cand_builtin_rmsnorm",
    cpp_sources=_CPP_SRC,
    cuda_sources=_CUDA_SRC,
    functions=["rmsnorm_rows_forward"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(1.0 + 0.5 * torch.randn(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n_cols = x.shape[-1]
        x2 = x.contiguous().reshape(-1, n_cols)
        y = _ext.rmsnorm_rows_forward(x2, self.weight.contiguous(), float(self.eps))
        return y.reshape(x.shape)
