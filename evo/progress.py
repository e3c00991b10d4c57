"""The live terminal view of a run (rich), and the counts it shows."""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass, field


@dataclass
class Progress:
    """What the live view shows; updated by the driver loop."""

    evaluated: int = 0
    started: float = field(default_factory=time.monotonic)
    statuses: dict = field(default_factory=lambda: defaultdict(int))
    busy_s: float = 0.0

    def rate(self) -> float:
        return self.evaluated / max(time.monotonic() - self.started, 1e-9) * 60


class LiveView:
    """The live terminal view (rich), or nothing with --quiet."""

    def __init__(self, engine):
        self.e = engine
        self.live = None

    def __enter__(self):
        if self.e.quiet:
            return lambda: None
        from rich.live import Live

        self.live = Live(self._render(), refresh_per_second=2, transient=False)
        self.live.__enter__()
        return lambda: self.live.update(self._render())

    def __exit__(self, *exc):
        if self.live is not None:
            self.live.update(self._render())
            self.live.__exit__(*exc)

    def _render(self):
        from rich.table import Table

        p, e = self.e.progress, self.e
        t = Table(title=f"evo run {e.run_id}  {e.rd.uri}", show_header=False)
        busy = p.busy_s / max(time.monotonic() - p.started, 1e-9) / max(e.pool.n, 1)
        t.add_row("evaluations", f"{p.evaluated}  ({p.rate():.1f}/min)")
        t.add_row("worker busy", f"{100 * min(busy, 1.0):.0f}%  ({e.pool.n} workers)")
        t.add_row("statuses", ", ".join(f"{k} {v}" for k, v in sorted(p.statuses.items())))
        snap = e.budget.snapshot()
        t.add_row("llm", f"${snap.get('llm_dollars', 0):.4f}, {snap.get('llm_tokens', 0)} tokens")
        if e.stop_reason:
            t.add_row("stopping", e.stop_reason)
        return t
