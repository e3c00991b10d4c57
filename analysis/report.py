"""`evo report`: one self-contained HTML file over one or more runs.

Per run: fast_p and geomean tables, a per-workload table (best speedup vs eager and vs
torch.compile, SOL fraction, status counts, cost, the best source) and the plots, embedded as
PNG data URIs. With several runs, a side-by-side comparison for ablations first: how each run
searched (operators, models, islands per workload) and what it found. Reads only Parquet.
"""

from __future__ import annotations

import base64
import html
import io
import math
from datetime import UTC, datetime

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from analysis import plots
from analysis.load import AnalysisError, Lineage, load_runs, read_sources
from analysis.metrics import (
    DEFAULT_PS,
    STATUSES,
    WORKLOAD_KEYS,
    best_per_workload,
    correctness_rate,
    fast_p_table,
    geomean_speedup,
    seed_outcomes,
    status_counts,
    workload_cost,
)

# Candidate columns the report decodes (`source` only for the best candidates, later).
COLUMNS = [
    "run_id", "candidate_id", "workload", "backend", "island", "step", "parent_ids",
    "operator", "model", "llm_call_id", "status", "precision", "comparable", "runtime_ms",
    "speedup_vs_eager", "speedup_vs_compile", "sol_fraction", "fitness", "eval_seconds",
    "created_at", "is_migrant", "device", "reason", "source_hash",
]  # fmt: skip
_CPU_NOTE = (
    "No row of this run was timed comparably (a CPU/interpreter run): its speed figures use "
    "interpreter timings and say nothing about a GPU."
)
_MAX_TREES = 8  # lineage trees drawn per run (one per workload, the first ones)

_CSS = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1200px; color: #222; }
h1 { font-size: 1.6em; } h2 { border-bottom: 1px solid #ccc; padding-bottom: .2em; }
table { border-collapse: collapse; margin: .8em 0; font-size: .88em; }
th, td { border: 1px solid #ccc; padding: .25em .55em; text-align: right; }
th { background: #f2f2f2; } td.text, th.text { text-align: left; }
img { max-width: 100%; display: block; margin: .8em 0; border: 1px solid #eee; }
pre { background: #f7f7f7; padding: .6em; overflow-x: auto; font-size: .8em; max-height: 30em; }
.wide { overflow-x: auto; } td details { text-align: left; }
.note { background: #fff6d5; border-left: 4px solid #e0b000; padding: .4em .8em; }
"""


def _num(v, spec: str = ".3g", suffix: str = "") -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)) or v is pd.NA:
        return "-"
    return f"{format(v, spec)}{suffix}"


def _table(
    frame: pd.DataFrame, formats: dict[str, str], cls: str = "", raw: tuple[str, ...] = ()
) -> str:
    """An HTML table; `formats` maps a column to a format spec, columns in `raw` hold HTML,
    the others print as escaped text."""
    head = "".join(
        f'<th class="{"" if c in formats else "text"}">{html.escape(str(c))}</th>'
        for c in frame.columns
    )
    body = []
    for row in frame.itertuples(index=False):
        cells = []
        for c, v in zip(frame.columns, row):
            if c in formats:
                cells.append(f"<td>{_num(v, formats[c])}</td>")
            else:
                text = v if c in raw else html.escape(str(v))
                cells.append(f'<td class="text">{text}</td>')
        body.append("<tr>" + "".join(cells) + "</tr>")
    body_html = "".join(body)
    return f'<table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{body_html}</tbody></table>'


def _img(fig: Figure, alt: str) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    data = base64.b64encode(buf.getvalue()).decode()
    return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{data}">'


def workload_table(
    lineage: Lineage, include_incomparable: bool = False, sources: bool = True
) -> pd.DataFrame:
    """The per-workload table of the report: best speedup vs eager and vs torch.compile (each
    the best against its own baseline), SOL fraction of the best vs eager, status counts,
    cost (evaluations, eval seconds, tokens, dollars, dollars per unit of speedup gained) and
    the best source (`best source`, HTML, when `sources`)."""
    c = lineage.candidates
    eager = best_per_workload(c, "eager", include_incomparable)
    compile_ = best_per_workload(c, "compile", include_incomparable)
    cost = workload_cost(c, lineage.llm_calls, "eager", include_incomparable)
    counts = status_counts(c, "workload")
    table = cost[WORKLOAD_KEYS + ["evaluations", "eval_seconds", "tokens", "dollars",
                                  "dollars_per_speedup"]]  # fmt: skip
    if not eager.empty:
        best = eager[WORKLOAD_KEYS + ["candidate_id", "speedup", "sol_fraction"]].rename(
            columns={"speedup": "best vs eager", "candidate_id": "best"}
        )
        table = table.merge(best, on=WORKLOAD_KEYS, how="left")
    else:
        table = table.assign(**{"best vs eager": np.nan, "sol_fraction": np.nan, "best": None})
    if not compile_.empty:
        table = table.merge(
            compile_[WORKLOAD_KEYS + ["speedup"]].rename(columns={"speedup": "best vs compile"}),
            on=WORKLOAD_KEYS,
            how="left",
        )
    else:
        table["best vs compile"] = np.nan
    present = [s for s in STATUSES if counts[s].any()] or ["correct"]
    counts["statuses"] = [
        ", ".join(f"{s} {int(r[s])}" for s in present if r[s]) or "-" for _, r in counts.iterrows()
    ]
    table = table.merge(
        counts[["run", "precision", "workload", "statuses"]],
        on=["run", "precision", "workload"],
        how="left",
    )
    if sources:
        texts: dict[str, str] = {}
        for run, rows in table.dropna(subset=["best"]).groupby("run"):
            texts.update(read_sources(lineage.paths[run], rows["best"].tolist()))
        table["best source"] = [
            "-"
            if not isinstance(b, str)
            else f"<details><summary>{html.escape(b)}</summary>"
            f"<pre>{html.escape(texts.get(b, '(source not found)'))}</pre></details>"
            for b in table["best"]
        ]
    cols = [*WORKLOAD_KEYS, "best vs eager", "best vs compile", "sol_fraction", "statuses",
            "evaluations", "eval_seconds", "tokens", "dollars", "dollars_per_speedup"]  # fmt: skip
    return table[cols + (["best source"] if sources else [])]


def comparison_table(lineage: Lineage, include_incomparable: bool = False) -> pd.DataFrame:
    """One row per run, for ablations: how it searched (operators, models, islands per
    workload) and what it found (fast_1 and geomean vs eager, correct rate, dollars)."""
    c = lineage.candidates
    rows = []
    fast = fast_p_table(c, DEFAULT_PS, include_incomparable)
    geo = geomean_speedup(c, include_incomparable)
    rate = correctness_rate(c, "operator")
    cost = workload_cost(c, lineage.llm_calls, "eager", include_incomparable)
    for run in lineage.runs:
        mine = c[c["run"].eq(run) & ~c["is_migrant"].fillna(False).astype(bool)]
        models = sorted({m for m in mine["model"].fillna("") if m})
        f1 = fast[fast["run"].eq(run) & fast["baseline"].eq("eager")]["fast_1"]
        g = geo[geo["run"].eq(run) & geo["baseline"].eq("eager")]["geomean"]
        r = rate[rate["run"].eq(run)]
        rows.append(
            {
                "run": run,
                "operators": ", ".join(sorted(mine["operator"].dropna().unique())),
                "models": ", ".join(models) or "offline",
                "islands per workload": mine.groupby("workload")["island"].nunique().max(),
                "workloads": mine["workload"].nunique(),
                "evaluations": int((~mine["status"].eq("generation_failure")).sum()),
                "correct rate": r["correct"].sum() / max(r["rows"].sum(), 1),
                "fast_1 vs eager": f1.mean() if len(f1) else np.nan,
                "geomean best vs eager": g.mean() if len(g) else np.nan,
                "dollars": cost[cost["run"].eq(run)]["dollars"].sum(),
            }
        )
    return pd.DataFrame(rows)


def _no_comparable_row(candidates: pd.DataFrame) -> bool:
    return not candidates["comparable"].fillna(False).astype(bool).any()


def _run_section(lineage: Lineage, run: str, include_incomparable: bool | None) -> str:
    sub = lineage.select(run)
    c, calls = sub.candidates, sub.llm_calls
    out = [f"<h2>Run {html.escape(run)}</h2>"]
    if include_incomparable is None:
        include_incomparable = _no_comparable_row(c)
        if include_incomparable:
            out.append(f'<p class="note">{_CPU_NOTE}</p>')
    devices = sorted({d for d in c["device"].dropna() if d})
    out.append(
        f"<p>{html.escape(lineage.paths[run])}: {len(c)} rows, run id(s) "
        f"{html.escape(', '.join(sorted(c['run_id'].dropna().unique())))}, device(s) "
        f"{html.escape(', '.join(devices) or '-')}.</p>"
    )
    out.append("<h3>fast_p</h3>")
    fast = fast_p_table(c, DEFAULT_PS, include_incomparable)
    out.append(_table(fast, {k: ".3f" for k in fast.columns if k.startswith("fast_")}, "fast_p"))
    geo = geomean_speedup(c, include_incomparable)
    out.append(_table(geo, {"geomean": ".3f"}, "geomean"))
    out.append("<h3>Per workload</h3>")
    wt = workload_table(sub, include_incomparable)
    fmt = {"best vs eager": ".3f", "best vs compile": ".3f", "sol_fraction": ".3f",
           "evaluations": "d", "eval_seconds": ".1f", "tokens": ".0f", "dollars": ".4f",
           "dollars_per_speedup": ".4g"}  # fmt: skip
    out.append('<div class="wide">')
    out.append(_table(wt, fmt, "workloads", raw=("best source",)))
    out.append("</div>")
    out.append("<h3>Trajectories</h3>")
    out.append(_img(plots.plot_trajectories(c, "evaluations", "workload",
                                            include_incomparable=include_incomparable),
                    "best so far against evaluations, per workload"))  # fmt: skip
    out.append(_img(plots.plot_trajectories(c, "wall", "island",
                                            include_incomparable=include_incomparable),
                    "best so far against wall time, per island"))  # fmt: skip
    if len(calls) and calls["cost_usd"].fillna(0).sum() > 0:
        out.append(_img(plots.plot_trajectories(c, "dollars", "workload", llm_calls=calls,
                                                include_incomparable=include_incomparable),
                        "best so far against dollars, per workload"))  # fmt: skip
    out.append(
        _img(plots.plot_fast_p(c, include_incomparable=include_incomparable), "fast_p against p")
    )
    out.append("<h3>Statuses</h3>")
    out.append(_img(plots.plot_status_breakdown(c, "operator"), "statuses by operator"))
    out.append(_img(plots.plot_status_breakdown(c, "model"), "statuses by model"))
    seeds = c[c["operator"].eq("seed")]
    if len(seeds):  # where each island started, and how each seed fared
        src = read_sources(lineage.paths[run], list(seeds["candidate_id"]))
        table = seed_outcomes(seeds.assign(source=seeds["candidate_id"].map(src)), sub.events)
        out.append("<h3>Seeds</h3>")
        out.append(_table(table.drop(columns=["run"]), {}, "seeds"))
    out.append("<h3>How the best kernels came to be</h3>")
    for workload in sorted(c["workload"].dropna().unique())[:_MAX_TREES]:
        try:
            fig = plots.plot_lineage_tree(c, workload=workload)
        except ValueError:  # no correct candidate for this workload
            continue
        out.append(_img(fig, f"lineage of the best {workload} candidate"))
    out.append("<h3>Islands and migration</h3>")
    out.append(_img(plots.plot_island_diversity(c), "island diversity"))
    out.append(_img(plots.plot_migration_effects(c), "migration effects"))
    return "\n".join(out)


def render(lineage: Lineage, include_incomparable: bool | None = None) -> str:
    """The report's HTML. `include_incomparable=None` lets interpreter timings count only in
    a run that has no comparable row at all (a CPU run), and says so in its section."""
    c = lineage.candidates
    now = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    parts = [
        "<!DOCTYPE html><html><head><meta charset='utf-8'>",
        f"<title>evo report: {html.escape(', '.join(lineage.runs))}</title>",
        f"<style>{_CSS}</style></head><body>",
        f"<h1>evo report: {html.escape(', '.join(lineage.runs))}</h1>",
        f"<p>Generated {now} from the runs' Parquet lineage.</p>",
    ]
    if len(lineage.runs) > 1:
        parts.append("<h2>Comparison</h2>")
        every = include_incomparable
        if every is None:  # interpreter timings only when no run has better ones
            every = _no_comparable_row(c)
            if every:
                parts.append(f'<p class="note">{_CPU_NOTE}</p>')
        comp = comparison_table(lineage, every)
        fmt = {"islands per workload": "d", "workloads": "d", "evaluations": "d",
               "correct rate": ".3f", "fast_1 vs eager": ".3f",
               "geomean best vs eager": ".3f", "dollars": ".4f"}  # fmt: skip
        parts.append(_table(comp, fmt, "comparison"))
        best = best_per_workload(c, "eager", every)
        if not best.empty:
            side = best.pivot_table(
                index=["workload", "backend", "precision"], columns="run", values="speedup"
            ).reset_index()
            side.columns.name = None
            parts.append("<p>Best speedup vs eager per workload, side by side:</p>")
            parts.append(_table(side, {r: ".3f" for r in lineage.runs}, "side-by-side"))
        fig = plots.plot_trajectories(c, include_incomparable=every)
        parts.append(_img(fig, "best so far per workload, every run"))
    for run in lineage.runs:
        parts.append(_run_section(lineage, run, include_incomparable))
    parts.append("</body></html>")
    return "\n".join(parts)


def write_report(
    run_dirs: list[str], out: str = "report.html", include_incomparable: bool | None = None
) -> str:
    """Load the runs (without sources), render the report and write it to `out`."""
    lineage = load_runs(list(run_dirs), columns=COLUMNS)
    text = render(lineage, include_incomparable)
    try:
        with open(out, "w", encoding="utf-8") as f:
            f.write(text)
    except OSError as e:
        raise AnalysisError(f"cannot write the report to {out!r}: {e.strerror}") from None
    return out
