"""CUDA candidate for builtin:row_sum: the sum of each row of a 2-D fp32 tensor, shape (ROWS,).

One warp per row (8 rows per block of 256 threads): each lane sums a strided slice of the
row with coalesced loads, then the warp combines the lanes with shuffles.
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
constexpr int ROWS_PER_BLOCK = THREADS / 32;

__global__ __launch_bounds__(THREADS) void row_sum_warp_kernel(const float* __restrict__ x,
                                                               float* __restrict__ y,
                                                               int64_t n_rows, int64_t n_cols) {
  const int lane = threadIdx.x & 31;
  const int64_t row = (int64_t)blockIdx.x * ROWS_PER_BLOCK + (threadIdx.x >> 5);
  if (row >= n_rows) return;  // whole warps leave together
  const float* xr = x + row * n_cols;
  float s = 0.0f;
  for (int64_t c = lane; c < n_cols; c += 32) s += xr[c];
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  if (lane == 0) y[row] = s;
}

torch::Tensor row_sum_forward(torch::Tensor x) {
  TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kFloat32, "x must be CUDA float32");
  TORCH_CHECK(x.is_contiguous() && x.dim() == 2, "x must be a contiguous 2-D tensor");
  const c10::cuda::CUDAGuard guard(x.device());
  const int64_t rows = x.size(0);
  const int64_t cols = x.size(1);
  auto y = torch::empty({rows}, x.options());
  if (rows == 0) return y;
  const int64_t blocks = (rows + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK;
  TORCH_CHECK(blocks <= 2147483647LL, "too many rows");
  row_sum_warp_kernel<<<(unsigned)blocks, THREADS, 0, c10::cuda::getCurrentCUDAStream()>>>(
      x.data_ptr<float>(), y.data_ptr<float>(), rows, cols);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return y;
}
"""

_CPP_SRC = "torch::Tensor row_sum_forward(torch::Tensor x);"

_ext = load_inline(
    name="evo_gpu_cand_builtin_row_sum",
    cpp_sources=_CPP_SRC,
    cuda_sources=_CUDA_SRC,
    functions=["row_sum_forward"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n_cols = x.shape[-1]
        x2 = x.contiguous().reshape(-1, n_cols)
        return _ext.row_sum_forward(x2).reshape(x.shape[:-1])
