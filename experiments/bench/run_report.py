"""What a run found: per workload and backend, its seed against its best candidate.

    python -m experiments.bench.run_report RUN_DIR [--json OUT]

Reads the run's `candidates/` lineage (never the checkpoint) and prints, for each
(workload, backend): the seed's median and IQR, the best correct candidate's, how much
faster the best is (percent and in units of the larger IQR), and both speedups vs eager.
A workload counts as improved when the best is at least 5% faster than its seed and the gain
is more than 3x the larger of the two IQRs (issue 3's acceptance).
"""

from __future__ import annotations

import argparse
import json
import sys

from evo.lineage import read_frame

COLUMNS = [
    "candidate_id",
    "workload",
    "backend",
    "operator",
    "status",
    "runtime_ms",
    "runtime_iqr_ms",
    "speedup_vs_eager",
    "baseline_eager_ms",
    "is_migrant",
    "device",
]


def report(run_dir: str) -> list[dict]:
    df = read_frame(run_dir, "candidates", COLUMNS)
    df = df[~df["is_migrant"].fillna(False).astype(bool)]
    rows = []
    for (workload, backend), g in df.groupby(["workload", "backend"], sort=True):
        ok = g[(g["status"] == "correct") & g["runtime_ms"].notna()]
        seeds = ok[ok["operator"] == "seed"]
        row = {
            "workload": workload,
            "backend": backend,
            "evaluated": int(len(g)),
            "correct": int(len(ok)),
        }
        if seeds.empty or ok.empty:
            rows.append({**row, "improved": False, "why": "no correct seed or candidate"})
            continue
        seed = seeds.sort_values("runtime_ms").iloc[0]
        best = ok.sort_values("runtime_ms").iloc[0]
        gain = float(seed.runtime_ms - best.runtime_ms)
        noise = max(float(seed.runtime_iqr_ms or 0.0), float(best.runtime_iqr_ms or 0.0))
        faster = gain / float(seed.runtime_ms)
        row.update(
            seed_ms=float(seed.runtime_ms),
            seed_iqr_ms=float(seed.runtime_iqr_ms or 0.0),
            best_ms=float(best.runtime_ms),
            best_iqr_ms=float(best.runtime_iqr_ms or 0.0),
            best_id=str(best.candidate_id),
            best_operator=str(best.operator),
            faster_pct=100.0 * faster,
            gain_over_iqr=gain / noise if noise > 0 else float("inf"),
            eager_ms=float(best.baseline_eager_ms) if best.baseline_eager_ms else None,
            seed_vs_eager=float(seed.speedup_vs_eager) if seed.speedup_vs_eager else None,
            best_vs_eager=float(best.speedup_vs_eager) if best.speedup_vs_eager else None,
            device=str(best.device),
        )
        row["improved"] = faster >= 0.05 and gain > 3 * noise
        rows.append(row)
    return rows


def _fmt(v, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run_dir")
    ap.add_argument("--json", default="", help="also write the rows as JSON here")
    args = ap.parse_args(argv)
    rows = report(args.run_dir)
    if not rows:
        print(f"{args.run_dir}: no candidates", file=sys.stderr)
        return 1
    print(
        "| workload | backend | evals (correct) | seed ms (IQR) | best ms (IQR) | faster | "
        "gain / IQR | seed vs eager | best vs eager | improved |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        if "best_ms" not in r:
            print(
                f"| {r['workload']} | {r['backend']} | {r['evaluated']} ({r['correct']}) "
                f"| - | - | - | - | - | - | no: {r['why']} |"
            )
            continue
        print(
            f"| {r['workload']} | {r['backend']} | {r['evaluated']} ({r['correct']}) "
            f"| {r['seed_ms']:.4f} ({r['seed_iqr_ms']:.4f}) "
            f"| {r['best_ms']:.4f} ({r['best_iqr_ms']:.4f}) | {r['faster_pct']:.1f}% "
            f"| {_fmt(r['gain_over_iqr'], '.1f')} | {_fmt(r['seed_vs_eager'], '.3f')}x "
            f"| {_fmt(r['best_vs_eager'], '.3f')}x | {'yes' if r['improved'] else 'no'} |"
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1, default=str)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
