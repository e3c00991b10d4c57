"""CUDA candidate for kernelbench:level1/88 (MinGPTNewGelu), x of shape (8192, 8192):
y = 0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x^3))), the tanh GELU, in fp32.

A grid-stride elementwise kernel: float4 loads and stores when the buffers are 16-byte
aligned, a scalar loop for the tail (or for everything when they are not).
"""

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

// The reference's operation order: x^3, * 0.044715, + x, * sqrt(2/pi), tanh, + 1, 0.5 * x, *.
__device__ __forceinline__ float newgelu_op(float x) {
  const float k = 0.7978845608028654f;  // sqrt(2 / pi)
  const float inner = k * (x + 0.044715f * (x * x * x));
  return (0.5f * x) * (1.0f + tanhf(inner));
}

__global__ __launch_bounds__(THREADS) void newgelu_kernel(const float* __restrict__ x,
                                                          float* __restrict__ y, int64_t n,
                                                          bool vec4) {
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  const int64_t tid = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  int64_t done = 0;
  if (vec4) {
    const int64_t n4 = n / 4;
    const float4* x4 = reinterpret_cast<const float4*>(x);
    float4* y4 = reinterpret_cast<float4*>(y);
    for (int64_t i = tid; i < n4; i += stride) {
      const float4 v = x4[i];
      float4 o;
      o.x = newgelu_op(v.x);
      o.y = newgelu_op(v.y);
      o.z = newgelu_op(v.z);
      o.w = newgelu_op(v.w);
      y4[i] = o;
    }
    done = n4 * 4;
  }
  for (int64_t i = done + tid; i < n; i += stride) y[i] = newgelu_op(x[i]);
}

torch::Tensor newgelu_forward(torch::Tensor x) {
  TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kFloat32, "x must be CUDA float32");
  TORCH_CHECK(x.is_contiguous(), "x must be contiguous");
  const c10::cuda::CUDAGuard guard(x.device());
  auto y = torch::empty_like(x);
  const int64_t n = x.numel();
  if (n == 0) return y;
  const bool vec4 = (reinterpret_cast<uintptr_t>(x.data_ptr<float>()) % 16 == 0) &&
                    (reinterpret_cast<uintptr_t>(y.data_ptr<float>()) % 16 == 0);
  const int64_t work = vec4 ? (n + 3) / 4 : n;
  const int64_t blocks = std::min<int64_t>((work + THREADS - 1) / THREADS, 65536);
  newgelu_kernel<<<(unsigned)blocks, THREADS, 0, c10::cuda::getCurrentCUDAStream()>>>(
      x.data_ptr<float>(), y.data_ptr<float>(), n, vec4);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return y;
}
"""

_CPP_SRC = "torch::Tensor newgelu_forward(torch::Tensor x);"

_ext = load_inline(
    name="evo_gpu_cand_kb_level1_88",
    cpp_sources=_CPP_SRC,
    cuda_sources=_CUDA_SRC,
    functions=["newgelu_forward"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return _ext.newgelu_forward(x.contiguous())
