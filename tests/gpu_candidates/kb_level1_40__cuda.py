"""CUDA candidate for kernelbench:level1/40 (LayerNorm): LayerNorm over the last three dims
(64, 256, 256) of x of shape (16, 64, 256, 256), affine, eps 1e-5, fp32.

Each row is 4M elements but there are only 16 rows, so one block per row would leave the
GPU idle. Three kernels instead:
1. partial statistics: one block per (row, chunk of 8192 elements) computes the chunk's mean
   and its sum of squared deviations around that mean (two passes over the chunk);
2. finalize: one block per row combines the chunks exactly (the parallel-variance formula,
   in double) into the row's mean and 1 / sqrt(var + eps);
3. apply: a grid-stride elementwise kernel writes (x - mean) * rstd * weight + bias, with
   float4 accesses when the sizes and alignments allow.
"""

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

constexpr int THREADS = 256;
constexpr int64_t CHUNK = 8192;

__device__ __forceinline__ int64_t kbln_chunk_len(int64_t n, int64_t chunk) {
  const int64_t left = n - chunk * CHUNK;
  return left < CHUNK ? left : CHUNK;
}

template <typename T>
__device__ __forceinline__ T kbln_warp_sum(T v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Block-wide sum; every thread gets the result. scratch holds 32 values of T.
template <typename T>
__device__ T kbln_block_sum(T v, T* scratch) {
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int nwarps = blockDim.x >> 5;
  v = kbln_warp_sum(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  if (warp == 0) {
    T w = lane < nwarps ? scratch[lane] : T(0);
    w = kbln_warp_sum(w);
    if (lane == 0) scratch[0] = w;
  }
  __syncthreads();
  return scratch[0];
}

// 1. Per (row, chunk): mean of the chunk and sum of squared deviations around it.
__global__ __launch_bounds__(THREADS) void kbln_partial_kernel(const float* __restrict__ x,
                                                               float* __restrict__ pmean,
                                                               float* __restrict__ pm2,
                                                               int64_t n, int64_t chunks) {
  __shared__ float scratch[32];
  const int64_t blk = blockIdx.x;
  const int64_t row = blk / chunks;
  const int64_t chunk = blk - row * chunks;
  const int64_t start = chunk * CHUNK;
  const int64_t len = kbln_chunk_len(n, chunk);
  const float* xc = x + row * n + start;

  float s = 0.0f;
  for (int64_t i = threadIdx.x; i < len; i += blockDim.x) s += xc[i];
  const float mean = kbln_block_sum(s, scratch) / (float)len;

  float ss = 0.0f;
  for (int64_t i = threadIdx.x; i < len; i += blockDim.x) {
    const float d = xc[i] - mean;
    ss += d * d;
  }
  const float m2 = kbln_block_sum(ss, scratch);
  if (threadIdx.x == 0) {
    pmean[blk] = mean;
    pm2[blk] = m2;
  }
}

// 2. Per row: mean = sum(n_c * mean_c) / n; M2 = sum(m2_c + n_c * (mean_c - mean)^2).
__global__ __launch_bounds__(THREADS) void kbln_finalize_kernel(const float* __restrict__ pmean,
                                                                const float* __restrict__ pm2,
                                                                float* __restrict__ mean_out,
                                                                float* __restrict__ rstd_out,
                                                                int64_t n, int64_t chunks,
                                                                float eps) {
  __shared__ double scratch[32];
  const int64_t row = blockIdx.x;
  const float* pm = pmean + row * chunks;
  const float* pv = pm2 + row * chunks;

  double s = 0.0;
  for (int64_t c = threadIdx.x; c < chunks; c += blockDim.x) {
    const double cnt = (double)kbln_chunk_len(n, c);
    s += cnt * (double)pm[c];
  }
  const double mean = kbln_block_sum(s, scratch) / (double)n;

  double m2 = 0.0;
  for (int64_t c = threadIdx.x; c < chunks; c += blockDim.x) {
    const double cnt = (double)kbln_chunk_len(n, c);
    const double d = (double)pm[c] - mean;
    m2 += (double)pv[c] + cnt * d * d;
  }
  m2 = kbln_block_sum(m2, scratch);
  if (threadIdx.x == 0) {
    mean_out[row] = (float)mean;
    rstd_out[row] = (float)(1.0 / sqrt(m2 / (double)n + (double)eps));
  }
}

// 3. y = (x - mean[row]) * rstd[row] * w[col] + b[col] over all rows * n elements.
__global__ __launch_bounds__(THREADS) void kbln_apply_kernel(
    const float* __restrict__ x, const float* __restrict__ w, const float* __restrict__ b,
    const float* __restrict__ mean, const float* __restrict__ rstd, float* __restrict__ y,
    int64_t total, int64_t n, bool vec4) {
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  const int64_t tid = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (vec4) {  // n % 4 == 0, so a float4 never straddles two rows
    const int64_t total4 = total / 4;
    for (int64_t i = tid; i < total4; i += stride) {
      const int64_t e = i * 4;
      const int64_t row = e / n;
      const int64_t col = e - row * n;
      const float m = mean[row];
      const float r = rstd[row];
      const float4 xv = reinterpret_cast<const float4*>(x)[i];
      const float4 wv = *reinterpret_cast<const float4*>(w + col);
      const float4 bv = *reinterpret_cast<const float4*>(b + col);
      float4 o;
      o.x = (xv.x - m) * r * wv.x + bv.x;
      o.y = (xv.y - m) * r * wv.y + bv.y;
      o.z = (xv.z - m) * r * wv.z + bv.z;
      o.w = (xv.w - m) * r * wv.w + bv.w;
      reinterpret_cast<float4*>(y)[i] = o;
    }
  } else {
    for (int64_t e = tid; e < total; e += stride) {
      const int64_t row = e / n;
      const int64_t col = e - row * n;
      y[e] = (x[e] - mean[row]) * rstd[row] * w[col] + b[col];
    }
  }
}

static void kbln_check(const torch::Tensor& t, const char* what) {
  TORCH_CHECK(t.is_cuda(), what, " must be a CUDA tensor");
  TORCH_CHECK(t.scalar_type() == torch::kFloat32, what, " must be float32");
  TORCH_CHECK(t.is_contiguous(), what, " must be contiguous");
}

static bool kbln_aligned(const float* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// x: contiguous, its trailing dims hold n = w.numel() elements per row.
torch::Tensor layernorm_big_forward(torch::Tensor x, torch::Tensor w, torch::Tensor b,
                                    double eps) {
  kbln_check(x, "x");
  kbln_check(w, "weight");
  kbln_check(b, "bias");
  const int64_t n = w.numel();
  TORCH_CHECK(b.numel() == n, "bias and weight sizes differ");
  TORCH_CHECK(n > 0 && x.numel() % n == 0, "x does not end in the normalized shape");
  const int64_t rows = x.numel() / n;
  const c10::cuda::CUDAGuard guard(x.device());
  auto y = torch::empty_like(x);
  if (rows == 0) return y;
  auto stream = c10::cuda::getCurrentCUDAStream();

  const int64_t chunks = (n + CHUNK - 1) / CHUNK;
  TORCH_CHECK(rows * chunks <= 2147483647LL && rows <= 2147483647LL, "too large");
  auto stats = torch::empty({2 * rows * chunks + 2 * rows}, x.options());
  float* pmean = stats.data_ptr<float>();
  float* pm2 = pmean + rows * chunks;
  float* mean = pm2 + rows * chunks;
  float* rstd = mean + rows;

  kbln_partial_kernel<<<(unsigned)(rows * chunks), THREADS, 0, stream>>>(
      x.data_ptr<float>(), pmean, pm2, n, chunks);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  kbln_finalize_kernel<<<(unsigned)rows, THREADS, 0, stream>>>(pmean, pm2, mean, rstd, n, chunks,
                                                                (float)eps);
  C10_CUDA_KERNEL_LAUNCH_CHECK();

  const int64_t total = rows * n;
  const bool vec4 = n % 4 == 0 && kbln_aligned(x.data_ptr<float>()) &&
                    kbln_aligned(y.data_ptr<float>()) && kbln_aligned(w.data_ptr<float>()) &&
                    kbln_aligned(b.data_ptr<float>());
  const int64_t work = vec4 ? total / 4 : total;
  const int64_t blocks = std::max<int64_t>(
      1, std::min<int64_t>((work + THREADS - 1) / THREADS, 65536));
  kbln_apply_kernel<<<(unsigned)blocks, THREADS, 0, stream>>>(
      x.data_ptr<float>(), w.data_ptr<float>(), b.data_ptr<float>(), mean, rstd,
      y.data_ptr<float>(), total, n, vec4);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return y;
}
"""

_CPP_SRC = (
    "torch::Tensor layernorm_big_forward(torch::Tensor x, torch::Tensor w, torch::Tensor b, "
    "double eps);"
)

_ext = load_inline(
    name="evo_gpu_cand_kb_level1_40",
    cpp_sources=_CPP_SRC,
    cuda_sources=_CUDA_SRC,
    functions=["layernorm_big_forward"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, normalized_shape: tuple):
        super().__init__()
        self.ln = nn.LayerNorm(normalized_shape=normalized_shape)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _ext.layernorm_big_forward(
            x.contiguous(),
            self.ln.weight.contiguous(),
            self.ln.bias.contiguous(),
            float(self.ln.eps),
        )
