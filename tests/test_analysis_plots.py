"""`analysis.plots`: what each figure draws is checked against the lineage (best-so-far arrays,
fast_p values, status counts, lineage edges, diversity, migrations), not just that it renders."""

from __future__ import annotations

import io
import math
import statistics
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from matplotlib.figure import Figure

import analysis
from analysis.plots import NO_TIMINGS
from tests.analysis_lineages import cid, real_run, write_hand_made_run


@pytest.fixture(scope="session")
def real_dir(ray_cluster, tmp_path_factory) -> str:
    return real_run(tmp_path_factory)


@pytest.fixture(scope="module")
def hand(tmp_path_factory) -> analysis.Lineage:
    return analysis.load_run(write_hand_made_run(tmp_path_factory.mktemp("hand") / "h"))


def data_lines(fig: Figure):
    """The plotted data lines of a one-Axes figure (reference lines have `_` labels)."""
    (ax,) = fig.axes
    return {ln.get_label(): ln.get_xydata().tolist() for ln in ax.lines
            if not ln.get_label().startswith("_")}  # fmt: skip


def renders(fig: Figure) -> bool:
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()[:8] == b"\x89PNG\r\n\x1a\n"


def test_trajectory_against_evaluations_is_the_running_best(hand):
    # wa (fp32), in order: A0-0 .5, A1-0 .625, A0-1 -, A0-2 1.25, A1-1 (generation failure:
    # x stays), A1-2 (10x but incomparable), A0-3 2.0, A1-3 -.
    traj = analysis.best_so_far(hand.candidates)
    wa = traj[(traj["workload"] == "builtin:wa") & (traj["precision"] == "fp32")]
    assert wa["x"].tolist() == [1, 2, 3, 4, 4, 5, 6, 7]
    assert wa["best"].tolist() == [0.5, 0.625, 0.625, 1.25, 1.25, 1.25, 2.0, 2.0]
    fig = analysis.plot_trajectories(hand.candidates)
    lines = data_lines(fig)
    # one line per workload and policy with a timed row; steps: each new best and the last row
    assert lines["wa (fp32)"] == [[1, 0.5], [2, 0.625], [4, 1.25], [6, 2.0], [7, 2.0]]
    assert lines["wb (fp32)"] == [[1, 1.5], [2, 2.0]]
    assert lines["wb (bf16)"] == [[1, 3.0], [2, 3.0]]  # B1-1 timed out: the best stays
    assert set(lines) == {"wa (fp32)", "wb (fp32)", "wb (bf16)"} and renders(fig)


def test_trajectory_against_dollars_and_wall_time(hand):
    fig = analysis.plot_trajectories(hand.candidates, x="dollars", llm_calls=hand.llm_calls)
    wa = data_lines(fig)["wa (fp32)"]
    # dollars so far at each new best: A0-0 0, A1-0 0, A0-2 c1+c2, A0-3 c1..c5; last row +c6
    want = [[0, 0.5], [0, 0.625], [0.0135, 1.25], [0.04425, 2.0], [0.04815, 2.0]]
    assert np.allclose(wa, want)
    offline = hand.candidates[hand.candidates["workload"] == "builtin:wb"]  # no LLM calls
    fig = analysis.plot_trajectories(offline, x="dollars", llm_calls=hand.llm_calls)
    assert data_lines(fig) == {} and "no LLM dollars" in fig.axes[0].texts[0].get_text()
    fig = analysis.plot_trajectories(hand.candidates, x="wall", by="island")
    island0 = data_lines(fig)["wa|triton|0 (fp32)"]
    # rows are one second apart; island 0's rows are rows 0, 2, 3 and 7
    assert island0 == [[0, 0.5], [3, 1.25], [7, 2.0]]
    assert fig.axes[0].get_xlabel().startswith("wall time") and renders(fig)


def test_real_run_trajectories_match_the_parquet_rows(real_dir):
    rows = []
    for part in sorted(Path(real_dir, "candidates").glob("part-*.parquet")):
        rows += pq.read_table(part).to_pylist()
    rows = sorted((r for r in rows if not r["is_migrant"]), key=lambda r: (r["created_at"],
                                                                          r["step"]))  # fmt: skip
    run = analysis.load_run(real_dir)
    fig = analysis.plot_trajectories(run.candidates)  # nothing comparable on the CPU
    assert data_lines(fig) == {} and NO_TIMINGS in [t.get_text() for t in fig.axes[0].texts]
    fig = analysis.plot_trajectories(run.candidates, by="island", include_incomparable=True)
    lines = data_lines(fig)
    islands = sorted({r["island"] for r in rows})
    assert len(lines) == len(islands) == 4
    for island in islands:
        best, points = -math.inf, []
        mine = [r for r in rows if r["island"] == island]
        for k, r in enumerate(mine, start=1):
            if r["status"] == "correct" and r["speedup_vs_eager"] > best:
                best = r["speedup_vs_eager"]
                points.append([k, best])
        if points[-1][0] != len(mine):
            points.append([len(mine), best])
        assert lines[island.removeprefix("builtin:")] == points, island


def test_fast_p_plot_draws_fast_p_at_each_p(hand):
    ps = [0.0, 1.0, 1.5, 1.99, 2.0, 2.5, 3.0]
    lines = data_lines(analysis.plot_fast_p(hand.candidates, ps=ps))
    assert lines["vs eager (fp32)"] == [[p, f] for p, f in zip(ps, [2 / 3] * 4 + [0.0] * 3)]
    # vs compile: wa 1.6, wb 1.4
    assert lines["vs compile (fp32)"] == [[p, f] for p, f in zip(ps, [2 / 3] * 2 + [1 / 3]
                                                                 + [0.0] * 4)]  # fmt: skip
    assert lines["vs eager (bf16)"] == [[p, 1.0 if p < 3 else 0.0] for p in ps]
    assert "vs compile (bf16)" not in lines  # never measured: no line, not a line at zero


def test_status_breakdown_stacks_the_counts_of_each_operator(hand):
    fig = analysis.plot_status_breakdown(hand.candidates, by="operator")
    (ax,) = fig.axes
    labels = [t.get_text() for t in ax.get_yticklabels()]
    widths = {c.get_label(): dict(zip(labels, (p.get_width() for p in c.patches)))
              for c in ax.containers}  # fmt: skip
    assert widths["correct"]["seed (fp32)"] == 3 and widths["mismatch"]["seed (fp32)"] == 1
    assert widths["compile_error"]["llm_mutate (fp32)"] == 1
    assert widths["generation_failure"]["llm_crossover (fp32)"] == 1
    assert widths["timeout"]["offline_mutate (bf16)"] == 1
    assert "runtime_error" not in widths  # no such row: no bar
    assert sum(sum(w.values()) for w in widths.values()) == 14  # every row but the migrant
    by_model = analysis.plot_status_breakdown(hand.candidates, by="model")
    assert "m2 (fp32)" in [t.get_text() for t in by_model.axes[0].get_yticklabels()]


def test_lineage_tree_shows_ancestors_with_operators_and_speedups(hand):
    nodes, edges = analysis.ancestry(hand.candidates, cid("A0-3"))
    depth = dict(zip(nodes["candidate_id"], nodes["depth"]))
    assert depth == {cid("A0-3"): 0, cid("A0-2"): 1, cid("A0-m"): 1, cid("A0-0"): 2,
                     cid("A1-0"): 2}  # fmt: skip
    fig = analysis.plot_lineage_tree(hand.candidates, workload="builtin:wa")  # best: A0-3
    (ax,) = fig.axes
    edge_texts = sorted(t.get_text() for t in ax.texts if t.get_gid() == "edge")
    assert edge_texts == sorted(["llm_crossover\n2x", "llm_crossover\n2x",
                                 "llm_mutate\n1.25x", "migration"])  # fmt: skip
    node_texts = sorted(t.get_text() for t in ax.texts if t.get_gid() == "node")
    assert node_texts == sorted(["0#A0-3 2x", "0#A0-2 1.25x", "0 migrant", "0#A0-0 0.5x",
                                 "1#A1-0 0.625x"])  # fmt: skip
    assert renders(fig)


def test_island_diversity_is_the_spread_of_recent_members(hand):
    fig = analysis.plot_island_diversity(hand.candidates, window=3)
    line = data_lines(fig)["wa|triton|0"]
    # island 0's correct rows (the migrant joins its population, not its evaluations):
    # A0-0 .5 (x 1), A0-2 .6 (x 3), A0-m .625 (x 3), A0-3 2.0 (x 4); window of 3
    want = [[3, statistics.pstdev([0.5, 0.6])], [3, statistics.pstdev([0.5, 0.6, 0.625])],
            [4, statistics.pstdev([0.6, 0.625, 2.0])]]  # fmt: skip
    assert np.allclose(line, want)


def test_migration_effects_on_the_receiving_island(hand, real_dir):
    eff = analysis.migration_effects(hand.candidates)
    assert eff.drop(columns=["run"]).to_dict("records") == [{
        "island": "builtin:wa|triton|0", "from_island": "builtin:wa|triton|1", "step": 3,
        "migrant_id": cid("A0-m"), "original_id": cid("A1-0"), "migrant_fitness": 0.625,
        "best_before": 0.6, "best_after": 2.0,  # the migrant (.625) arrived after "before"
    }]  # fmt: skip
    fig = analysis.plot_migration_effects(hand.candidates)
    lines = data_lines(fig)
    assert lines["island best before"] == [[0, 0.6]] and lines["island best after"] == [[0, 2.0]]
    assert lines["migrant"] == [[0, 0.625]]

    rows = []  # the real run, by a loop over its rows
    for part in Path(real_dir, "candidates").glob("part-*.parquet"):
        rows += pq.read_table(part).to_pylist()
    migrants = [r for r in rows if r["is_migrant"]]
    assert migrants  # the premise: ring migration every 2 steps happened
    got = analysis.migration_effects(analysis.load_run(real_dir).candidates)
    assert len(got) == len(migrants)
    for m in migrants:
        mine = [r for r in rows if r["island"] == m["island"] and r["status"] == "correct"]
        later = [r["step"] for r in rows if r["is_migrant"] and r["island"] == m["island"]
                 and r["step"] > m["step"]]  # fmt: skip
        end = min(later, default=math.inf)
        before = max((r["fitness"] for r in mine if r["step"] < m["step"]), default=None)
        after = max(r["fitness"] for r in mine if r["step"] < end)
        g = got[got["migrant_id"] == m["candidate_id"]].iloc[0]
        assert (g["best_before"], g["best_after"]) == (pytest.approx(before), pytest.approx(after))


def test_every_plot_draws_on_the_axes_it_is_given(hand):
    fig = Figure()
    axes = fig.subplots(2, 3).ravel()
    c = hand.candidates
    drawn = [
        analysis.plot_trajectories(c, ax=axes[0]),
        analysis.plot_fast_p(c, ax=axes[1]),
        analysis.plot_status_breakdown(c, ax=axes[2]),
        analysis.plot_lineage_tree(c, cid("A0-2"), ax=axes[3]),
        analysis.plot_island_diversity(c, ax=axes[4]),
        analysis.plot_migration_effects(c, ax=axes[5]),
    ]
    assert all(f is fig for f in drawn)
    assert all(ax.has_data() or ax.texts for ax in axes) and renders(fig)
