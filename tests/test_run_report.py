"""experiments/bench/run_report.py: a run's best candidates against their seeds, from lineage."""

from __future__ import annotations

from evo.lineage import LineageWriter
from experiments.bench.run_report import main, report
from tests.test_lineage import candidate


def _write(run: str, rows: list[dict]) -> None:
    with LineageWriter(run, "candidates", "w0") as w:
        for r in rows:
            w.append(r)


def test_improvement_needs_five_percent_and_three_iqrs(tmp_path):
    a, b = "builtin:matmul", "builtin:softmax"
    rows = [
        candidate(0, workload=a, operator="seed", runtime_ms=1.0, runtime_iqr_ms=0.01),
        candidate(
            1,
            workload=a,
            operator="mutate",
            runtime_ms=0.90,
            runtime_iqr_ms=0.01,
            speedup_vs_eager=1.5,
        ),
        candidate(2, workload=a, operator="mutate", runtime_ms=0.5, status="mismatch"),
        candidate(3, workload=a, operator="migrate", runtime_ms=0.4, is_migrant=True),
        # 8% faster, but the IQR is 0.03: the gain is under 3x the noise
        candidate(4, workload=b, operator="seed", runtime_ms=1.0, runtime_iqr_ms=0.03),
        candidate(5, workload=b, operator="crossover", runtime_ms=0.92, runtime_iqr_ms=0.01),
    ]
    _write(str(tmp_path), rows)
    got = {r["workload"]: r for r in report(str(tmp_path))}
    assert got[a]["best_ms"] == 0.90 and got[a]["evaluated"] == 3 and got[a]["correct"] == 2
    assert abs(got[a]["faster_pct"] - 10.0) < 1e-9 and got[a]["improved"]
    assert got[a]["best_vs_eager"] == 1.5
    assert abs(got[b]["faster_pct"] - 8.0) < 1e-9 and not got[b]["improved"]
    assert main([str(tmp_path)]) == 0


def test_a_workload_without_a_correct_seed_is_not_improved(tmp_path):
    _write(str(tmp_path), [candidate(0, operator="seed", status="compile_error", runtime_ms=None)])
    (row,) = report(str(tmp_path))
    assert not row["improved"] and "no correct seed" in row["why"]
