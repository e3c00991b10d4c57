"""The data behind the plots: best-so-far trajectories, island diversity, migration effects and
a candidate's ancestry. Each is a DataFrame the plot draws as it is, so a test (or a notebook)
can check the numbers a figure shows against the lineage.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.metrics import WORKLOAD_KEYS, _with_costs, evaluated, speed

X_AXES = {
    "evaluations": "evaluations",
    "wall": "wall time since the run's first row (s)",
    "dollars": "LLM dollars",
}
GROUPINGS = {"workload": WORKLOAD_KEYS, "island": ["run", "precision", "island"]}


def best_so_far(
    candidates: pd.DataFrame,
    x: str = "evaluations",
    by: str = "workload",
    baseline: str = "eager",
    llm_calls: pd.DataFrame | None = None,
    include_incomparable: bool = False,
) -> pd.DataFrame:
    """The best speedup found so far, after each row of a workload (or an island).

    One row per evaluated row, in recording order, with the group's keys, `candidate_id`,
    `x` and `best`. x is the group's evaluations so far (generation failures do not advance
    it), the seconds since the run's first candidate row (`wall`, from `created_at`), or the
    group's LLM dollars so far (`dollars`, which needs `llm_calls`). `best` is the running
    maximum of the counting speedups against `baseline` (see `analysis.metrics`); NaN until the
    first one. Migrants are not evaluations of the island that receives them and are left out.
    """
    if x not in X_AXES:
        raise ValueError(f"x={x!r}: one of {', '.join(X_AXES)}")
    if by not in GROUPINGS:
        raise ValueError(f"by={by!r}: one of {', '.join(GROUPINGS)}")
    keys = GROUPINGS[by]
    df = _with_costs(evaluated(candidates), llm_calls if x == "dollars" else None)
    df["speedup"] = speed(df, baseline, include_incomparable)
    g = df.groupby(keys, sort=False)
    if x == "evaluations":
        df["x"] = g["evaluation"].cumsum().astype(float)
    elif x == "dollars":
        df["x"] = g["dollars"].cumsum()
    else:
        start = df.groupby("run")["created_at"].transform("min")
        df["x"] = (df["created_at"] - start).dt.total_seconds()
    # cummax leaves NaN where a row does not count; the best so far carries over it
    df["best"] = g["speedup"].cummax()
    df["best"] = df.groupby(keys, sort=False)["best"].ffill()
    return df[[*keys, "candidate_id", "x", "best"]].sort_values(keys, kind="stable")


def steps(trajectory: pd.DataFrame) -> pd.DataFrame:
    """A trajectory reduced to the points a step plot needs: where `best` changes, and each
    group's last point (exact for `drawstyle="steps-post"`; 1M rows become a few hundred)."""
    keys = [c for c in trajectory.columns if c not in ("candidate_id", "x", "best")]
    t = trajectory[trajectory["best"].notna()]
    group = t.groupby(keys, sort=False).ngroup()
    new_group = group.ne(group.shift())
    changed = t["best"].ne(t["best"].shift()) | new_group
    last = group.ne(group.shift(-1))
    return t[changed | last]


def island_diversity(candidates: pd.DataFrame, window: int = 8) -> pd.DataFrame:
    """How varied each island's recent members are: after each correct row of an island
    (migrants included, as they join its population), the standard deviation of `fitness`
    over the island's last `window` correct rows (NaN until two).

    One row per correct row: `run`, `island`, `x` (the island's evaluations so far, migrants
    not counted), `created_at`, `diversity`. A falling curve is an island converging on one
    kind of candidate; a migrant from a different island raises it.
    """
    df = candidates.copy()
    if "run" not in df:
        df["run"] = df["run_id"]
    df["is_migrant"] = df["is_migrant"].fillna(False).astype(bool)
    df = df.sort_values(["run", "island", "step", "created_at"], kind="stable")
    df["evaluation"] = ~df["is_migrant"]
    df["x"] = df.groupby(["run", "island"], sort=False)["evaluation"].cumsum().astype(float)
    ok = df[df["status"].eq("correct") & df["fitness"].notna()]
    spread = (
        ok.groupby(["run", "island"], sort=False)["fitness"]
        .rolling(window, min_periods=2)
        .std(ddof=0)
        .reset_index(level=[0, 1], drop=True)
    )
    out = ok[["run", "island", "x", "created_at"]].copy()
    out["diversity"] = spread.reindex(ok.index)
    return out.reset_index(drop=True)


def migration_effects(candidates: pd.DataFrame) -> pd.DataFrame:
    """What each migration did to the island that received it, in the run's own objective
    (`fitness`, what selection and migration act on).

    One row per migrant: `run`, `island` (receiving), `from_island`, `step` (the island step
    it arrived at), `migrant_id`, `original_id`, `migrant_fitness`, `best_before` (the island's
    best correct fitness over its rows before that step, NaN if none) and `best_after` (its
    best over the rows before the next migration into it, or to the end of the run, the
    migrant included).
    """
    df = candidates.copy()
    if "run" not in df:
        df["run"] = df["run_id"]
    df["is_migrant"] = df["is_migrant"].fillna(False).astype(bool)
    cols = ["run", "island", "from_island", "step", "migrant_id", "original_id",
            "migrant_fitness", "best_before", "best_after"]  # fmt: skip
    migrants = df[df["is_migrant"]]
    if migrants.empty:
        return pd.DataFrame(columns=cols)
    origin = df.set_index(["run", "candidate_id"])["island"]
    original = migrants["parent_ids"].map(lambda p: p[0] if p is not None and len(p) else None)
    rows = []
    fit = df["fitness"].where(df["status"].eq("correct"))
    for (run, island), arrivals in migrants.groupby(["run", "island"], sort=True):
        mine = df["run"].eq(run) & df["island"].eq(island)
        steps_, values = df.loc[mine, "step"].to_numpy(), fit[mine].to_numpy()
        order = np.argsort(steps_, kind="stable")
        steps_, values = steps_[order], values[order]
        arrival_steps = np.unique(arrivals["step"].to_numpy())
        for _, m in arrivals.iterrows():
            nxt = arrival_steps[arrival_steps > m["step"]]
            end = nxt[0] if len(nxt) else np.inf
            before = values[steps_ < m["step"]]
            after = values[steps_ < end]
            key = (run, original[m.name])
            rows.append(
                {
                    "run": run,
                    "island": island,
                    "from_island": origin.get(key),
                    "step": int(m["step"]),
                    "migrant_id": m["candidate_id"],
                    "original_id": original[m.name],
                    "migrant_fitness": fit[m.name],
                    "best_before": np.nanmax(before) if np.isfinite(before).any() else np.nan,
                    "best_after": np.nanmax(after) if np.isfinite(after).any() else np.nan,
                }
            )
    return pd.DataFrame(rows, columns=cols)


def ancestry(candidates: pd.DataFrame, candidate_id: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """A candidate and all its ancestors, through `parent_ids` (migrant copies included).

    Returns (nodes, edges). nodes: `candidate_id`, `depth` (edges on the longest path down to
    the candidate; the candidate is 0), `operator`, `status`, `speedup_vs_eager`, `fitness`,
    `island`. edges: `parent`, `child`, `operator` (the child's), `speedup_vs_eager` (the
    child's), one per (parent, child) pair. A parent missing from the lineage (a run seeded
    `--from` another) is a node with no row data.
    """
    df = candidates
    index = pd.Index(df["candidate_id"])
    if candidate_id not in index:
        raise KeyError(f"candidate {candidate_id!r} is not in the lineage")
    depth: dict[str, int] = {candidate_id: 0}
    edges: dict[tuple[str, str], None] = {}  # insertion-ordered set
    frontier = [candidate_id]
    while frontier:
        pos = index.get_indexer(frontier)
        nxt = []
        for child, i in zip(frontier, pos):
            if i < 0:
                continue
            for parent in df["parent_ids"].iat[i] if df["parent_ids"].iat[i] is not None else ():
                edges[(parent, child)] = None
                d = depth[child] + 1
                if depth.get(parent, -1) < d:  # longest path: re-visit a deeper-found parent
                    depth[parent] = d
                    nxt.append(parent)
        frontier = list(dict.fromkeys(nxt))
    ids = list(depth)
    pos = index.get_indexer(ids)
    data = df.iloc[pos[pos >= 0]].set_index("candidate_id")
    cols = ["operator", "status", "speedup_vs_eager", "fitness", "island"]
    nodes = pd.DataFrame({"candidate_id": ids, "depth": [depth[i] for i in ids]})
    nodes = nodes.join(data[[c for c in cols if c in data]], on="candidate_id")
    edge_frame = pd.DataFrame(list(edges), columns=["parent", "child"])
    edge_frame = edge_frame.join(data[["operator", "speedup_vs_eager"]], on="child")
    return nodes.sort_values(["depth", "candidate_id"], ascending=[False, True]), edge_frame
