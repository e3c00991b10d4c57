"""The record that describes one backend to the guardrails, the runner and the prompts."""

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Backend:
    """A programming model for candidates.

    `required` are regexes a candidate's source must match (its own kernel is present);
    `banned_precision` are regexes that mean a lower matmul precision than fp32, banned under
    the strict fp32 policy; `needs_cuda_build` says whether importing compiles a C++ extension.
    """

    name: str
    description: str
    required: tuple[tuple[str, str], ...]
    banned_precision: tuple[tuple[str, str], ...] = ()
    needs_cuda_build: bool = False
    runs_on_cpu: bool = False
    facts: dict[str, str] = field(default_factory=dict)
