"""The best kernel of each workload, out of a run's lineage and into ready-to-use files.

`evo best RUN [--out DIR]` writes, for each (workload, backend), the best correct candidate's
source as `<workload>__<backend>.py`, exactly as it was judged (so `evo eval` on it gives the
same `source_hash`), and its verdict beside it as `<workload>__<backend>.json`. Best is the
highest counting speedup against eager, or, where nothing counts (a CPU run), the highest
fitness among correct rows (analysis.plots.best_candidate_id).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from analysis.load import AnalysisError, load_run, read_sources
from analysis.metrics import evaluated
from analysis.plots import best_candidate_id

# The verdict fields written beside each kernel.
VERDICT = (
    "candidate_id", "workload", "backend", "status", "reason", "precision", "runtime_ms",
    "runtime_iqr_ms", "baseline_eager_ms", "baseline_compile_ms", "speedup_vs_eager",
    "speedup_vs_compile", "sol_fraction", "error_fraction", "fitness", "comparable", "device",
    "source_hash", "protocol_version", "isolation", "island", "operator",
)  # fmt: skip


def write_best(run_dir: str, out: str | None = None) -> list[Path]:
    """Write each workload's best correct kernel and its verdict; the files written.

    `out` defaults to `best/` in a local run directory. Raises AnalysisError when the run has
    no correct candidate at all."""
    if out is None:
        if "://" in run_dir:
            raise AnalysisError(f"{run_dir} is not a local directory: pass --out DIR")
        out = str(Path(run_dir) / "best")
    run = load_run(run_dir, columns=[*VERDICT, "is_migrant"])
    df = evaluated(run.candidates)
    picks = {}
    for (workload, backend), group in df.groupby(["workload", "backend"], sort=True):
        try:
            picks[(workload, backend)] = best_candidate_id(group)
        except AnalysisError:
            continue  # no correct candidate for this one
    if not picks:
        raise AnalysisError(f"run {run_dir!r} has no correct candidate yet")
    sources = read_sources(run_dir, list(picks.values()))
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for (workload, backend), cid in picks.items():
        stem = f"{workload.replace(':', '_').replace('/', '_')}__{backend}"
        row = df[df["candidate_id"].eq(cid)].iloc[0]
        (folder / f"{stem}.py").write_text(sources[cid])
        verdict = {k: _plain(row[k]) for k in VERDICT if k in row.index}
        (folder / f"{stem}.json").write_text(json.dumps(verdict, indent=2) + "\n")
        written += [folder / f"{stem}.py", folder / f"{stem}.json"]
    return written


def _plain(value):
    """A pandas cell as JSON: NaN as null, numpy scalars and arrays as Python values."""
    if hasattr(value, "tolist"):
        value = value.tolist()
    if isinstance(value, float) and math.isnan(value):
        return None
    return value
