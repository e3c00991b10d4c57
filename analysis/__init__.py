"""Analysis of evolution runs: load the Parquet lineage, compute metrics, plot, report.

Reads only the run directory's Parquet files (pyarrow, pandas, matplotlib), never engine
objects, so a notebook works on a laptop without Ray or a GPU:

    import analysis
    run = analysis.load_run("runs/2026-11-22-quickstart", columns=analysis.report.COLUMNS)
    analysis.fast_p_table(run.candidates)
    analysis.plot_trajectories(run.candidates)
"""

from analysis import report
from analysis.load import (
    AnalysisError,
    Lineage,
    LineageWarning,
    load_run,
    load_runs,
    read_sources,
)
from analysis.metrics import (
    best_per_workload,
    correctness_rate,
    cost_to_first_correct_and_best,
    fast_p,
    fast_p_table,
    geomean_speedup,
    seed_outcomes,
    sol_fraction_of_best,
    status_counts,
    workload_cost,
)
from analysis.plots import (
    best_candidate_id,
    plot_fast_p,
    plot_island_diversity,
    plot_lineage_tree,
    plot_migration_effects,
    plot_status_breakdown,
    plot_trajectories,
)
from analysis.trajectories import ancestry, best_so_far, island_diversity, migration_effects

__all__ = [
    "AnalysisError",
    "Lineage",
    "LineageWarning",
    "ancestry",
    "best_candidate_id",
    "best_per_workload",
    "best_so_far",
    "correctness_rate",
    "cost_to_first_correct_and_best",
    "fast_p",
    "fast_p_table",
    "geomean_speedup",
    "island_diversity",
    "load_run",
    "load_runs",
    "migration_effects",
    "plot_fast_p",
    "plot_island_diversity",
    "plot_lineage_tree",
    "plot_migration_effects",
    "plot_status_breakdown",
    "plot_trajectories",
    "read_sources",
    "report",
    "seed_outcomes",
    "sol_fraction_of_best",
    "status_counts",
    "workload_cost",
]
