"""Reading a candidate's launch trace in the judge: which aten ops and kernels ran in forward.

The trace is recorded inside the candidate's process, so it is a report the candidate could
change: it may convict (an aten compute op inside forward is a PyTorch fallback) but it never
clears a candidate alone. The names are filtered here, in the judge, so a candidate that
rewrites the harness's data in its own process changes nothing that decides.
"""

from __future__ import annotations

from fitness.guardrails import LIBRARY_GEMMS

# aten ops that compute; one of them inside the candidate's forward is a PyTorch fallback.
ATEN_COMPUTE = frozenset(
    """mm addmm bmm baddbmm matmul linear conv1d conv2d conv3d convolution _convolution
    cudnn_convolution add sub mul div relu gelu silu sigmoid tanh exp log softmax _softmax
    log_softmax _log_softmax layer_norm native_layer_norm group_norm native_group_norm
    batch_norm native_batch_norm sum mean amax amin max min norm linalg_vector_norm
    cumsum addcmul where clamp pow sqrt rsqrt erf einsum scaled_dot_product_attention
    _scaled_dot_product_flash_attention _scaled_dot_product_efficient_attention
    argmax argmin sort topk cumprod cummax cummin prod var std var_mean std_mean logsumexp
    softplus hardtanh elu leaky_relu mish hardswish hardsigmoid selu celu dot mv addmv
    conv_transpose1d conv_transpose2d conv_transpose3d max_pool1d max_pool2d max_pool3d
    max_pool2d_with_indices max_pool3d_with_indices avg_pool1d avg_pool2d avg_pool3d
    adaptive_avg_pool2d adaptive_max_pool2d instance_norm mse_loss l1_loss smooth_l1_loss
    huber_loss nll_loss cross_entropy_loss kl_div cosine_similarity triplet_margin_loss
    hinge_embedding_loss""".split()
)


# aten ops that move tensor values to the host inside forward: element reads (`float(t)`,
# `.item()`, iterating) and the export that `.numpy()` makes. Host code then computes what the
# candidate's kernel only copies, which a neutered replay cannot see.
HOST_READS = frozenset({"item", "_local_scalar_dense", "resolve_conj", "resolve_neg"})


def host_reads(aten_ops) -> list[str]:
    """The ops among a trace's aten op names that read tensor values on the host."""
    names = aten_ops if isinstance(aten_ops, list) else []
    return sorted({n.removeprefix("aten::") for n in names if isinstance(n, str)} & HOST_READS)


def compute_ops(aten_ops, allow_library_gemm: bool) -> list[str]:
    """The compute ops among a trace's aten op names: a name, or any `_`-separated word of it,
    that names a compute op, so in-place (`add_`), private (`_mm`) and fused spellings
    (`_addmm_activation`, `cudnn_convolution_relu`) all count; library GEMMs left out where
    the experiment allows them (a fused GEMM epilogue is not a GEMM)."""
    found = []
    for name in aten_ops if isinstance(aten_ops, list) else []:
        if not isinstance(name, str):
            continue
        stem = name.removeprefix("aten::").split(".")[0]
        bare = stem.strip("_")
        words = {w for w in bare.split("_") if w} | {bare, bare.removesuffix("_out")}
        if not words & ATEN_COMPUTE:
            continue
        if allow_library_gemm and bare in LIBRARY_GEMMS:
            continue
        found.append(stem)
    return sorted(set(found))


def own_launches(trace: dict, names) -> dict[str, int]:
    """The launch counter's counts of the candidate's own kernels (by exact name)."""
    launches = trace.get("launches") if isinstance(trace.get("launches"), dict) else {}
    return {k: c for k, c in launches.items() if k in names and isinstance(c, int)}


def own_kernel_ran(
    trace: dict, names, own: dict, device: str, backend: str, library_gemm: bool
) -> bool:
    """Whether a kernel the candidate defines ran in its forward. On a GPU the profiler's
    kernel names must contain one of the candidate's; where library GEMMs are allowed, a
    Triton candidate must also have launched one of its own by exact name (the launch
    counter), since a cuBLAS kernel's name may contain a short one such as `gemm`."""
    if device != "cuda":
        return any(c > 0 for c in own.values())
    kernels = trace.get("kernels") if isinstance(trace.get("kernels"), list) else []
    ran = any(any(n in str(k) for n in names) for k in kernels)
    if ran and library_gemm and backend == "triton":
        return any(c > 0 for c in own.values())
    return ran
