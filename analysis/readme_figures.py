"""The README's figure and table from a run directory: the best-so-far trajectory per workload
(a PNG) and the fast_p table with each workload's best (Markdown, printed).

    python -m analysis.readme_figures RUN_DIR [--out docs/img/quickstart_trajectory.png]
"""

from __future__ import annotations

import argparse
import sys

import matplotlib

from analysis.load import AnalysisError, load_run
from analysis.metrics import (
    DEFAULT_PS,
    best_per_workload,
    evaluated,
    fast_p_table,
    geomean_speedup,
    seed_outcomes,
)
from analysis.plots import plot_trajectories
from analysis.report import COLUMNS


def _cell(v: float, suffix: str = "") -> str:
    return "-" if v != v else f"{v:.3f}{suffix}"


def markdown_tables(candidates) -> str:
    """The fast_p table and the geomean speedup (vs eager and torch.compile), then the
    per-workload bests with each workload's evaluations, in Markdown."""
    fast = fast_p_table(candidates, DEFAULT_PS)
    ps = [f"fast_{p:g}" for p in DEFAULT_PS]
    lines = ["| precision | baseline | workloads | " + " | ".join(ps) + " |",
             "|---|---|---|" + "---|" * len(ps)]  # fmt: skip
    for r in fast.to_dict("records"):
        cells = " | ".join(_cell(r[p]) for p in ps)
        lines.append(f"| {r['precision']} | {r['baseline']} | {r['workloads']} | {cells} |")
    lines += ["", "| precision | backend | baseline | geomean speedup | workloads (of) |",
              "|---|---|---|---|---|"]  # fmt: skip
    for r in geomean_speedup(candidates).itertuples():
        lines.append(f"| {r.precision} | {r.backend} | {r.baseline} | {_cell(r.geomean, 'x')} "
                     f"| {r.workloads} ({r.of}) |")  # fmt: skip
    evals = evaluated(candidates).groupby(["workload", "precision"]).size()
    lines += ["", "| workload | precision | evaluations | best vs eager | best vs compile "
              "| SOL fraction | operator |", "|---|---|---|---|---|---|---|"]  # fmt: skip
    for r in best_per_workload(candidates).itertuples():
        lines.append(
            f"| `{r.workload}` | {r.precision} | {evals.get((r.workload, r.precision), 0)} "
            f"| {_cell(r.speedup_vs_eager, 'x')} | {_cell(r.speedup_vs_compile, 'x')} "
            f"| {_cell(r.sol_fraction)} | {r.operator} |"
        )
    return "\n".join(lines)


def seed_table(seeds) -> str:
    """How the run's seeds fared: counts per (kind, status, reason), in Markdown."""
    counts = seeds.groupby(["seed", "status", "reason"], sort=True).size()
    lines = ["| seed | status | reason | seeds |", "|---|---|---|---|"]
    for (seed, status, reason), n in counts.items():
        lines.append(f"| {seed} | {status} | {reason or '-'} | {n} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run_dir")
    ap.add_argument("--out", default="docs/img/quickstart_trajectory.png")
    args = ap.parse_args(argv)
    matplotlib.use("Agg")
    try:
        run = load_run(args.run_dir, columns=[*COLUMNS, "source_hash", "reason", "source"])
    except AnalysisError as e:
        print(f"readme_figures: {e}", file=sys.stderr)
        return 2
    fig = plot_trajectories(run.candidates)
    fig.set_size_inches(7.5, 3.8)
    speedups = run.candidates["speedup_vs_eager"].dropna()
    speedups = speedups[speedups > 0]
    if len(speedups) and speedups.max() / speedups.min() > 8:  # 0.5x and 18x on one page
        fig.axes[0].set_yscale("log")
    fig.savefig(args.out, dpi=110)
    print(f"wrote {args.out}\n")
    print(markdown_tables(run.candidates))
    seeds = seed_outcomes(run.candidates, run.events)
    if len(seeds):
        print("\n" + seed_table(seeds))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
