"""What a checkpoint holds, and how a run comes back from it and from its lineage.

The lineage is the truth. A checkpoint records each island host's state, the children in flight
and those a budget refused, and which recorded rows the host states already hold
(`integrated`). A resume folds every row recorded after that back into its host, submits again
the children that never got a row, and admits again the refused ones. In deterministic mode
nothing is restored from the checkpoint: every proposal is made again, and the recorded ones
take their recorded verdicts (a replay). A new run may also start from a saved run's best
(`evo run --from`).

Nothing here talks to Ray: the engine applies what these functions work out.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field

from evo.lineage import read_table
from evo.rundir import RunDir
from fitness.errors import EvoError


def checkpoint_state(
    rd: RunDir,
    run_id: str,
    hosts: dict[str, dict],
    budget: dict,
    in_flight: list[dict],
    unadmitted: list[dict],
) -> dict:
    """The checkpoint of a run whose hosts are in `hosts` (workload -> host state)."""
    rows = read_table(rd.uri, "candidates", columns=["candidate_id", "workload"])
    integrated: dict[str, list] = defaultdict(list)
    for cid, w in zip(
        rows.column("candidate_id").to_pylist(),
        rows.column("workload").to_pylist(),
        strict=True,
    ):
        integrated[w].append(cid)
    return {
        "run_id": run_id,
        "hosts": hosts,
        "budget": budget,
        "in_flight": list(in_flight),
        "unadmitted": list(unadmitted),
        "integrated": {w: integrated.get(w, []) for w in hosts},
    }


@dataclass
class Resumption:
    """How a stopped run comes back."""

    # workload -> (its host's checkpointed state, the rows recorded after it); empty in a replay
    hosts: dict[str, tuple[dict, list[dict]]] = field(default_factory=dict)
    again: list[dict] = field(default_factory=list)  # in flight, never recorded: submit again
    readmit: list[dict] = field(default_factory=list)  # refused by a budget: admit again
    evals: dict[str, int] = field(default_factory=dict)  # evaluations spent, per workload
    recorded: dict[str, dict] | None = None  # a replay: candidate id -> its recorded row
    event: dict = field(default_factory=dict)  # the detail of the `resume` event


def plan_resume(rd: RunDir, ckpt: dict | None, deterministic: bool) -> Resumption:
    rows = read_table(rd.uri, "candidates").to_pylist()
    if deterministic:
        return Resumption(
            evals=evals_per_workload(rows),
            recorded={r["candidate_id"]: r for r in rows},
            event={"mode": "replay", "recorded": len(rows)},
        )
    assert ckpt is not None, "the engine refuses a resume without a checkpoint first"
    hosts = {w: (state, _after(ckpt, rows, w)) for w, state in ckpt["hosts"].items()}
    have = {r["candidate_id"] for r in rows}
    again = [p for p in ckpt["in_flight"] if p["candidate_id"] not in have]
    readmit = [p for p in ckpt.get("unadmitted", []) if p["candidate_id"] not in have]
    return Resumption(
        hosts=hosts,
        again=again,
        readmit=readmit,
        # Every judged row, and every written child submitted again. A child admitted again,
        # or one still being drafted (asked for again), reserves its evaluation when it is
        # admitted, as a new one does.
        evals=evals_per_workload(rows + [p for p in again if p["source"]]),
        event={
            "checkpoint": rd.latest_checkpoint_number(),
            "folded": len(rows),
            "resubmitted": len(again),
            "readmitted": len(readmit),
        },
    )


def host_restoration(rd: RunDir, run_id: str, w: str) -> tuple[dict | None, list[dict]]:
    """A dead island host's last checkpointed state (None if it has none) and the rows
    recorded after it; rows the host had not flushed are lost (a few seconds' worth)."""
    ckpt = rd.latest_checkpoint()
    if not (ckpt and ckpt.get("run_id") == run_id and w in ckpt["hosts"]):
        ckpt = None
    rows = read_table(rd.uri, "candidates").to_pylist()
    return (ckpt["hosts"][w] if ckpt else None), _after(ckpt, rows, w)


def _after(ckpt: dict | None, rows: list[dict], w: str) -> list[dict]:
    """Workload w's rows that the checkpoint's host state does not hold (all, without one)."""
    done = set(ckpt["integrated"].get(w, [])) if ckpt else set()
    return [r for r in rows if r["workload"] == w and r["candidate_id"] not in done]


def steps_taken(proposals: list[dict]) -> dict[str, int]:
    """Per island, the first step after every one of these proposals (never handed out again)."""
    steps: dict[str, int] = {}
    for p in proposals:
        steps[p["island"]] = max(steps.get(p["island"], 0), p["step"] + 1)
    return steps


def recorded_run_id(rd: RunDir) -> str:
    ids = read_table(rd.uri, "candidates", columns=["run_id"]).column("run_id")
    if len(ids) == 0:
        raise EvoError(f"{rd.uri}: nothing recorded to resume")
    return ids[0].as_py()


def recorded_analyses(rd: RunDir) -> list[dict]:
    """The analyst's recorded recommendations (`analysis` events with an island), each with
    its island: a recommendation may have come after the last checkpoint."""
    if not rd.exists("events"):
        return []
    cols = ["kind", "island", "detail"]
    return [
        {**json.loads(e["detail"]), "island": e["island"]}
        for e in read_table(rd.uri, "events", columns=cols).to_pylist()
        if e["kind"] == "analysis" and e["island"]
    ]


def saved_population(run: str, workloads: list[str], k: int) -> dict[str, list[dict]]:
    """Per workload, a saved run's k fittest correct candidates, fittest first."""
    cols = ["candidate_id", "workload", "backend", "island", "source", "status", "fitness"]
    t = read_table(run, "candidates", columns=cols).to_pandas()
    t = t[(t.status == "correct") & t.fitness.notna()]
    return {
        w: t[t.workload == w].sort_values("fitness", ascending=False).head(k).to_dict("records")
        for w in workloads
    }


def evals_per_workload(items: list[dict]) -> dict[str, int]:
    """Evaluations per workload: judged rows (not migrant copies) and proposals."""
    evals: dict[str, int] = defaultdict(int)
    for r in items:
        if not r.get("is_migrant"):
            evals[r["workload"]] += 1
    return dict(evals)
