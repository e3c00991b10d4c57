"""Faults on the GPU, in one run: each is recorded with its status, and the run goes on to its
budget with no candidate lost.

    python -m experiments.bench.faults --run-dir DIR [--max-evals 14] [--timeout 30]

The run evolves builtin:matmul on one Triton island through the `command:` provider with
experiments/agents/fault_agent.py, whose first three children are an illegal memory access,
a kernel that never finishes and an allocation past the GPU's memory (tests/exploits/17_gpu_*);
later children are honest. Once those three have verdicts, the FitnessWorker's process is
killed with SIGKILL while it judges the next child. Afterwards the lineage is counted:
every step of the island has exactly one row, and the rows are tallied by status. Prints one
JSON object; exits 1 when a fault is missing, a step is lost or duplicated, or the run stopped
short of its budget.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
from collections import Counter
from pathlib import Path

FAULT_MARKS = {  # words of each fault candidate's docstring -> the fault
    "Exploit class 17 (illegal memory access": "illegal_access",
    "Exploit class 17 (hang)": "hang",
    "Exploit class 17 (GPU OOM)": "oom",
}


def config(state: Path, max_evals: int, timeout: float) -> dict:
    agent = Path(__file__).resolve().parents[1] / "agents" / "fault_agent.py"
    return {
        "name": "gpu-faults",
        "workloads": ["builtin:matmul"],
        "backends": ["triton"],
        "population": {"islands": 1, "in_flight": 2, "cap": 8, "elites": 1},
        "migration": {"topology": "none"},
        "fitness": {"timeout": timeout, "samples": 30},
        "budgets": {"max_evals": max_evals},
        "llm": {"spec": f"command:{sys.executable} {agent} {state}", "max_concurrency": 2},
        "operators": {"mutate": 1.0, "crossover": 0.0, "repair": 0.0, "translate": 0.0},
        "analyst": {"enabled": False},
        "checkpoint_seconds": 15,
    }


def kill_when_faults_are_judged(engine, log: dict, deadline: float) -> None:
    """SIGKILL the fitness worker once the three faults have verdicts and a child is being
    judged (the engine holds a pending evaluation)."""
    import ray

    while time.monotonic() < deadline:
        st = getattr(engine, "progress", None)
        seen = st.statuses if st else Counter()
        if seen["runtime_error"] >= 2 and seen["timeout"] >= 1 and getattr(engine, "pending", {}):
            info = ray.get(engine.pool.workers[0].info.remote())
            time.sleep(1.0)  # well inside the judging of the child under way
            os.kill(info["pid"], signal.SIGKILL)
            log.update(killed_pid=info["pid"], killed_after_evals=st.evaluated)
            return
        time.sleep(0.2)
    log["kill"] = "the three faults were not judged in time; no worker was killed"


def tally(run_dir: str) -> dict:
    from evo.lineage import read_table

    rows = read_table(run_dir, "candidates").to_pylist()
    steps = sorted(r["step"] for r in rows if not r.get("is_migrant"))
    ids = [r["candidate_id"] for r in rows]
    faults = {}
    for r in rows:
        for mark, fault in FAULT_MARKS.items():
            if mark in (r.get("source") or ""):
                faults[fault] = {"status": r["status"], "reason": (r.get("reason") or "")[:200]}
    died = [r for r in rows if "fitness worker died" in (r.get("reason") or "")]
    if died:
        faults["worker_killed"] = {
            "status": died[0]["status"],
            "reason": died[0]["reason"][:200],
            "candidates": len(died),
        }
    events = read_table(run_dir, "events").to_pylist()
    return {
        "rows": len(rows),
        "steps": f"{steps[0]}..{steps[-1]}" if steps else "",
        "gaps": sorted(set(range(len(steps))) - set(steps)),
        "duplicates": len(ids) - len(set(ids)),
        "statuses": dict(Counter(r["status"] for r in rows)),
        "faults": faults,
        "fault_events": sum(1 for e in events if e["kind"] == "fault"),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--run-dir", required=True)
    ap.add_argument("--max-evals", type=int, default=14)
    ap.add_argument("--timeout", type=float, default=30.0, help="seconds per evaluation phase")
    args = ap.parse_args(argv)

    from evo.config import load_config_dict
    from evo.engine import Engine

    state = Path(args.run_dir + ".agent")
    cfg = load_config_dict(config(state, args.max_evals, args.timeout))
    engine = Engine(cfg, args.run_dir, quiet=True)
    log: dict = {}
    killer = threading.Thread(
        target=kill_when_faults_are_judged,
        args=(engine, log, time.monotonic() + 8 * args.timeout + 120),
        daemon=True,
    )
    killer.start()
    t0 = time.monotonic()
    result = engine.run()
    out = {"wall_s": round(time.monotonic() - t0, 1), "result": result, **log}
    out.update(tally(args.run_dir))
    print(json.dumps(out, default=str, indent=1))
    want = {"illegal_access", "hang", "oom", "worker_killed"}
    ok = (
        want <= set(out["faults"])
        and not out["gaps"]
        and not out["duplicates"]
        and out["rows"] >= args.max_evals
    )
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
