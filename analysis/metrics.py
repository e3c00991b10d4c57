"""Metrics of a run's lineage: fast_p, geomean speedups, correctness rates, costs, SOL.

Every function takes the `candidates` frame of `load_run`/`load_runs` (and `llm_calls` where
it needs tokens or dollars) and returns a tidy DataFrame, one row per group. Groups always
start with `run` and `precision`: every metric is per precision policy. Rules shared by all:

- Migrant rows (`is_migrant`) are copies of a candidate judged in another island: they are
  not evaluations and count nowhere here.
- A row without a precision (a generation failure, which no one judged) takes its run's
  policy.
- Speed metrics count only rows that are `correct`, `comparable` (timed on the real device,
  not the CPU interpreter) and have a speedup for the baseline. `include_incomparable=True`
  lifts the `comparable` condition (for looking at a CPU run; never for published figures).
- Rows are in recording order: `created_at`, then the island's `step`.
"""

from __future__ import annotations

import json
import re

import numpy as np
import pandas as pd

DEFAULT_PS: tuple[float, ...] = (0.0, 1.0, 1.5, 2.0)
BASELINES: dict[str, str] = {"eager": "speedup_vs_eager", "compile": "speedup_vs_compile"}
STATUSES: tuple[str, ...] = (
    "correct", "mismatch", "runtime_error", "compile_error", "timeout", "rejected",
    "generation_failure",
)  # fmt: skip
WORKLOAD_KEYS = ["run", "precision", "workload", "backend"]
NO_MODEL = "(none)"


def _speed_column(baseline: str) -> str:
    if baseline not in BASELINES:
        raise ValueError(f"baseline {baseline!r}: one of {', '.join(BASELINES)}")
    return BASELINES[baseline]


def evaluated(candidates: pd.DataFrame) -> pd.DataFrame:
    """The rows a run evaluated, in recording order: migrants left out, a missing precision
    filled with the run's policy (its most common one), `comparable` as a plain bool."""
    df = candidates
    if "is_migrant" in df:
        df = df[~df["is_migrant"].fillna(False).astype(bool)]
    df = df.copy()
    if "run" not in df:
        df["run"] = df["run_id"] if "run_id" in df else "run"
    if "precision" in df:
        prec = df["precision"].where(df["precision"].fillna("") != "")
        known = prec.dropna()
        policy = known.groupby(df.loc[known.index, "run"]).agg(lambda s: s.mode().iat[0])
        df["precision"] = prec.fillna(df["run"].map(policy)).fillna("unknown").astype(str)
    else:
        df["precision"] = "unknown"
    if "comparable" in df:
        df["comparable"] = df["comparable"].fillna(False).astype(bool)
    order = [c for c in ("run", "created_at", "step") if c in df]
    return df.sort_values(order, kind="stable").reset_index(drop=True)


def speed(df: pd.DataFrame, baseline: str, include_incomparable: bool = False) -> pd.Series:
    """Each row's speedup against the baseline where it counts toward speed metrics, else NaN."""
    col = _speed_column(baseline)
    counts = df["status"].eq("correct") & df[col].notna()
    if not include_incomparable:
        counts &= df["comparable"]
    return df[col].where(counts)


def _label_models(model: pd.Series) -> pd.Series:
    return model.fillna("").astype(str).replace("", NO_MODEL)


def best_per_workload(
    candidates: pd.DataFrame, baseline: str = "eager", include_incomparable: bool = False
) -> pd.DataFrame:
    """The best candidate of each (run, precision, workload, backend): the counting row with
    the highest speedup against `baseline` (the earliest one on a tie).

    Columns: the keys, `candidate_id`, `speedup` (against `baseline`), `speedup_vs_eager`,
    `speedup_vs_compile`, `sol_fraction` (the fraction of the speed-of-light floor the best
    candidate reaches: `sol_ms / runtime_ms`), `runtime_ms`, `operator`, `island`. Workloads
    with no counting row are absent.
    """
    df = evaluated(candidates)
    df["speedup"] = speed(df, baseline, include_incomparable)
    ok = df[df["speedup"].notna()]
    if ok.empty:
        return pd.DataFrame(columns=[*WORKLOAD_KEYS, "candidate_id", "speedup"])
    best = ok.loc[ok.groupby(WORKLOAD_KEYS, sort=True)["speedup"].idxmax()]
    cols = ["candidate_id", "speedup", "speedup_vs_eager", "speedup_vs_compile", "sol_fraction",
            "runtime_ms", "operator", "island"]  # fmt: skip
    return best[WORKLOAD_KEYS + [c for c in cols if c in best]].reset_index(drop=True)


def _best_speedups(df: pd.DataFrame, baseline: str, include_incomparable: bool) -> pd.DataFrame:
    """Per (run, precision, backend, workload): the best counting speedup (NaN if none), and
    whether the (run, precision, backend) group has any counting row at all."""
    s = speed(df, baseline, include_incomparable)
    keys = ["run", "precision", "backend", "workload"]
    best = s.groupby([df[k] for k in keys], sort=True).max().rename("best").reset_index()
    best["measured"] = best.groupby(keys[:3])["best"].transform("count") > 0
    return best


def fast_p(
    candidates: pd.DataFrame,
    ps: tuple[float, ...] | list[float] = DEFAULT_PS,
    include_incomparable: bool = False,
) -> pd.DataFrame:
    """KernelBench's fast_p, against eager and against torch.compile.

    fast_p = (1/N) * #{workloads whose best candidate is correct and has speedup > p}, over
    the N workloads with at least one evaluated row in the (run, precision, backend) group;
    a workload with no counting row counts as not fast. fast_0 is the share of workloads
    with a correct (timed) candidate. NaN where the group has no counting row against that
    baseline at all (nothing was timed against it: a CPU run, a compile baseline that was
    never measured).

    One row per (run, precision, backend, baseline, p): `fast_p`, `fast` (workloads counted),
    `workloads` (N).
    """
    df = evaluated(candidates)
    out = []
    for baseline in BASELINES:
        best = _best_speedups(df, baseline, include_incomparable)
        groups = best.groupby(["run", "precision", "backend"], sort=True)
        n, measured = groups.size(), groups["measured"].first()
        for p in ps:
            fast = (best["best"] > p).groupby([best[k] for k in n.index.names]).sum()
            frame = pd.DataFrame({"fast": fast.astype(int), "workloads": n, "measured": measured})
            frame = frame.reset_index()
            frame.insert(3, "baseline", baseline)
            frame.insert(4, "p", float(p))
            frame["fast_p"] = (frame["fast"] / frame["workloads"]).where(frame["measured"])
            out.append(frame)
    cols = ["run", "precision", "backend", "baseline", "p", "fast_p", "fast", "workloads"]
    return pd.concat(out, ignore_index=True)[cols].sort_values(cols[:5], ignore_index=True)


def fast_p_table(candidates: pd.DataFrame, ps=DEFAULT_PS, include_incomparable=False):
    """`fast_p` as a wide table: one row per (run, precision, backend, baseline), one column
    per p (named `fast_1.5` etc.)."""
    long = fast_p(candidates, ps, include_incomparable)
    keys = ["run", "precision", "backend", "baseline"]
    wide = long.pivot(index=keys, columns="p", values="fast_p")
    wide.columns = [f"fast_{p:g}" for p in wide.columns]
    wide.insert(0, "workloads", long.groupby(keys)["workloads"].first())
    return wide.reset_index()


def geomean_speedup(candidates: pd.DataFrame, include_incomparable: bool = False):
    """The geometric mean, over workloads, of each workload's best speedup, against eager and
    against torch.compile: exp(mean(log(best_w))) over the workloads that have a counting row.

    One row per (run, precision, backend, baseline): `geomean`, `workloads` (in the mean),
    `of` (workloads evaluated). NaN where no workload has a counting row.
    """
    df = evaluated(candidates)
    out = []
    for baseline in BASELINES:
        best = _best_speedups(df, baseline, include_incomparable)
        best["log"] = np.log(best["best"])
        g = best.groupby(["run", "precision", "backend"], sort=True)
        frame = pd.DataFrame(
            {
                "geomean": np.exp(g["log"].mean()),
                "workloads": g["best"].count(),
                "of": g.size(),
            }
        ).reset_index()
        frame.insert(3, "baseline", baseline)
        out.append(frame)
    return pd.concat(out, ignore_index=True).sort_values(
        ["run", "precision", "backend", "baseline"], ignore_index=True
    )


def correctness_rate(candidates: pd.DataFrame, by: str = "operator") -> pd.DataFrame:
    """The share of an operator's (or a model's) evaluated rows that are `correct`.

    rate = correct / rows, where rows counts every non-migrant row the operator (model)
    produced, generation failures included: they are proposals that yielded nothing. Offline
    operators and seeds have no model (`(none)`). Not a speed metric: `comparable` plays no
    part. One row per (run, precision, `by`): `rows`, `correct`, `rate`.
    """
    if by not in ("operator", "model"):
        raise ValueError(f"by={by!r}: operator or model")
    df = evaluated(candidates)
    key = _label_models(df["model"]) if by == "model" else df["operator"].fillna("")
    correct = df["status"].eq("correct")
    g = correct.groupby([df["run"], df["precision"], key.rename(by)], sort=True)
    frame = pd.DataFrame({"rows": g.size(), "correct": g.sum().astype(int)}).reset_index()
    frame["rate"] = frame["correct"] / frame["rows"]
    return frame


def status_counts(candidates: pd.DataFrame, by: str = "operator") -> pd.DataFrame:
    """Rows per status (columns, in `STATUSES` order) for each (run, precision, `by`), where
    `by` is `operator`, `model`, `workload` or `island`; migrants left out."""
    df = evaluated(candidates)
    key = _label_models(df["model"]) if by == "model" else df[by].fillna("")
    table = pd.crosstab([df["run"], df["precision"], key.rename(by)], df["status"])
    table = table.reindex(
        columns=[*STATUSES, *sorted(set(table.columns) - set(STATUSES))], fill_value=0
    )
    table.columns.name = None
    return table.reset_index()


def _with_costs(df: pd.DataFrame, llm_calls: pd.DataFrame | None) -> pd.DataFrame:
    """Adds per-row `evaluation` (1 unless a generation failure), `tokens` and `dollars` (of
    the row's LLM call, joined on `llm_call_id`; 0 without one)."""
    df["evaluation"] = (~df["status"].eq("generation_failure")).astype(int)
    df["tokens"] = 0.0
    df["dollars"] = 0.0
    if llm_calls is None or llm_calls.empty or "llm_call_id" not in df:
        return df
    calls = llm_calls.assign(
        tokens=llm_calls["input_tokens"].fillna(0) + llm_calls["output_tokens"].fillna(0),
        dollars=llm_calls["cost_usd"].fillna(0.0),
    )
    if "run" not in calls:
        calls["run"] = calls["run_id"]
    per_call = calls.groupby(["run", "llm_call_id"])[["tokens", "dollars"]].sum()
    key = pd.MultiIndex.from_arrays([df["run"], df["llm_call_id"].fillna("")])
    joined = per_call.reindex(key)
    df["tokens"] = joined["tokens"].fillna(0.0).to_numpy()
    df["dollars"] = joined["dollars"].fillna(0.0).to_numpy()
    return df


def cost_to_first_correct_and_best(
    candidates: pd.DataFrame,
    llm_calls: pd.DataFrame | None = None,
    baseline: str = "eager",
    include_incomparable: bool = False,
) -> pd.DataFrame:
    """Evaluations, tokens and dollars a workload took to reach its first correct candidate
    and its best one (as in `best_per_workload`), counted in recording order up to and
    including that row.

    Evaluations count rows sent to the fitness service (generation failures are not);
    tokens (input + output) and dollars are those of the rows' LLM calls. A call whose child
    got no row (a duplicate) belongs to no workload and is left out here. One row per (run,
    precision, workload, backend): `evals_to_first_correct`, `tokens_to_first_correct`,
    `dollars_to_first_correct`, `evals_to_best`, `tokens_to_best`, `dollars_to_best` (NaN
    where there is no such candidate).
    """
    df = _with_costs(evaluated(candidates), llm_calls)
    g = df.groupby(WORKLOAD_KEYS, sort=False)
    for c in ("evaluation", "tokens", "dollars"):
        df[f"cum_{c}"] = g[c].cumsum()
    keys = df[WORKLOAD_KEYS].drop_duplicates().sort_values(WORKLOAD_KEYS)
    out = keys.set_index(WORKLOAD_KEYS)
    first = df[df["status"].eq("correct")].groupby(WORKLOAD_KEYS).head(1)
    df["speedup"] = speed(df, baseline, include_incomparable)
    ok = df[df["speedup"].notna()]
    best = ok.loc[ok.groupby(WORKLOAD_KEYS)["speedup"].idxmax()] if len(ok) else ok
    for name, rows in (("first_correct", first), ("best", best)):
        at = rows.set_index(WORKLOAD_KEYS)
        out[f"evals_to_{name}"] = at["cum_evaluation"].astype(float)
        out[f"tokens_to_{name}"] = at["cum_tokens"]
        out[f"dollars_to_{name}"] = at["cum_dollars"]
    return out.reset_index()


def workload_cost(
    candidates: pd.DataFrame,
    llm_calls: pd.DataFrame | None = None,
    baseline: str = "eager",
    include_incomparable: bool = False,
) -> pd.DataFrame:
    """What each workload cost, and what it cost per unit of speedup gained.

    Per (run, precision, workload, backend): `rows` (proposals), `evaluations`,
    `eval_seconds` (the fitness service's time), `tokens`, `dollars`; `start_speedup`: the
    best counting speedup among the rows with no parent (seeds, initial drafts); `best_speedup`
    (as in `best_per_workload`); `gain` = best_speedup - start_speedup; and cost per unit of
    speedup, `dollars_per_speedup` = dollars / gain, `evaluations_per_speedup` = evaluations / gain,
    `eval_seconds_per_speedup` = eval_seconds / gain (NaN unless gain > 0).
    """
    df = _with_costs(evaluated(candidates), llm_calls)
    df["speedup"] = speed(df, baseline, include_incomparable)
    roots = df["parent_ids"].map(lambda p: p is None or len(p) == 0)
    df["start"] = df["speedup"].where(roots)
    g = df.groupby(WORKLOAD_KEYS, sort=True)
    out = pd.DataFrame(
        {
            "rows": g.size(),
            "evaluations": g["evaluation"].sum(),
            "eval_seconds": g["eval_seconds"].sum(min_count=1).fillna(0.0),
            "tokens": g["tokens"].sum(),
            "dollars": g["dollars"].sum(),
            "start_speedup": g["start"].max(),
            "best_speedup": g["speedup"].max(),
        }
    )
    out["gain"] = out["best_speedup"] - out["start_speedup"]
    gain = out["gain"].where(out["gain"] > 0)
    for c in ("dollars", "evaluations", "eval_seconds"):
        out[f"{c}_per_speedup"] = out[c] / gain
    return out.reset_index()


def sol_fraction_of_best(
    candidates: pd.DataFrame, baseline: str = "eager", include_incomparable: bool = False
) -> pd.DataFrame:
    """The speed-of-light fraction (`sol_ms / runtime_ms`: 1.0 is the roofline floor) of each
    workload's best candidate. One row per (run, precision, workload, backend)."""
    best = best_per_workload(candidates, baseline, include_incomparable)
    cols = [*WORKLOAD_KEYS, "candidate_id", "sol_fraction"]
    if best.empty:
        return pd.DataFrame(columns=cols)
    return best[cols]


_COMPILER_SEED = re.compile(
    r"A seed from torch\.compile: Inductor's Triton for .*? \(mode ([\w-]+)"
)


def seed_kind(source: str | None) -> str:
    """Where a seed came from: `inductor:<mode>` for a compiler seed (its docstring says so),
    else `builtin`."""
    m = _COMPILER_SEED.search(source or "")
    return f"inductor:{m.group(1)}" if m else "builtin"


def _short_reason(reason: str | None) -> str:
    """The first line of a reason, without its source line number."""
    lines = (reason or "").strip().splitlines()
    return re.sub(r" at line \d+$", "", lines[0]) if lines else ""


def seed_outcomes(candidates: pd.DataFrame, events: pd.DataFrame | None = None) -> pd.DataFrame:
    """Every seed a run started from, once per (run, workload, backend, source): `seed` (its
    kind, see `seed_kind`; needs the `source` column), `status` and `reason` (of its first
    verdict, islands judge the same seed alike; empty when correct). With `events`, also
    each compiler seed that could not be made (a `seed` event with made=false) as status
    `not made`, with its reason. Columns: run, workload, backend, seed, status, reason."""
    cols = ["run", "workload", "backend", "seed", "status", "reason"]
    df = evaluated(candidates)
    df = df[df["operator"].eq("seed")]
    rows = []
    for _, r in df.drop_duplicates(["run", "workload", "backend", "source_hash"]).iterrows():
        reason = "" if r["status"] == "correct" else _short_reason(r["reason"])
        rows.append([r["run"], r["workload"], r["backend"], seed_kind(r.get("source")),
                     r["status"], reason])  # fmt: skip
    if events is not None and len(events):
        for _, e in events[events["kind"].eq("seed")].iterrows():
            d = json.loads(e["detail"] or "{}")
            if d.get("made") is False:
                mode = d.get("mode")
                seed = f"inductor:{mode}" if mode else "inductor"
                rows.append([e.get("run", ""), d.get("workload", ""), "triton", seed,
                             "not made", _short_reason(d.get("reason"))])  # fmt: skip
    return pd.DataFrame(rows, columns=cols)
