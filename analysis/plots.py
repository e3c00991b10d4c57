"""Plots of a run's lineage (matplotlib). Each function draws on the Axes it is given (or on a
new Figure's) and returns the Figure. What a plot draws is the DataFrame of the matching
function in `analysis.trajectories` or `analysis.metrics`, so its numbers can be checked.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from analysis.load import AnalysisError
from analysis.metrics import BASELINES, STATUSES, evaluated, fast_p, speed, status_counts
from analysis.trajectories import (
    GROUPINGS,
    X_AXES,
    ancestry,
    best_so_far,
    island_diversity,
    migration_effects,
    steps,
)

STATUS_COLORS = {
    "correct": "#2ca02c", "mismatch": "#d62728", "runtime_error": "#ff7f0e",
    "compile_error": "#9467bd", "timeout": "#8c564b", "rejected": "#e377c2",
    "generation_failure": "#7f7f7f",
}  # fmt: skip
NO_TIMINGS = "no comparable timings\n(a CPU/interpreter run: pass include_incomparable=True)"


def _axes(ax: Axes | None, size: tuple[float, float] = (7.0, 4.0)) -> tuple[Figure, Axes]:
    if ax is not None:
        return ax.figure, ax
    fig = Figure(figsize=size, layout="constrained")
    return fig, fig.add_subplot()


def _short(name: str) -> str:
    return name.removeprefix("builtin:").removeprefix("kernelbench:")


def _labels(keys: pd.DataFrame, main: str) -> list[str]:
    """A label per group: the main key, plus every other key that differs between groups."""
    extra = [c for c in keys.columns if c != main and keys[c].nunique() > 1]
    out = []
    for _, row in keys.iterrows():
        parts = [_short(str(row[main]))] + [_short(str(row[c])) for c in extra]
        out.append(parts[0] + (f" ({', '.join(parts[1:])})" if len(parts) > 1 else ""))
    return out


def _empty(ax: Axes, message: str) -> None:
    ax.text(0.5, 0.5, message, transform=ax.transAxes, ha="center", va="center", color="0.4")


def plot_trajectories(
    candidates: pd.DataFrame,
    x: str = "evaluations",
    by: str = "workload",
    baseline: str = "eager",
    llm_calls: pd.DataFrame | None = None,
    include_incomparable: bool = False,
    ax: Axes | None = None,
) -> Figure:
    """Best-so-far speedup against evaluations, wall time or dollars, one step line per
    workload (or island). The lines are `steps(best_so_far(...))`: each point is a new best,
    plus the group's last row."""
    fig, ax = _axes(ax)
    traj = best_so_far(candidates, x, by, baseline, llm_calls, include_incomparable)
    points = steps(traj)
    keys = GROUPINGS[by]
    main = "workload" if by == "workload" else "island"
    ax.axhline(1.0, color="0.6", lw=0.8, ls="--", label="_baseline")
    if points.empty:
        _empty(ax, NO_TIMINGS)
    elif x == "dollars" and not points["x"].any():
        _empty(ax, "no LLM dollars were spent (an offline run)")
    else:
        groups = points[keys].drop_duplicates()
        for label, (_, pts) in zip(
            _labels(groups, main), points.groupby(keys, sort=False, dropna=False)
        ):
            ax.plot(pts["x"], pts["best"], drawstyle="steps-post", marker="o", ms=3, label=label)
        ax.legend(fontsize="small", loc="best")
    ax.set_xlabel(X_AXES[x])
    ax.set_ylabel(f"best speedup vs {baseline} (x)")
    ax.set_title(f"Best so far, per {by}")
    ax.grid(alpha=0.3)
    return fig


def plot_fast_p(
    candidates: pd.DataFrame,
    ps: list[float] | np.ndarray | None = None,
    include_incomparable: bool = False,
    ax: Axes | None = None,
) -> Figure:
    """fast_p against p, against eager (solid) and torch.compile (dashed): one line per
    (run, precision, backend, baseline), drawn from `metrics.fast_p` at `ps` (default: 121
    points from 0 to a little past the largest best speedup, at least 2.5)."""
    fig, ax = _axes(ax)
    if ps is None:
        df = evaluated(candidates)
        top = max((speed(df, b, include_incomparable).max() for b in BASELINES), key=np.nan_to_num)
        ps = np.linspace(0.0, max(2.5, 1.1 * float(np.nan_to_num(top))), 121)
    table = fast_p(candidates, tuple(float(p) for p in ps), include_incomparable)
    table = table[table["fast_p"].notna()]
    if table.empty:
        _empty(ax, NO_TIMINGS)
    keys = ["run", "precision", "backend", "baseline"]
    groups = table[keys].drop_duplicates()
    for label, (key, rows) in zip(_labels(groups, "baseline"), table.groupby(keys, sort=False)):
        style = "-" if key[3] == "eager" else "--"
        ax.plot(rows["p"], rows["fast_p"], style, drawstyle="steps-post", label=f"vs {label}")
    for p in (1.0, 1.5, 2.0):
        ax.axvline(p, color="0.85", lw=0.8, label="_p")
    ax.set_xlabel("p (speedup threshold)")
    ax.set_ylabel("fast_p (share of workloads)")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title("fast_p: correct and more than p times faster")
    if not table.empty:
        ax.legend(fontsize="small")
    ax.grid(alpha=0.3)
    return fig


def plot_status_breakdown(
    candidates: pd.DataFrame, by: str = "operator", ax: Axes | None = None
) -> Figure:
    """Rows per status for each operator (or model, workload, island), as stacked horizontal
    bars: one bar container per status, labelled with it (`metrics.status_counts`)."""
    counts = status_counts(candidates, by)
    fig, ax = _axes(ax, (7.0, 0.6 + 0.45 * max(1, len(counts))))
    labels = _labels(counts[["run", "precision", by]], by)
    y = np.arange(len(counts))
    left = np.zeros(len(counts))
    for status in counts.columns[3:]:
        width = counts[status].to_numpy(dtype=float)
        if not width.any():
            continue
        ax.barh(y, width, left=left, label=status, color=STATUS_COLORS.get(status, "0.5"))
        left += width
    ax.set_yticks(y, labels)
    ax.invert_yaxis()
    ax.set_xlabel("rows")
    ax.set_title(f"Statuses by {by}")
    ax.legend(fontsize="small", loc="lower right")
    return fig


def best_candidate_id(
    candidates: pd.DataFrame, workload: str | None = None, include_incomparable: bool = False
) -> str:
    """The best candidate of the run (or of one workload): highest counting speedup vs eager;
    where nothing counts (a CPU run), highest fitness among correct rows."""
    df = evaluated(candidates)
    if workload is not None:
        df = df[df["workload"].eq(workload)]
    s = speed(df, "eager", include_incomparable)
    if s.notna().any():
        return str(df.loc[s.idxmax(), "candidate_id"])
    fit = df["fitness"].where(df["status"].eq("correct"))
    if fit.notna().any():
        return str(df.loc[fit.idxmax(), "candidate_id"])
    raise AnalysisError(f"no correct candidate{' for ' + workload if workload else ''}")


def _island_index(island: str) -> str:
    """`builtin:matmul|triton|1` as `1`: an island's number within its workload."""
    return island.rsplit("|", 1)[-1]


def _node_label(cid: str, migrant: bool = False) -> str:
    """`run/island/000012` as `0#12` (the island's number, the step); a migrant copy as
    `0 migrant` (the island it arrived in)."""
    parts = cid.split("/")
    if len(parts) < 2:
        return cid
    island = _island_index(parts[-2])
    return f"{island} migrant" if migrant else f"{island}#{parts[-1].lstrip('0') or '0'}"


def plot_lineage_tree(
    candidates: pd.DataFrame,
    candidate_id: str | None = None,
    workload: str | None = None,
    ax: Axes | None = None,
) -> Figure:
    """How a candidate came to be: it (at the bottom) and its ancestors (above), one arrow per
    parent, labelled with the child's operator and its speedup vs eager (`ancestry`). Node
    texts have gid "node", edge labels gid "edge". Default: the best candidate (of `workload`).
    """
    cid = candidate_id or best_candidate_id(candidates, workload)
    nodes, edges = ancestry(candidates, cid)
    depth_max = int(nodes["depth"].max())
    width = max(nodes.groupby("depth").size().max(), 1)
    fig, ax = _axes(ax, (max(6.0, 2.4 * width), 1.0 + 1.3 * (depth_max + 1)))
    pos = {}
    for d, level in nodes.groupby("depth"):
        n = len(level)
        for k, node in enumerate(level["candidate_id"]):
            pos[node] = ((k - (n - 1) / 2) * 2.0, float(d))
    for e in edges.itertuples():
        (x0, y0), (x1, y1) = pos[e.parent], pos[e.child]
        ax.annotate(
            "", xy=(x1, y1 + 0.18), xytext=(x0, y0 - 0.18),
            arrowprops={"arrowstyle": "->", "color": "0.4"},
        )  # fmt: skip
        sp = "" if pd.isna(e.speedup_vs_eager) else f"\n{e.speedup_vs_eager:.3g}x"
        ax.text((x0 + x1) / 2, (y0 + y1) / 2, f"{e.operator}{sp}", ha="center", va="center",
                fontsize=7, color="#1f4e79", gid="edge",
                bbox={"fc": "white", "ec": "none", "alpha": 0.8})  # fmt: skip
    for node in nodes.itertuples():
        x, y = pos[node.candidate_id]
        sp = "" if pd.isna(node.speedup_vs_eager) else f" {node.speedup_vs_eager:.3g}x"
        box = {
            "boxstyle": "round",
            "fc": "#e8f4e8" if node.status == "correct" else "#fbe3e3",
            "ec": "#2ca02c" if node.candidate_id == cid else "0.5",
        }
        label = _node_label(node.candidate_id, node.operator == "migration") + sp
        ax.text(x, y, label, ha="center", va="center", fontsize=8, gid="node", bbox=box)
    xs = [p[0] for p in pos.values()]
    ax.set_xlim(min(xs) - 1.5, max(xs) + 1.5)
    ax.set_ylim(-0.6, depth_max + 0.6)
    ax.set_axis_off()
    ax.set_title(
        f"Lineage of {_node_label(cid)} ({_short(cid.split('/')[1]) if '/' in cid else cid})"
    )
    return fig


def plot_island_diversity(
    candidates: pd.DataFrame, window: int = 8, ax: Axes | None = None
) -> Figure:
    """Each island's diversity (the standard deviation of fitness over its last `window`
    correct members, `island_diversity`) against the island's evaluations."""
    fig, ax = _axes(ax)
    div = island_diversity(candidates, window)
    div = div[div["diversity"].notna()]
    if div.empty:
        _empty(ax, "fewer than two correct members in every island")
    groups = div[["run", "island"]].drop_duplicates()
    for label, (_, rows) in zip(
        _labels(groups, "island"), div.groupby(["run", "island"], sort=False)
    ):
        ax.plot(rows["x"], rows["diversity"], marker=".", label=label)
    ax.set_xlabel("island evaluations")
    ax.set_ylabel(f"fitness std over last {window} members")
    ax.set_title("Island diversity")
    if not div.empty:
        ax.legend(fontsize="small")
    ax.grid(alpha=0.3)
    return fig


def plot_migration_effects(candidates: pd.DataFrame, ax: Axes | None = None) -> Figure:
    """Each migration's effect on the receiving island: its best fitness before (circle) and
    after (triangle, up to the next migration into it), joined by a line, and the migrant's
    own fitness (x), one column per migration (`migration_effects`)."""
    fig, ax = _axes(ax)
    eff = migration_effects(candidates)
    if eff.empty:
        _empty(ax, "no migrations in this lineage")
        ax.set_title("Migrations")
        return fig
    i = np.arange(len(eff))
    for k, row in enumerate(eff.itertuples()):
        ax.plot([k, k], [row.best_before, row.best_after], color="0.5", lw=1.5, label="_effect")
    ax.plot(i, eff["best_before"], "o", color="#1f77b4", label="island best before")
    ax.plot(i, eff["best_after"], "^", color="#2ca02c", label="island best after")
    ax.plot(i, eff["migrant_fitness"], "x", color="#d62728", label="migrant")
    names = [
        f"{_island_index(r.island)}<-{_island_index(str(r.from_island))} @{r.step}\n"
        f"{_short(r.island.split('|')[0])}"
        for r in eff.itertuples()
    ]
    ax.set_xticks(i, names, fontsize=7)
    ax.set_ylabel("fitness")
    ax.set_title("Migrations: the receiving island's best before and after")
    ax.legend(fontsize="small")
    ax.grid(alpha=0.3)
    return fig


__all__ = [
    "STATUS_COLORS",
    "STATUSES",
    "best_candidate_id",
    "plot_fast_p",
    "plot_island_diversity",
    "plot_lineage_tree",
    "plot_migration_effects",
    "plot_status_breakdown",
    "plot_trajectories",
]
