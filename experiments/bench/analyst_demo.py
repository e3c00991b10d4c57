"""The profiler-analysis path on a real device: judge, profile, recommend, prompt.

    python -m experiments.bench.analyst_demo [--out DIR] [--workloads builtin:softmax ...]
    python -m experiments.bench.analyst_demo --from-run RUN_DIR [--candidate ID]

For each workload's candidate (the builtin Triton seed, or a CUDA kernel from
tests/gpu_candidates with --backend cuda): the fitness service judges it, then profiles it
(`FitnessService.profile`: torch.profiler's kernel table and, where `ncu` runs, Nsight Compute
metrics), the rule analyst reads the profile, and the mutate prompt that the recommendation
steers is rendered. Writes, per candidate, the profile JSON, the recommendation and the prompt
under --out, and prints a summary line each (RESULTS.md quotes them).

With --from-run, nothing runs: the recommendation a run's analyst made (its `analysis`
event; the last one, or --candidate's) is shown with the profile it read and the mutate
prompt it steers, rendered from the run's own records.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

from fitness.profile import Profile
from fitness.worker import FitnessService
from fitness.workloads import resolve_workload
from operators.analyst import RuleAnalyst
from operators.prompting import CodeSample, PromptContext, render

REPO = Path(__file__).resolve().parents[2]
DEFAULT = ("builtin:softmax", "builtin:matmul")


def candidate(workload: str, backend: str) -> str:
    if backend == "triton":
        w = resolve_workload(workload)
        if w.seed_path is None:
            raise SystemExit(f"{workload}: no Triton seed")
        return w.seed_path.read_text()
    name = workload.replace(":", "_") + "__cuda.py"
    return (REPO / "tests" / "gpu_candidates" / name).read_text()


def from_run(run_dir: str, candidate: str | None = None) -> str:
    """The recorded profile, recommendation and mutate prompt of one analysed candidate."""
    from evo.lineage import read_frame
    from evo.rundir import RunDir

    events = read_frame(run_dir, "events")
    done = [json.loads(d) for d in events[events.kind == "analysis"].detail]
    done = [d for d in done if "recommendation" in d]
    if candidate:
        done = [d for d in done if d["candidate_id"] == candidate]
    if not done:
        raise SystemExit(
            f"{run_dir}: no recorded recommendation" + (f" for {candidate}" if candidate else "")
        )
    event = done[-1]
    rows = read_frame(run_dir, "candidates")
    row = rows[rows.candidate_id == event["candidate_id"]].iloc[0].to_dict()
    profile = Profile.from_json(RunDir(run_dir).read_text(event["profile"]))
    rec = event["recommendation"]
    ctx = PromptContext(
        reference=resolve_workload(row["workload"]).source,
        workload=row["workload"],
        step=int(row["step"]) + 1,
        parent=CodeSample(row["source"], row, f"step {row['step']}"),
        recommendation=rec["text"],
        edit_format="diff",
    )
    prompt = render("mutate", row["backend"], ctx)
    (k, *_) = profile.ncu or [None]
    ncu = (
        ""
        if k is None
        else (
            f"ncu: {k.name}: DRAM {k.dram_pct}% SM {k.sm_pct}% occupancy {k.occupancy_pct}% "
            f"registers {k.registers} smem {k.smem_bytes} stalls {k.stalls}\n"
        )
    )
    return (
        f"candidate: {event['candidate_id']} on {profile.device}\n"
        f"roofline: {json.dumps(dataclasses.asdict(profile.roofline))}\n{ncu}"
        f"recommendation ({rec['kind']}, hint {rec['params_hint']}): {rec['text']}\n\n"
        f"--- mutate prompt (user part) ---\n{prompt.user}"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="analyst_demo")
    ap.add_argument("--workloads", nargs="+", default=list(DEFAULT))
    ap.add_argument("--backend", default="triton", choices=("triton", "cuda"))
    ap.add_argument("--ncu", choices=("auto", "on", "off"), default="auto")
    ap.add_argument("--from-run", help="show a recorded recommendation and its prompt instead")
    ap.add_argument("--candidate", help="with --from-run: the candidate id (default: the last)")
    args = ap.parse_args(argv)
    if args.from_run:
        print(from_run(args.from_run, args.candidate))
        return 0
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    ncu = {"auto": None, "on": True, "off": False}[args.ncu]
    svc = FitnessService(device="auto")
    analyst = RuleAnalyst()
    summary = []
    for name in args.workloads:
        source = candidate(name, args.backend)
        req = {"source": source, "workload": name, "backend": args.backend}
        verdict = svc.evaluate(req)
        if verdict["status"] != "correct":  # only a correct kernel is worth profiling
            print(f"{name}: {verdict['status']}: {verdict['reason'][:1500]}", file=sys.stderr)
            summary.append(
                {"workload": name, "status": verdict["status"], "reason": verdict["reason"]}
            )
            continue
        t0 = time.monotonic()
        got = svc.profile({**req, "result": verdict, "ncu": ncu})
        secs = time.monotonic() - t0
        slug = name.replace(":", "_") + f"__{args.backend}"
        if got["profile"] is None:
            print(f"{name}: profiling failed: {got['error']}", file=sys.stderr)
            summary.append({"workload": name, "error": got["error"]})
            continue
        (out / f"{slug}.profile.json").write_text(got["profile"])
        profile = Profile.from_json(got["profile"])
        rec = analyst.recommend(profile)
        ctx = PromptContext(
            reference=resolve_workload(name).source,
            workload=name,
            step=1,
            parent=CodeSample(source, verdict, "step 0"),
            recommendation=rec.text,
            device=svc.device_facts(),
            edit_format="diff",
        )
        prompt = render("mutate", args.backend, ctx)
        (out / f"{slug}.recommendation.json").write_text(json.dumps(rec.to_dict(), indent=2))
        (out / f"{slug}.prompt.txt").write_text(prompt.system + "\n\n---\n\n" + prompt.user)
        own = [k for k in profile.kernels if k.own]
        line = {
            "workload": name,
            "backend": args.backend,
            "status": verdict["status"],
            "runtime_ms": verdict.get("runtime_ms"),
            "sol_fraction": verdict.get("sol_fraction"),
            "device": profile.device,
            "profile_seconds": round(secs, 1),
            "kernel_rows": len(profile.kernels),
            "own_kernels": [k.name for k in own][:3],
            "ncu_kernels": len(profile.ncu),
            "ncu": [
                {
                    k: getattr(n, k)
                    for k in ("name", "dram_pct", "sm_pct", "occupancy_pct", "registers", "stalls")
                    if hasattr(n, k)
                }
                for n in profile.ncu[:2]
            ],
            "notes": profile.notes,
            "kind": rec.kind,
            "params_hint": rec.params_hint,
            "recommendation": rec.text,
        }
        summary.append(line)
        print(json.dumps(line))
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
