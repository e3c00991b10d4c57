"""Lineages for the analysis tests.

`real_run`: one small run of the real engine on the CPU (offline operator, Triton interpreter,
two builtin workloads, two islands each, ring migration), made once per test session.
`write_hand_made_run`: a lineage written with the engine's own writer, row by row, for what a
CPU run cannot give: comparable GPU timings, compile speedups, SOL, two precision policies,
LLM calls with tokens and dollars, every status. The expected values in the tests are
computed by hand from the rows listed here.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

_MEMO: dict[str, str] = {}


def real_run(tmp_path_factory) -> str:
    """The run directory of the session's small real run (the engine runs once)."""
    if "real" not in _MEMO:
        from evo.config import load_config_dict
        from evo.engine import Engine

        cfg = load_config_dict(
            {
                "name": "analysis",
                "workloads": ["builtin:matmul", "builtin:scaled_gelu"],
                "population": {"islands": 2, "in_flight": 1, "cap": 8, "elites": 1},
                "migration": {"topology": "ring", "interval": 2, "rate": 1},
                # a fitness from the source alone: which member migrates does not hang on
                # interpreter timings, so every run has the same migrations
                "fitness": {"metric": "tests.fitness_plugins:shorter_is_fitter", "samples": 3},
                "budgets": {"max_evals": 12},
                "checkpoint_seconds": 30.0,
                "deterministic": True,
                "seed": 7,
            }
        )
        path = str(tmp_path_factory.mktemp("analysis-real") / "cpu-run")
        Engine(cfg, path, quiet=True).run()
        _MEMO["real"] = path
    return _MEMO["real"]


T0 = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
RUN_ID = "h"

# One row per line, in recording order; "-" is null (an empty string for model and call).
# The id names the workload (A: wa) and island (A0: wa|triton|0); A0-m is a migrant copy.
# cmp: comparable; rt, eager, comp (the compile baseline), sol: ms; secs: eval_seconds;
# fit: fitness (the run's own objective, here not always the speedup); gen_failure:
# generation_failure.
_TABLE = """
id   step parents   operator       model call status        prec cmp rt   eager comp sol secs fit
A0-0 0    -         seed           -     -    correct       fp32 1   2.0  1.0   0.8  0.5 10   0.5
A1-0 0    -         seed           -     -    correct       fp32 1   1.6  1.0   0.8  0.5 10   0.625
A0-1 1    A0-0      llm_mutate     m1    c1   mismatch      fp32 1   -    1.0   0.8  0.5 5    -
A0-2 2    A0-0      llm_mutate     m1    c2   correct       fp32 1   0.8  1.0   0.8  0.5 8    0.6
A1-1 1    A1-0      llm_crossover  m2    c3   gen_failure   -    0   -    -     -    -   -    -
A1-2 2    A1-0      llm_mutate     m2    c4   correct       fp32 0   0.1  1.0   0.8  0.5 3    10.0
A0-m 3    A1-0      migration      -     -    correct       -    -   -    -     -    -   -    0.625
A0-3 4    A0-2,A0-m llm_crossover  m1    c5   correct       fp32 1   0.5  1.0   0.8  0.5 6    2.0
A1-3 3    A1-2      llm_mutate     m2    c6   compile_error fp32 1   -    1.0   0.8  0.5 2    -
B0-0 0    -         seed           -     -    correct       fp32 1   1.0  1.5   1.2  0.6 4    1.5
B0-1 1    B0-0      offline_mutate -     -    correct       fp32 1   0.75 1.5   1.05 0.6 4    2.0
B1-0 0    -         seed           -     -    correct       bf16 1   0.5  1.5   -    0.3 4    3.0
B1-1 1    B1-0      offline_mutate -     -    timeout       bf16 1   -    1.5   -    0.3 180  -
C0-0 0    -         seed           -     -    mismatch      fp32 1   -    2.0   1.9  1.0 3    -
C0-1 1    C0-0      offline_mutate -     -    rejected      fp32 1   -    2.0   1.9  1.0 2    -
"""


def _parse(table: str) -> list[dict]:
    lines = [line.split() for line in table.strip().splitlines()]
    rows = []
    for cells in lines[1:]:
        r = {k: (None if v == "-" else v) for k, v in zip(lines[0], cells)}
        for k in ("rt", "eager", "comp", "sol", "secs", "fit"):
            r[k] = None if r[k] is None else float(r[k])
        r["step"] = int(r["step"])
        r["parents"] = [] if r["parents"] is None else r["parents"].split(",")
        r["cmp"] = None if r["cmp"] is None else r["cmp"] == "1"
        r["mig"] = r["id"].endswith("-m")  # a migrant copy
        r["status"] = "generation_failure" if r["status"] == "gen_failure" else r["status"]
        r["wl"] = {"A": "wa", "B": "wb", "C": "wc"}[r["id"][0]]  # A0-3: wa, island 0
        r["island"] = f"{r['wl']}|triton|{r['id'][1]}"
        rows.append(r)
    return rows


ROWS = _parse(_TABLE)

# (call id, model, input tokens, output tokens, dollars at $3 / $15 per million); c7's child
# was a duplicate, so it has no candidate row.
CALLS = [
    ("c1", "m1", 1000, 200, 0.006),
    ("c2", "m1", 1000, 300, 0.0075),
    ("c3", "m2", 2000, 500, 0.0135),
    ("c4", "m2", 1500, 400, 0.0105),
    ("c5", "m1", 1000, 250, 0.00675),
    ("c6", "m2", 800, 100, 0.0039),
    ("c7", "m1", 5000, 1000, 0.03),
]


def cid(short: str) -> str:
    """The full candidate id of a row of ROWS (`A0-3` -> `h/wa|triton|0/A0-3`)."""
    row = next(r for r in ROWS if r["id"] == short)
    return f"{RUN_ID}/builtin:{row['island']}/{short}"


def write_hand_made_run(run_dir: str | Path) -> str:
    """ROWS and CALLS as a run directory (candidates, llm_calls, events), one second apart
    in the order listed."""
    from evo.lineage import LineageWriter

    run_dir = str(run_dir)
    with LineageWriter(run_dir, "candidates", "hand") as w:
        for k, r in enumerate(ROWS):
            rt, eager, comp, sol = r["rt"], r["eager"], r["comp"], r["sol"]
            w.append(
                {
                    "run_id": RUN_ID,
                    "candidate_id": cid(r["id"]),
                    "source_hash": f"hash-{r['id']}",
                    "workload": f"builtin:{r['wl']}",
                    "backend": "triton",
                    "island": f"builtin:{r['island']}",
                    "step": r["step"],
                    "parent_ids": [cid(p) for p in r["parents"]],
                    "operator": r["operator"],
                    "model": r["model"] or "",
                    "llm_call_id": r["call"] or "",
                    "source": f"# source of {r['id']}\n",
                    "status": r["status"],
                    "reason": r["status"],
                    "precision": r["prec"],
                    "comparable": r["cmp"],
                    "runtime_ms": rt,
                    "baseline_eager_ms": eager,
                    "baseline_compile_ms": comp,
                    "speedup_vs_eager": eager / rt if rt and eager else None,
                    "speedup_vs_compile": comp / rt if rt and comp else None,
                    "sol_ms": sol if rt else None,
                    "sol_fraction": sol / rt if rt and sol else None,
                    "fitness": r["fit"],
                    "eval_seconds": r["secs"],
                    "device": "NVIDIA H100 80GB HBM3" if r["cmp"] else "cpu",
                    "created_at": T0 + timedelta(seconds=k),
                    "is_migrant": r["mig"],
                }
            )
    with LineageWriter(run_dir, "llm_calls", "driver") as w:
        for k, (call, model, tin, tout, usd) in enumerate(CALLS):
            w.append(
                {
                    "run_id": RUN_ID, "llm_call_id": call, "operator": "mutate",
                    "provider": "openai", "model": model, "prompt": "p", "reply": "r",
                    "input_tokens": tin, "output_tokens": tout, "cost_usd": usd,
                    "created_at": T0 + timedelta(seconds=k, milliseconds=500),
                }
            )  # fmt: skip
    with LineageWriter(run_dir, "events", "driver") as w:
        w.append(
            {
                "run_id": RUN_ID,
                "kind": "migration",
                "island": "builtin:wa|triton|0",
                "detail": {
                    "candidate_id": cid("A1-0"),
                    "copy": cid("A0-m"),
                    "from": "builtin:wa|triton|1",
                    "to": "builtin:wa|triton|0",
                },  # fmt: skip
                "created_at": T0 + timedelta(seconds=6),
            }
        )
    return run_dir
