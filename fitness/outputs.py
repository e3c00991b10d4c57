"""A child's outputs as the judge reads them: what it claims of them, the reference's bounds
rebuilt from its message, the fixed-tolerance rule, and the verdict exception."""

from __future__ import annotations

from fitness import channel
from fitness.channel import DTYPES
from fitness.results import Status
from fitness.tolerance import Bound, Check, fixed_bound
from fitness.tolerance import check as within_bounds


class Verdict(Exception):
    """Raised inside the protocol to end it with a verdict."""

    def __init__(self, status: Status, reason: str, caught_by: str = "", log: str = ""):
        super().__init__(reason)
        self.status, self.reason, self.caught_by, self.log = status, reason, caught_by, log


def compare(outs, refs, atol: float, rtol: float) -> Check:
    """The fixed rule |out - ref| <= atol + rtol * |ref| elementwise, NaN/Inf only where the
    reference has the same, checked as any bound is (fitness.tolerance.check). For
    experiments that set their own atol and rtol."""
    got = within_bounds(outs, [fixed_bound(r, atol, rtol) for r in refs])
    return got._replace(reason=f"{got.reason} (atol={atol:g} rtol={rtol:g})") if got.reason else got


def meta_problem(metas: list, expected: list) -> str:
    """What is wrong with the outputs a child claims, against the (dtype, shape) expected
    ('' if nothing): their number, shapes and dtypes."""
    if len(metas) != len(expected):
        return f"returned {len(metas)} output tensors, expected {len(expected)}"
    for k, (meta, (want_dtype, want_shape)) in enumerate(zip(metas, expected)):
        tag = f"output {k}" if len(expected) > 1 else "output"
        dtype, shape = channel.meta_of(meta)
        if shape is None or tuple(shape) != tuple(want_shape):
            got = "?" if shape is None else tuple(shape)
            return f"{tag} has shape {got}, expected {tuple(want_shape)}"
        if dtype != want_dtype:
            return f"{tag} has dtype {dtype}, expected {want_dtype}"
    return ""


def bounds_from_message(fields: dict, tensors: list) -> list[Bound]:
    """The reference child's bounds (fitness.tolerance), rebuilt from its message: a center,
    and an allowed error unless the output is compared exactly."""
    out, it = [], iter(tensors)
    for item in fields["layout"]:
        center = next(it)
        allowed = None if item["exact"] else next(it)
        dtype = DTYPES[item["dtype"]]
        out.append(Bound(center, dtype, allowed, fallback=item.get("note", "")))
    return out
