"""CUDA C++: `__global__` kernels built with torch.utils.cpp_extension.load_inline."""

from backends.base import Backend

CUDA = Backend(
    name="cuda",
    description="Python module that builds CUDA C++ with load_inline and calls it from forward",
    required=(
        (r"__global__", "a __global__ CUDA kernel"),
        (r"\bload_inline\b", "a load_inline build"),
    ),
    banned_precision=(
        (r"\ballow_tf32\b", "TF32 flag"),
        (r"set_float32_matmul_precision", "matmul precision flag"),
        (r"use_fast_math|-ffast-math|--fmad", "fast-math flag"),
        (r"\b__half\b|\bhalf2?\b|__nv_bfloat16|\bfloat16\b|\bbfloat16\b", "half-precision type"),
        (r"\bwmma\b|\bmma\.sync\b|\bwgmma\b|cublas", "tensor-core or library matmul"),
    ),
    needs_cuda_build=True,
    facts={
        "build": "load_inline(name, cpp_sources, cuda_sources, functions, extra_cuda_cflags)",
        "arch": "the harness sets TORCH_CUDA_ARCH_LIST to the device's compute capability",
    },
)
