"""The launch trace as the judge reads it (fitness.trace), and the neutered source (neuter)."""

from pathlib import Path

from fitness.neuter import neuter
from fitness.trace import compute_ops, host_reads

ROOT = Path(__file__).resolve().parents[1]
HARMLESS = [
    "aten::empty", "aten::empty_like", "aten::empty_strided", "aten::new_empty", "aten::zero_",
    "aten::as_strided", "aten::view", "aten::_unsafe_view", "aten::reshape", "aten::contiguous",
    "aten::clone", "aten::copy_", "aten::_to_copy", "aten::to", "aten::detach", "aten::select",
    "aten::slice", "aten::unsqueeze", "aten::expand", "aten::permute", "aten::t",
    "aten::lift_fresh", "aten::resize_", "aten::split_with_sizes", "aten::fill_",
]  # fmt: skip


def test_allocation_views_and_copies_are_not_compute():
    assert compute_ops(HARMLESS, allow_library_gemm=False) == []
    assert host_reads(HARMLESS) == []


def test_compute_is_named_in_any_spelling():
    """In-place, private and fused ops (a cuBLASLt GEMM with its epilogue, through
    torch.ops.aten._addmm_activation) are PyTorch compute like their plain forms."""
    ops = ["aten::addmm_", "aten::_addmm_activation", "aten::cudnn_convolution_relu",
           "aten::mm", "aten::_softmax", "aten::relu_"]  # fmt: skip
    assert compute_ops(ops, allow_library_gemm=False) == sorted(
        o.removeprefix("aten::") for o in ops
    )
    allowed = compute_ops(ops, allow_library_gemm=True)
    assert "mm" not in allowed and "_addmm_activation" in allowed  # an epilogue is not a GEMM


def test_reading_values_on_the_host_is_named():
    assert host_reads(["aten::item", "aten::_local_scalar_dense"]) == [
        "_local_scalar_dense",
        "item",
    ]
    assert host_reads(["aten::resolve_conj", "aten::resolve_neg"])  # what .numpy() leaves


def test_neutered_triton_kernels_do_nothing_and_the_rest_stays():
    seed = (ROOT / "experiments/workloads/seeds/softmax_triton.py").read_text()
    out = neuter(seed, "triton")
    assert out is not None and out.count("@triton.jit") == seed.count("@triton.jit")
    assert "tl.load" not in out and "tl.store" not in out
    assert "class ModelNew" in out
    assert neuter("import torch\n\nclass ModelNew:\n    pass\n", "triton") is None


def test_neutered_cuda_kernels_have_empty_bodies():
    src = (ROOT / "tests/gpu_candidates/builtin_softmax__cuda.py").read_text()
    out = neuter(src, "cuda")
    assert out is not None and "__global__" in out
    body = out[out.index("__global__") :]
    assert body[: body.index("}") + 1].rstrip().endswith("{ }")
    assert "softmax_rows_forward" in out  # the host function that launches it is kept
