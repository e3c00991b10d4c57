"""The driver's budgets: evaluations, wall time, LLM dollars and tokens, GPU seconds.

Shared by concurrent LLM calls and evaluations, so every change happens under one lock. Work
is reserved before it starts (DESIGN.md, Ray topology): an LLM call reserves its worst-case
cost and settles the actual one, so concurrent calls cannot overshoot the cap together.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

# Absorbs float rounding when reservations add up to exactly the cap.
_EPS = 1e-9

KINDS = (
    "max_evals",
    "wall_seconds",
    "llm_dollars",
    "llm_tokens",
    "gpu_seconds",
    "per_workload_max_evals",
)


class BudgetExceeded(Exception):
    """A budget is spent, or a reservation would overshoot one; `.kind` names which."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


class Reservation:
    """An LLM call's reserved cost; close it exactly once, with `settle` or `cancel`."""

    def __init__(self, budget: Budget, dollars: float, tokens: int) -> None:
        self._budget = budget
        self.dollars = dollars
        self.tokens = tokens
        self.closed = False

    def settle(self, actual_dollars: float, actual_tokens: int) -> None:
        """The call happened: charge what it cost and release the reservation.

        A call that cost more than it reserved is charged in full (the money is spent), so
        reserve the worst case (max output tokens at the provider's price).
        """
        self._budget._close(self, actual_dollars, actual_tokens)

    def cancel(self) -> None:
        """The call did not happen (or cost nothing): release the reservation."""
        self._budget._close(self, 0.0, 0)


class Budget:
    """Run-wide limits (None means unlimited) and what has been used of them.

    `check` / `exhausted` say whether new work may start; the per-workload cap only refuses
    that workload's evaluations and never stops the run (the driver knows the workload list).
    """

    def __init__(
        self,
        max_evals: int | None = None,
        wall_seconds: float | None = None,
        llm_dollars: float | None = None,
        llm_tokens: int | None = None,
        gpu_seconds: float | None = None,
        per_workload_max_evals: int | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.limits: dict[str, float | None] = {
            "max_evals": max_evals,
            "wall_seconds": wall_seconds,
            "llm_dollars": llm_dollars,
            "llm_tokens": llm_tokens,
            "gpu_seconds": gpu_seconds,
            "per_workload_max_evals": per_workload_max_evals,
        }
        for kind, limit in self.limits.items():
            if limit is not None and limit < 0:
                raise ValueError(f"budget {kind} must be >= 0, got {limit}")
        self._clock = clock
        self._lock = threading.Lock()
        self._started = clock()
        self._elapsed_before = 0.0  # wall seconds of earlier runs this one resumes
        self._evals: dict[str, int] = {}
        self._dollars = 0.0
        self._tokens = 0
        self._gpu_seconds = 0.0
        self._reserved_dollars = 0.0
        self._open = 0  # reservations not yet settled or cancelled
        self._reserved_tokens = 0

    # Evaluations

    def reserve_eval(self, workload: str) -> None:
        """Count one evaluation of `workload` before it starts; raise if a cap would be passed."""
        with self._lock:
            total = sum(self._evals.values())
            cap = self.limits["max_evals"]
            if cap is not None and total + 1 > cap:
                raise BudgetExceeded("max_evals", f"max_evals reached ({total} of {cap})")
            n = self._evals.get(workload, 0)
            cap = self.limits["per_workload_max_evals"]
            if cap is not None and n + 1 > cap:
                raise BudgetExceeded(
                    "per_workload_max_evals",
                    f"per_workload_max_evals reached for {workload} ({n} of {cap})",
                )
            self._evals[workload] = n + 1

    def release_eval(self, workload: str) -> None:
        """Give back a reserved evaluation that did not happen (a duplicate, a stopped run)."""
        with self._lock:
            n = self._evals.get(workload, 0)
            if n < 1:
                raise ValueError(f"no reserved evaluation of {workload} to release")
            self._evals[workload] = n - 1

    def set_evals(self, evals: dict[str, int]) -> None:
        """Replace the evaluation counts per workload (a replayed resume counts the lineage)."""
        with self._lock:
            self._evals = {str(k): int(v) for k, v in evals.items()}

    # LLM calls

    def reserve_llm(self, dollars: float, tokens: int) -> Reservation:
        """Reserve an LLM call's worst-case cost; raise if reserved + spent would pass a cap."""
        if dollars < 0 or tokens < 0:
            raise ValueError(f"cannot reserve a negative cost ({dollars} dollars, {tokens} tokens)")
        with self._lock:
            cap = self.limits["llm_dollars"]
            used = self._dollars + self._reserved_dollars
            if cap is not None and used + dollars > cap + _EPS:
                raise BudgetExceeded(
                    "llm_dollars", f"llm_dollars: ${used:.4f} used or reserved of ${cap:.4f}"
                )
            cap = self.limits["llm_tokens"]
            used_tokens = self._tokens + self._reserved_tokens
            if cap is not None and used_tokens + tokens > cap:
                raise BudgetExceeded(
                    "llm_tokens", f"llm_tokens: {used_tokens} used or reserved of {cap:.0f}"
                )
            self._reserved_dollars += dollars
            self._open += 1
            self._reserved_tokens += tokens
        return Reservation(self, dollars, tokens)

    def _close(self, r: Reservation, dollars: float, tokens: int) -> None:
        with self._lock:
            if r.closed:
                raise ValueError("this LLM reservation was already settled or cancelled")
            r.closed = True
            self._open -= 1
            # With none open, nothing is reserved: no float residue of the sums is left over.
            left = self._reserved_dollars - r.dollars
            self._reserved_dollars = max(0.0, left) if self._open else 0.0
            self._reserved_tokens -= r.tokens
            self._dollars += dollars
            self._tokens += tokens

    # GPU and wall time

    def add_gpu_seconds(self, s: float) -> None:
        with self._lock:
            self._gpu_seconds += s

    def elapsed(self) -> float:
        """Wall seconds of this run, including those of the runs it resumes."""
        return self._elapsed_before + (self._clock() - self._started)

    # Verdicts

    def exhausted(self) -> str | None:
        """The first spent budget's kind (wall, GPU, evals, dollars, tokens), or None."""
        with self._lock:
            lim = self.limits
            used = {
                "wall_seconds": self.elapsed(),
                "gpu_seconds": self._gpu_seconds,
                "max_evals": sum(self._evals.values()),
                "llm_dollars": self._dollars + _EPS,
                "llm_tokens": self._tokens,
            }
            for kind, value in used.items():
                if lim[kind] is not None and value >= lim[kind]:
                    return kind
            return None

    def check(self) -> None:
        """Raise BudgetExceeded if no new work should start."""
        kind = self.exhausted()
        if kind is not None:
            raise BudgetExceeded(kind, f"budget {kind} spent ({self.limits[kind]})")

    # Persistence and display

    def get_state(self) -> dict[str, Any]:
        """The counters (not the limits: a resumed run brings its own, e.g. a higher max_evals).

        Evaluations count as soon as they are reserved; release the ones in flight before a
        final checkpoint. Open LLM reservations are not saved.
        """
        with self._lock:
            return {
                "evals": dict(self._evals),
                "llm_dollars": self._dollars,
                "llm_tokens": self._tokens,
                "gpu_seconds": self._gpu_seconds,
                "wall_seconds": self.elapsed(),
            }

    def set_state(self, state: dict[str, Any]) -> None:
        """Continue the saved counts; wall time continues from the saved elapsed seconds."""
        with self._lock:
            self._evals = {str(k): int(v) for k, v in state["evals"].items()}
            self._dollars = float(state["llm_dollars"])
            self._tokens = int(state["llm_tokens"])
            self._gpu_seconds = float(state["gpu_seconds"])
            self._elapsed_before = float(state["wall_seconds"])
            self._started = self._clock()

    def snapshot(self) -> dict[str, Any]:
        """Used, reserved and limits, for a progress display."""
        with self._lock:
            return {
                "evals": sum(self._evals.values()),
                "evals_per_workload": dict(self._evals),
                "llm_dollars": self._dollars,
                "llm_dollars_reserved": self._reserved_dollars,
                "llm_tokens": self._tokens,
                "llm_tokens_reserved": self._reserved_tokens,
                "gpu_seconds": self._gpu_seconds,
                "wall_seconds": self.elapsed(),
                "limits": dict(self.limits),
            }
