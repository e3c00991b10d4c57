"""`analysis.metrics` against values computed by hand: on a small real CPU run (from its
Parquet rows, in plain loops) and on a hand-made lineage (values worked out from its rows)."""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from pathlib import Path

import pyarrow.parquet as pq
import pytest

import analysis
from tests.analysis_lineages import cid, real_run, write_hand_made_run

approx = pytest.approx


@pytest.fixture(scope="session")
def real_dir(ray_cluster, tmp_path_factory) -> str:
    return real_run(tmp_path_factory)


@pytest.fixture(scope="module")
def hand(tmp_path_factory) -> analysis.Lineage:
    return analysis.load_run(write_hand_made_run(tmp_path_factory.mktemp("hand") / "h"))


def parquet_rows(run_dir: str) -> list[dict]:
    """Every committed candidate row, read with pyarrow alone, in recording order."""
    rows = []
    for part in sorted(Path(run_dir, "candidates").glob("part-*.parquet")):
        if Path(f"{part}.ok").exists():
            rows += pq.read_table(part).to_pylist()
    return sorted(rows, key=lambda r: (r["created_at"], r["step"]))


def one(frame, **where):
    """The single row of `frame` matching `where` (column == value)."""
    for k, v in where.items():
        frame = frame[frame[k] == v]
    assert len(frame) == 1, (where, frame)
    return frame.iloc[0]


# --- the small real run (CPU: nothing is comparable, so speed metrics need the flag) -------


def test_a_cpu_run_has_no_comparable_speed_metrics(real_dir):
    rows = parquet_rows(real_dir)
    assert rows and not any(r["comparable"] for r in rows)  # the premise
    run = analysis.load_run(real_dir)
    table = analysis.fast_p(run.candidates)
    assert table["fast_p"].isna().all() and set(table["workloads"]) == {2}
    assert analysis.geomean_speedup(run.candidates)["geomean"].isna().all()
    assert analysis.best_per_workload(run.candidates).empty


def test_real_run_fast_p_and_geomean_match_a_hand_count(real_dir):
    rows = [r for r in parquet_rows(real_dir) if not r["is_migrant"]]
    best: dict[str, float] = {}
    for r in rows:
        s = r["speedup_vs_eager"]
        if r["status"] == "correct" and s is not None:
            best[r["workload"]] = max(best.get(r["workload"], 0.0), s)
    workloads = {r["workload"] for r in rows}
    assert len(best) == len(workloads) == 2
    # thresholds between, below and above the two bests make every count differ
    lo, hi = sorted(best.values())
    ps = (0.0, lo / 2, (lo + hi) / 2, hi * 2)
    got = analysis.fast_p(analysis.load_run(real_dir).candidates, ps, include_incomparable=True)
    eager = got[got["baseline"] == "eager"].sort_values("p")
    want = [sum(b > p for b in best.values()) / len(workloads) for p in ps]
    assert want == [1.0, 1.0, 0.5, 0.0]
    assert eager["fast_p"].tolist() == approx(want)
    assert got[got["baseline"] == "compile"]["fast_p"].isna().all()  # no compile on the CPU
    geo = analysis.geomean_speedup(analysis.load_run(real_dir).candidates, True)
    g = one(geo, baseline="eager")
    assert g["geomean"] == approx(math.exp(sum(math.log(b) for b in best.values()) / 2))
    assert (g["workloads"], g["of"]) == (2, 2)


def test_real_run_correctness_rates_and_status_counts_match_a_hand_count(real_dir):
    rows = [r for r in parquet_rows(real_dir) if not r["is_migrant"]]
    run = analysis.load_run(real_dir)
    by_op: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for r in rows:
        by_op[r["operator"]][0] += 1
        by_op[r["operator"]][1] += r["status"] == "correct"
    rates = analysis.correctness_rate(run.candidates, "operator")
    assert set(rates["operator"]) == set(by_op) >= {"seed", "offline_mutate"}
    for op, (n, ok) in by_op.items():
        got = one(rates, operator=op)
        assert (got["rows"], got["correct"], got["rate"]) == (n, ok, approx(ok / n))
    models = analysis.correctness_rate(run.candidates, "model")
    assert one(models, model="(none)")["rows"] == len(rows)  # offline: no model
    counts = analysis.status_counts(run.candidates, "workload")
    for w in {r["workload"] for r in rows}:
        hand = Counter(r["status"] for r in rows if r["workload"] == w)
        got = one(counts, workload=w)
        assert {s: got[s] for s in analysis.metrics.STATUSES if got[s]} == dict(hand)


def test_real_run_costs_to_first_correct_and_best_match_a_hand_count(real_dir):
    rows = [r for r in parquet_rows(real_dir) if not r["is_migrant"]]
    run = analysis.load_run(real_dir)
    got = analysis.cost_to_first_correct_and_best(run.candidates, run.llm_calls,
                                                  include_incomparable=True)  # fmt: skip
    cost = analysis.workload_cost(run.candidates, run.llm_calls, include_incomparable=True)
    for w in sorted({r["workload"] for r in rows}):
        mine = [r for r in rows if r["workload"] == w]
        evals, first, best, best_at = 0, None, -1.0, None
        for r in mine:
            evals += r["status"] != "generation_failure"
            if r["status"] == "correct" and first is None:
                first = evals
            s = r["speedup_vs_eager"]
            if r["status"] == "correct" and s is not None and s > best:
                best, best_at = s, evals
        g = one(got, workload=w)
        assert (g["evals_to_first_correct"], g["evals_to_best"]) == (first, best_at)
        assert g["tokens_to_best"] == 0 and g["dollars_to_best"] == 0  # offline: no calls
        c = one(cost, workload=w)
        start = max(r["speedup_vs_eager"] for r in mine if not r["parent_ids"])
        assert c["evaluations"] == evals and c["rows"] == len(mine)
        assert c["eval_seconds"] == approx(sum(r["eval_seconds"] or 0 for r in mine))
        assert (c["start_speedup"], c["best_speedup"]) == (approx(start), approx(best))
        assert c["gain"] == approx(best - start)
        if best > start:
            assert c["evaluations_per_speedup"] == approx(evals / (best - start))
        else:
            assert math.isnan(c["evaluations_per_speedup"])


def test_real_run_sol_fraction_of_the_best_is_the_best_rows_own(real_dir):
    rows = [r for r in parquet_rows(real_dir) if not r["is_migrant"]]
    got = analysis.sol_fraction_of_best(analysis.load_run(real_dir).candidates,
                                        include_incomparable=True)  # fmt: skip
    for w in {r["workload"] for r in rows}:
        ok = [r for r in rows if r["workload"] == w and r["status"] == "correct"]
        top = max(ok, key=lambda r: r["speedup_vs_eager"])
        g = one(got, workload=w)
        assert g["candidate_id"] == top["candidate_id"]
        want = top["sol_fraction"]  # the interpreter has no roofline: None on the CPU
        assert math.isnan(g["sol_fraction"]) if want is None else g["sol_fraction"] == want


# --- the hand-made lineage: GPU timings, two policies, LLM costs, every status -------------


def test_fast_p_is_per_policy_over_workloads_and_strict(hand):
    t = analysis.fast_p(hand.candidates)
    fp32 = t[t["precision"] == "fp32"]
    # fp32: wa best 2.0 / 1.6 (vs eager / compile), wb 2.0 / 1.4, wc nothing correct: N = 3.
    # The incomparable 10x of A1-2 does not count; 2.0 is not faster than 2x.
    eager = fp32[fp32["baseline"] == "eager"].set_index("p")["fast_p"]
    assert eager.to_dict() == approx({0.0: 2 / 3, 1.0: 2 / 3, 1.5: 2 / 3, 2.0: 0.0})
    comp = fp32[fp32["baseline"] == "compile"].set_index("p")["fast_p"]
    assert comp.to_dict() == approx({0.0: 2 / 3, 1.0: 2 / 3, 1.5: 1 / 3, 2.0: 0.0})
    assert set(fp32["workloads"]) == {3}
    bf16 = t[t["precision"] == "bf16"]  # wb only, best 3.0 vs eager; compile never measured
    assert bf16[bf16["baseline"] == "eager"]["fast_p"].tolist() == [1.0] * 4
    assert bf16[bf16["baseline"] == "compile"]["fast_p"].isna().all()
    wide = analysis.fast_p_table(hand.candidates)
    row = one(wide, precision="fp32", baseline="compile")
    assert (row["fast_1"], row["fast_1.5"], row["workloads"]) == (approx(2 / 3), approx(1 / 3), 3)


def test_geomean_is_over_workloads_with_a_correct_timed_candidate(hand):
    g = analysis.geomean_speedup(hand.candidates)
    e = one(g, precision="fp32", baseline="eager")
    assert (e["geomean"], e["workloads"], e["of"]) == (approx(2.0), 2, 3)
    c = one(g, precision="fp32", baseline="compile")
    assert c["geomean"] == approx(math.sqrt(1.6 * 1.4))
    assert one(g, precision="bf16", baseline="eager")["geomean"] == approx(3.0)
    assert math.isnan(one(g, precision="bf16", baseline="compile")["geomean"])


def test_correctness_rate_counts_generation_failures_and_fills_their_policy(hand):
    ops = analysis.correctness_rate(hand.candidates, "operator")
    want = {  # (precision, operator): (rows, correct); A1-1 has no precision: the run's fp32
        ("fp32", "seed"): (4, 3), ("fp32", "llm_mutate"): (4, 2),
        ("fp32", "llm_crossover"): (2, 1), ("fp32", "offline_mutate"): (2, 1),
        ("bf16", "seed"): (1, 1), ("bf16", "offline_mutate"): (1, 0),
    }  # fmt: skip
    got = {(r.precision, r.operator): (r.rows, r.correct) for r in ops.itertuples()}
    assert got == want and "migration" not in set(ops["operator"])
    assert one(ops, precision="fp32", operator="llm_mutate")["rate"] == 0.5
    models = analysis.correctness_rate(hand.candidates, "model")
    got = {(r.precision, r.model): (r.rows, r.correct) for r in models.itertuples()}
    assert got == {("fp32", "(none)"): (6, 4), ("fp32", "m1"): (3, 2), ("fp32", "m2"): (3, 1),
                   ("bf16", "(none)"): (2, 1)}  # fmt: skip


def test_evaluations_tokens_and_dollars_to_the_first_correct_and_the_best(hand):
    got = analysis.cost_to_first_correct_and_best(hand.candidates, hand.llm_calls)
    wa = one(got, precision="fp32", workload="builtin:wa")
    assert wa["evals_to_first_correct"] == 1 and wa["tokens_to_first_correct"] == 0
    # best A0-3: A0-0, A1-0, A0-1, A0-2, A1-2, A0-3 are evaluations (A1-1 failed to generate);
    # calls c1..c5 are theirs (c7's child was a duplicate and has no row).
    assert wa["evals_to_best"] == 6
    assert wa["tokens_to_best"] == 1200 + 1300 + 2500 + 1900 + 1250
    assert wa["dollars_to_best"] == approx(0.006 + 0.0075 + 0.0135 + 0.0105 + 0.00675)
    wb = one(got, precision="fp32", workload="builtin:wb")
    assert (wb["evals_to_first_correct"], wb["evals_to_best"]) == (1, 2)
    wc = one(got, precision="fp32", workload="builtin:wc")
    assert math.isnan(wc["evals_to_first_correct"]) and math.isnan(wc["dollars_to_best"])
    assert one(got, precision="bf16", workload="builtin:wb")["evals_to_best"] == 1


def test_cost_per_workload_and_per_unit_of_speedup(hand):
    got = analysis.workload_cost(hand.candidates, hand.llm_calls)
    wa = one(got, precision="fp32", workload="builtin:wa")
    assert (wa["rows"], wa["evaluations"], wa["eval_seconds"]) == (8, 7, 44)
    assert wa["tokens"] == 9050 and wa["dollars"] == approx(0.04815)
    # start: the best seed (A1-0, 0.625x); best 2.0x: a gain of 1.375
    assert (wa["start_speedup"], wa["best_speedup"]) == (approx(0.625), approx(2.0))
    assert wa["dollars_per_speedup"] == approx(0.04815 / 1.375)
    assert wa["evaluations_per_speedup"] == approx(7 / 1.375)
    assert wa["eval_seconds_per_speedup"] == approx(32.0)
    wb = one(got, precision="fp32", workload="builtin:wb")
    assert (wb["gain"], wb["evaluations_per_speedup"]) == (approx(0.5), approx(4.0))
    bf = one(got, precision="bf16", workload="builtin:wb")
    assert bf["eval_seconds"] == 184 and bf["gain"] == 0
    assert math.isnan(bf["dollars_per_speedup"])  # no gain, no price per unit
    assert math.isnan(one(got, precision="fp32", workload="builtin:wc")["best_speedup"])


def test_sol_fraction_and_best_candidate_per_workload(hand):
    best = analysis.best_per_workload(hand.candidates)
    got = {(r.precision, r.workload): (r.candidate_id, r.sol_fraction) for r in best.itertuples()}
    assert got == {
        ("fp32", "builtin:wa"): (cid("A0-3"), approx(1.0)),
        ("fp32", "builtin:wb"): (cid("B0-1"), approx(0.8)),
        ("bf16", "builtin:wb"): (cid("B1-0"), approx(0.6)),
    }
    by_compile = analysis.best_per_workload(hand.candidates, "compile")
    assert one(by_compile, precision="fp32", workload="builtin:wb")["speedup"] == approx(1.4)
    sol = analysis.sol_fraction_of_best(hand.candidates)
    assert one(sol, precision="fp32", workload="builtin:wa")["sol_fraction"] == approx(1.0)


def test_status_counts_leave_migrants_out(hand):
    counts = analysis.status_counts(hand.candidates, "workload")
    wa = one(counts, precision="fp32", workload="builtin:wa")
    assert (wa["correct"], wa["mismatch"], wa["compile_error"], wa["generation_failure"]) == (
        5, 1, 1, 1,
    )  # fmt: skip
    wc = one(counts, precision="fp32", workload="builtin:wc")
    assert (wc["mismatch"], wc["rejected"], wc["correct"]) == (1, 1, 0)
    assert one(counts, precision="bf16", workload="builtin:wb")["timeout"] == 1


def test_seed_outcomes_name_each_seed_once_with_its_kind_status_and_reason():
    import json as _json

    import pandas as pd

    compiler = '"""A seed from torch.compile: Inductor\'s Triton for kb:x (mode {m}, torch 2.11).'
    rows = [  # two islands judged the same two seeds of kb:x; a builtin seed for b:y
        ("r", "kb:x", "k|triton|0", "h1", compiler.format(m="default"), "rejected",
         "guardrail: a library GEMM call 'extern_kernels.mm' (cuBLAS) at line 51"),
        ("r", "kb:x", "k|triton|1", "h1", compiler.format(m="default"), "rejected",
         "guardrail: a library GEMM call 'extern_kernels.mm' (cuBLAS) at line 51"),
        ("r", "kb:x", "k|triton|0", "h2", compiler.format(m="max-autotune"), "correct",
         "matches the reference; median 5.7 ms"),
        ("r", "kb:x", "k|triton|1", "h2", compiler.format(m="max-autotune"), "correct",
         "matches the reference; median 5.8 ms"),
        ("r", "b:y", "y|triton|0", "h3", '"""Triton seed for y."""', "correct", "ok"),
    ]  # fmt: skip
    cand = pd.DataFrame(
        [
            {"run": r, "workload": w, "backend": "triton", "island": i, "source_hash": h,
             "source": src, "status": st, "reason": why, "operator": "seed", "step": 0,
             "is_migrant": False, "precision": "fp32", "created_at": pd.Timestamp(k, unit="s")}
            for k, (r, w, i, h, src, st, why) in enumerate(rows)
        ]
        + [{"run": "r", "workload": "kb:x", "backend": "triton", "island": "k|triton|0",
            "source_hash": "h4", "source": compiler.format(m="default"), "status": "correct",
            "reason": "", "operator": "offline_mutate", "step": 2, "is_migrant": False,
            "precision": "fp32", "created_at": pd.Timestamp(9, unit="s")}]
    )  # fmt: skip
    events = pd.DataFrame(
        [
            {"run": "r", "kind": "seed", "detail": _json.dumps(
                {"workload": "kb:z", "mode": "default", "made": False,
                 "reason": "Inductor wrote no Triton kernel (library calls only)"})},
            {"run": "r", "kind": "seed", "detail": _json.dumps(
                {"workload": "kb:x", "mode": "max-autotune", "made": True})},
            {"run": "r", "kind": "placement", "detail": "{}"},
        ]
    )  # fmt: skip
    out = analysis.seed_outcomes(cand, events)
    got = sorted(map(tuple, out[["workload", "seed", "status", "reason"]].values.tolist()))
    assert got == [
        ("b:y", "builtin", "correct", ""),
        ("kb:x", "inductor:default", "rejected",
         "guardrail: a library GEMM call 'extern_kernels.mm' (cuBLAS)"),
        ("kb:x", "inductor:max-autotune", "correct", ""),
        ("kb:z", "inductor:default", "not made",
         "Inductor wrote no Triton kernel (library calls only)"),
    ]  # fmt: skip
    assert list(analysis.seed_outcomes(cand).status) == ["rejected", "correct", "correct"]
