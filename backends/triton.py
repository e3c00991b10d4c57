"""Triton: `@triton.jit` kernels launched from `ModelNew.forward`; runs on the CPU interpreter."""

from backends.base import Backend

TRITON = Backend(
    name="triton",
    description="Python module with @triton.jit kernels launched from ModelNew.forward",
    required=((r"@\s*triton\.jit", "a @triton.jit kernel"),),
    banned_precision=(
        (r"\ballow_tf32\b", "TF32 flag"),
        (r"set_float32_matmul_precision", "matmul precision flag"),
        (r"\b(float16|bfloat16|half)\b", "half-precision type"),
        (r"\bfp16\b|\bbf16\b", "half-precision type"),
        (r"\bfloat8\w*|\bfp8\w*", "fp8 type"),
        (r"input_precision\s*=\s*['\"](tf32|tf32x3)['\"]", "tl.dot with TF32"),
        (r"allow_tf32\s*=\s*True", "tl.dot with TF32"),
    ),
    runs_on_cpu=True,
    facts={
        "launch": "kernel[grid](...) from forward; grid is a tuple or a lambda of meta",
        "interpreter": "TRITON_INTERPRET=1 runs kernels on the CPU (numpy); timings not comparable",
        "fp32 dot": 'tl.dot uses TF32 on fp32 inputs unless input_precision="ieee"',
    },
)
