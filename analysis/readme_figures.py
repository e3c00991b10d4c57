"""The README's figure and table from a run directory: the best-so-far trajectory per workload
(a PNG) and the fast_p table with each workload's best (Markdown, printed).

    python -m analysis.readme_figures RUN_DIR [--out docs/img/quickstart_trajectory.png]
"""

from __future__ import annotations

import argparse
import sys

import matplotlib

from analysis.load import AnalysisError, load_run
from analysis.metrics import DEFAULT_PS, best_per_workload, fast_p_table, seed_outcomes
from analysis.plots import plot_trajectories
from analysis.report import COLUMNS


def _cell(v: float, suffix: str = "") -> str:
    return "-" if v != v else f"{v:.3f}{suffix}"


def markdown_tables(candidates) -> str:
    """The fast_p table (vs eager and torch.compile) and the per-workload bests, in Markdown."""
    fast = fast_p_table(candidates, DEFAULT_PS)
    ps = [f"fast_{p:g}" for p in DEFAULT_PS]
    lines = ["| precision | baseline | workloads | " + " | ".join(ps) + " |",
             "|---|---|---|" + "---|" * len(ps)]  # fmt: skip
    for r in fast.to_dict("records"):
        cells = " | ".join(_cell(r[p]) for p in ps)
        lines.append(f"| {r['precision']} | {r['baseline']} | {r['workloads']} | {cells} |")
    lines += ["", "| workload | precision | best vs eager | best vs compile | SOL fraction "
              "| operator |", "|---|---|---|---|---|---|"]  # fmt: skip
    for r in best_per_workload(candidates).itertuples():
        lines.append(
            f"| `{r.workload}` | {r.precision} | {_cell(r.speedup_vs_eager, 'x')} "
            f"| {_cell(r.speedup_vs_compile, 'x')} | {_cell(r.sol_fraction)} | {r.operator} |"
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
    fig.savefig(args.out, dpi=110)
    print(f"wrote {args.out}\n")
    print(markdown_tables(run.candidates))
    seeds = seed_outcomes(run.candidates, run.events)
    if len(seeds):
        print("\n" + seed_table(seeds))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
