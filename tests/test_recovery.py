"""How a stopped run comes back: what `plan_resume` takes from the checkpoint and the lineage."""

from evo.candidate import Proposal, candidate_row
from evo.lineage import LineageWriter
from evo.recovery import checkpoint_state, plan_resume
from evo.rundir import RunDir

W = "builtin:matmul"
ISLAND = f"{W}|triton|0"


def prop(step: int, source: str = "x = 1\n") -> dict:
    return Proposal(
        candidate_id=f"r/{ISLAND}/{step:06d}",
        workload=W,
        backend="triton",
        island=ISLAND,
        step=step,
        source=source,
        source_hash=f"h{step}" if source else "",
        operator="seed" if step == 0 else "llm_mutate",
    ).to_dict()


def record(rd: RunDir, *props: dict) -> None:
    w = LineageWriter(rd.uri, "candidates", "t")
    for p in props:
        verdict = {"status": "correct", "reason": "", "workload": W, "backend": "triton"}
        w.append(candidate_row("r", Proposal.from_dict(p), verdict, 1.0, {}))
    w.close()


def test_a_resume_folds_later_rows_resubmits_the_rest_and_counts_each_evaluation_once(tmp_path):
    """Rows after the checkpoint are folded; children in flight that got no row are submitted
    again. A written one counts as spent now; one still being drafted (no source) reserves
    its evaluation when its draft is admitted, like a new child, so it is not counted here."""
    rd = RunDir(str(tmp_path / "run"))
    record(rd, prop(0))
    in_flight = [prop(1), prop(2), prop(3, source="")]
    ckpt = checkpoint_state(rd, "r", {W: {"state": 1}}, {}, in_flight, [prop(4)])
    record(rd, prop(1))  # judged after the checkpoint

    plan = plan_resume(rd, ckpt, deterministic=False)
    state, later = plan.hosts[W]
    assert state == {"state": 1} and [r["step"] for r in later] == [1]
    assert [p["step"] for p in plan.again] == [2, 3]
    assert [p["step"] for p in plan.readmit] == [4]
    assert plan.evals == {W: 3}  # steps 0 and 1 judged, step 2 resubmitted
    assert plan.event["resubmitted"] == 2 and plan.event["readmitted"] == 1


def test_a_deterministic_resume_replays_every_recorded_verdict(tmp_path):
    rd = RunDir(str(tmp_path / "run"))
    record(rd, prop(0), prop(1))
    plan = plan_resume(rd, None, deterministic=True)
    assert set(plan.recorded) == {prop(0)["candidate_id"], prop(1)["candidate_id"]}
    assert plan.evals == {W: 2} and not plan.hosts and not plan.again
