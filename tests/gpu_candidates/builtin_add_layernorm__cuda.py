"""CUDA candidate for builtin:add_layernorm: y = LayerNorm(x + residual) over the last dim, fp32.

One block of 256 threads per row, three passes over the row of x + residual (mean, variance
around the mean, then normalise with the affine weight and bias). The sum x + residual is
recomputed in each pass rather than stored; block reductions use warp shuffles.
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

__device__ __forceinline__ float aln_warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Block-wide sum; every thread gets the result.
__device__ float aln_block_sum(float v, float* scratch) {
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int nwarps = blockDim.x >> 5;
  v = aln_warp_sum(v);
  __syncthreads();  // scratch may still be read by a previous reduction
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  if (warp == 0) {
    float w = lane < nwarps ? scratch[lane] : 0.0f;
    w = aln_warp_sum(w);
    if (lane == 0) scratch[0] = w;
  }
  __syncthreads();
  return scratch[0];
}

__global__ __launch_bounds__(THREADS) void add_layernorm_rows_kernel(
    const float* __restrict__ x, const float* __restrict__ r, const float* __restrict__ w,
    const float* __restrict__ b, float* __restrict__ y, int64_t n_cols, float eps) {
  __shared__ float scratch[32];
  const int64_t off = (int64_t)blockIdx.x * n_cols;
  const float* xr = x + off;
  const float* rr = r + off;
  float* yr = y + off;

  float s = 0.0f;
  for (int64_t c = threadIdx.x; c < n_cols; c += blockDim.x) s += xr[c] + rr[c];
  const float mean = aln_block_sum(s, scratch) / (float)n_cols;

  float ss = 0.0f;
  for (int64_t c = threadIdx.x; c < n_cols; c += blockDim.x) {
    const float d = (xr[c] + rr[c]) - mean;
    ss += d * d;
  }
  const float var = aln_block_sum(ss, scratch) / (float)n_cols;
  const float rstd = 1.0f / sqrtf(var + eps);

  for (int64_t c = threadIdx.x; c < n_cols; c += blockDim.x) {
    const float v = xr[c] + rr[c];
    yr[c] = (v - mean) * rstd * w[c] + b[c];
  }
}

static void aln_check(const torch::Tensor& t, const char* what) {
  TORCH_CHECK(t.is_cuda(), what, " must be a CUDA tensor");
  TORCH_CHECK(t.scalar_type() == torch::kFloat32, what, " must be float32");
  TORCH_CHECK(t.is_contiguous(), what, " must be contiguous");
}

torch::Tensor add_layernorm_rows_forward(torch::Tensor x, torch::Tensor r, torch::Tensor w,
                                         torch::Tensor b, double eps) {
  aln_check(x, "x");
  aln_check(r, "residual");
  aln_check(w, "weight");
  aln_check(b, "bias");
  TORCH_CHECK(x.dim() == 2 && r.sizes() == x.sizes(), "x and residual must be equal 2-D shapes");
  const int64_t rows = x.size(0);
  const int64_t cols = x.size(1);
  TORCH_CHECK(w.numel() == cols && b.numel() == cols, "weight and bias must have n_cols");
  const c10::cuda::CUDAGuard guard(x.device());
  auto y = torch::empty_like(x);
  if (rows == 0 || cols == 0) return y;
  TORCH_CHECK(rows <= 2147483647LL, "too many rows");
  add_layernorm_rows_kernel<<<(unsigned)rows, THREADS, 0, c10::cuda::getCurrentCUDAStream()>>>(
      x.data_ptr<float>(), r.data_ptr<float>(), w.data_ptr<float>(), b.data_ptr<float>(),
      y.data_ptr<float>(), cols, (float)eps);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return y;
}
"""

_CPP_SRC = (
    "torch::Tensor add_layernorm_rows_forward(torch::Tensor x, torch::Tensor r, torch::Tensor w, "
    "torch::Tensor b, double eps);"
)

_ext = load_inline(
    name="evo_gpu_cand_builtin_add_layernorm",
    cpp_sources=_CPP_SRC,
    cuda_sources=_CUDA_SRC,
    functions=["add_layernorm_rows_forward"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, normalized_shape: int, eps: float):
        super().__init__()
        self.norm = nn.LayerNorm(normalized_shape, eps=eps)
        with torch.no_grad():
            self.norm.weight.normal_(1.0, 0.5)
            self.norm.bias.normal_(0.0, 0.5)

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        n_cols = x.shape[-1]
        x2 = x.contiguous().reshape(-1, n_cols)
        r2 = residual.contiguous().reshape(-1, n_cols)
        y = _ext.add_layernorm_rows_forward(
            x2,
            r2,
            self.norm.weight.contiguous(),
            self.norm.bias.contiguous(),
            float(self.norm.eps),
        )
        return y.reshape(x.shape)
