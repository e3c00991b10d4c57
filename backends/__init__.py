"""Programming models a candidate can be written in: what it must contain, what it may not."""

from backends.base import Backend
from backends.cuda import CUDA
from backends.triton import TRITON

BACKENDS: dict[str, Backend] = {b.name: b for b in (TRITON, CUDA)}


def get_backend(name: str) -> Backend:
    """The backend called `name`; KeyError lists the known ones."""
    try:
        return BACKENDS[name]
    except KeyError:
        raise KeyError(f"unknown backend {name!r}; known: {', '.join(sorted(BACKENDS))}") from None


__all__ = ["BACKENDS", "Backend", "get_backend"]
