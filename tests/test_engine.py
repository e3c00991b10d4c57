"""The island engine on a real local Ray cluster, with the real fitness service (interpreter).

Runs are small (a handful of evaluations of a cheap builtin workload) but go through every
part a user's run does: island hosts, the worker pool, the lineage, checkpoints and resume.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

from evo.config import load_config_dict
from evo.engine import WORKER_DIED, Engine
from evo.lineage import read_frame
from fitness.errors import EvoError

ROOT = Path(__file__).resolve().parents[1]


def config(tmp_path: Path, **over) -> dict:
    d = {
        "name": "t",
        "workloads": ["builtin:matmul"],
        "population": {"islands": 2, "in_flight": 2, "cap": 8, "elites": 1},
        "migration": {"topology": "ring", "interval": 3, "rate": 1},
        "fitness": {"metric": "tests.fitness_plugins:shorter_is_fitter", "samples": 3},
        "budgets": {"max_evals": 8},
        "checkpoint_seconds": 1.0,
        "seed": 7,
    }
    for k, v in over.items():
        node = d
        *path, last = k.split(".")
        for p in path:
            node = node.setdefault(p, {})
        node[last] = v
    return d


def run(ray_cluster, tmp_path, name="run", **over):
    cfg = load_config_dict(config(tmp_path, **over))
    res = Engine(cfg, str(tmp_path / name), quiet=True).run()
    return res, str(tmp_path / name)


def test_run_records_every_evaluation_and_keeps_islands_apart(ray_cluster, tmp_path):
    res, rd = run(ray_cluster, tmp_path)
    rows = read_frame(rd, "candidates")
    judged = rows[~rows.is_migrant]
    assert len(judged) == 8 and res["evaluated"] == 8, res
    assert res["stop"] == "budget: max_evals", res
    assert judged.candidate_id.is_unique and set(judged.status) <= {
        "correct", "mismatch", "compile_error", "runtime_error", "rejected", "timeout",
        "generation_failure",
    }  # fmt: skip
    seeds = judged[judged.operator == "seed"]
    assert len(seeds) == 2 and set(seeds.status) == {"correct"}
    correct = judged[judged.status == "correct"]
    assert correct.fitness.notna().all() and all("source_lines" in m for m in correct.metrics)
    by_id = rows.set_index("candidate_id")
    for _, r in rows.iterrows():  # isolation: a child's parents live in its own island
        for p in r.parent_ids:
            assert by_id.loc[p].island == r.island or r.is_migrant, (r.candidate_id, p)
    events = read_frame(rd, "events")
    assert {"placement", "checkpoint", "budget_stop"} <= set(events.kind)
    assert (Path(rd) / "config.yaml").is_file()


def test_a_workload_budget_stops_only_that_workload(ray_cluster, tmp_path):
    over = {"budgets.max_evals": None, "budgets.per_workload_max_evals": 3}
    res, rd = run(ray_cluster, tmp_path, workloads=["builtin:matmul", "builtin:scaled_gelu"],
                  **{"population.islands": 1, **over})  # fmt: skip
    rows = read_frame(rd, "candidates")
    counts = rows[~rows.is_migrant].groupby("workload").size().to_dict()
    assert counts == {"builtin:matmul": 3, "builtin:scaled_gelu": 3}, counts
    stops = read_frame(rd, "events").query("kind == 'budget_stop'")
    assert len(stops) == 2 and all("per_workload_max_evals" in d for d in stops.detail)


def test_a_larger_budget_on_resume_judges_the_children_a_budget_stop_refused(ray_cluster, tmp_path):
    """A budget stop refuses children an island had already proposed (their steps taken). The
    checkpoint keeps them; `evo resume` with a larger budget judges them, so every island's
    steps run 0..n-1 with none missing and none twice."""
    from evo.engine import resume
    from evo.rundir import RunDir

    res, rd = run(ray_cluster, tmp_path, **{"budgets.max_evals": 5})
    assert res["stop"] == "budget: max_evals", res
    refused = RunDir(rd).latest_checkpoint()["unadmitted"]
    assert refused and all(p["source"] for p in refused), refused
    again = resume(rd, max_evals=8, quiet=True)
    assert again["stop"] == "budget: max_evals", again
    judged = read_frame(rd, "candidates").query("~is_migrant")
    assert len(judged) == 8 and judged.candidate_id.is_unique
    assert {p["candidate_id"] for p in refused} <= set(judged.candidate_id)
    for island, g in judged.groupby("island"):
        assert sorted(g.step) == list(range(len(g))), (island, sorted(g.step))
    resumed = read_frame(rd, "events").query("kind == 'resume'").detail.map(json.loads)
    assert list(resumed.map(lambda d: d["readmitted"])) == [len(refused)]


def test_a_run_directory_in_use_is_refused(ray_cluster, tmp_path):
    from evo.rundir import RunDir

    holder = RunDir(str(tmp_path / "busy"))
    holder.lock()
    try:
        cfg = load_config_dict(config(tmp_path))
        with pytest.raises(EvoError, match="in use"):
            Engine(cfg, str(tmp_path / "busy"), quiet=True).run()
    finally:
        holder.unlock()


def test_a_fitness_worker_killed_mid_evaluation_is_replaced(ray_cluster, tmp_path):
    import ray

    cfg = load_config_dict(config(tmp_path, **{"budgets.max_evals": 10}))
    eng = Engine(cfg, str(tmp_path / "kill"), quiet=True)
    out = {}
    t = threading.Thread(target=lambda: out.update(eng.run()))
    t.start()
    killed = False
    deadline = time.monotonic() + 120
    while not killed and time.monotonic() < deadline:
        time.sleep(0.2)
        if getattr(eng, "pending", None) and eng.progress.evaluated >= 1:
            worker = ray.get_actor(f"evo-fitness-{eng.run_id}-0")
            ray.kill(worker)
            killed = True
    t.join(timeout=300)
    assert killed and out, out
    rows = read_frame(str(tmp_path / "kill"), "candidates")
    died = rows[rows.reason.fillna("").str.startswith(WORKER_DIED)]
    assert len(died) >= 1 and set(died.status) == {"runtime_error"}
    assert out["evaluated"] == 10
    events = read_frame(str(tmp_path / "kill"), "events")
    assert "fault" in set(events.kind)


def test_a_run_directory_on_an_object_store(ray_cluster, s3_bucket):
    """An s3:// run directory (a loopback S3 server): lineage, checkpoints and the lock."""
    from evo.rundir import RunDir

    uri = f"s3://{s3_bucket}/runs/r1"
    cfg = load_config_dict(config(None, **{"budgets.max_evals": 4}))
    res = Engine(cfg, uri, quiet=True).run()
    assert res["evaluated"] == 4, res
    assert len(read_frame(uri, "candidates").query("not is_migrant")) == 4
    rd = RunDir(uri)
    assert rd.latest_checkpoint()["run_id"] == res["run_id"] and rd.exists("config.yaml")
    assert not rd.exists("LOCK")  # released at the end
    rd.lock()
    try:
        with pytest.raises(EvoError, match="in use"):
            Engine(cfg, uri, quiet=True).run()
    finally:
        rd.unlock()


def test_a_dead_island_host_is_restored_from_checkpoint_and_lineage(ray_cluster, tmp_path):
    import ray

    cfg = load_config_dict(config(tmp_path, **{"budgets.max_evals": 12}))
    eng = Engine(cfg, str(tmp_path / "host"), quiet=True)
    out = {}
    t = threading.Thread(target=lambda: out.update(eng.run()))
    t.start()
    killed = False
    deadline = time.monotonic() + 120
    while not killed and time.monotonic() < deadline:
        time.sleep(0.2)
        if getattr(eng, "pending", None) and eng.progress.evaluated >= 4:
            ray.kill(ray.get_actor(f"evo-islands-{eng.run_id}-0"))
            killed = True
    t.join(timeout=300)
    assert killed and out, out
    rows = read_frame(str(tmp_path / "host"), "candidates")
    assert rows.candidate_id.is_unique
    events = read_frame(str(tmp_path / "host"), "events")
    assert {"fault", "restore"} <= set(events.kind)
    assert out["evaluated"] == 12
    # rows an unflushed host lost are the only gap: everything else was recorded once
    assert 1 <= len(rows[~rows.is_migrant]) <= 12


def _cli(args: list[str], **kw) -> subprocess.Popen:
    env = {**os.environ, "TRITON_INTERPRET": "1", "RAY_AUTH_MODE": "disabled",
           "PYTHONPATH": str(ROOT)}  # fmt: skip
    return subprocess.Popen(
        [sys.executable, "-m", "evo", *args], cwd=ROOT, env=env,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw,
    )  # fmt: skip


KEY = ["candidate_id", "island", "step", "operator", "source_hash", "status", "is_migrant"]


def _table(rd: str):
    """The candidate table without run ids (each run draws its own) or timing columns."""
    t = read_frame(rd, "candidates")
    local = lambda cid: cid.split("/", 1)[1]  # noqa: E731
    t["candidate_id"] = t.candidate_id.map(local)
    t["parents"] = t.parent_ids.map(lambda ps: tuple(local(p) for p in ps))
    return t[KEY + ["parents"]].sort_values("candidate_id").reset_index(drop=True)


@pytest.mark.timeout(300)
def test_a_run_stopped_by_a_signal_exits_130_and_a_missing_run_is_named(tmp_path):
    """Exit codes a script can read: 130 for a run Ctrl-C (or SIGTERM) stopped, with its
    stop reason in the closing JSON; 2 for `evo resume` of a directory that does not exist."""
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(config(tmp_path, **{"budgets.max_evals": 200})))
    run = _cli(["run", str(path), "--run-dir", str(tmp_path / "run"), "--quiet"])
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and run.poll() is None:
        time.sleep(0.2)
        try:
            if len(read_frame(str(tmp_path / "run"), "candidates", columns=["candidate_id"])):
                break
        except Exception:  # noqa: BLE001 - nothing written yet
            pass
    assert run.poll() is None, "the run ended before it could be stopped"
    run.send_signal(signal.SIGINT)
    out, err = run.communicate(timeout=120)
    assert run.returncode == 130, err
    assert json.loads(out.strip().splitlines()[-1])["stop"] == "signal"
    missing = _cli(["resume", str(tmp_path / "nowhere")])
    _, err = missing.communicate(timeout=120)
    assert missing.returncode == 2 and "does not exist" in err, err


@pytest.mark.timeout(600)
def test_sigkill_then_resume_equals_an_uninterrupted_run(tmp_path):
    """Deterministic mode: kill the driver mid-run, resume it, and the candidate table equals
    that of a run never stopped (timing columns aside); nothing lost or recorded twice."""
    cfg = config(tmp_path, deterministic=True, **{"budgets.max_evals": 16})
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(cfg))
    whole = _cli(["run", str(path), "--run-dir", str(tmp_path / "whole"), "--quiet"])
    assert whole.wait(timeout=300) == 0, whole.stderr.read()

    cut = _cli(["run", str(path), "--run-dir", str(tmp_path / "cut"), "--quiet"],
               start_new_session=True)  # fmt: skip
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        time.sleep(0.2)
        try:
            n = len(read_frame(str(tmp_path / "cut"), "candidates", columns=["candidate_id"]))
        except Exception:  # noqa: BLE001 - nothing written yet
            n = 0
        if n >= 2 or cut.poll() is not None:
            break
    assert cut.poll() is None, "the run ended before it could be killed"
    os.killpg(cut.pid, signal.SIGKILL)
    cut.wait()
    before = len(read_frame(str(tmp_path / "cut"), "candidates", columns=["candidate_id"]))
    assert 2 <= before < 16

    res = _cli(["resume", str(tmp_path / "cut"), "--quiet"])
    out, err = res.communicate(timeout=300)
    assert res.returncode == 0, err
    assert json.loads(out.strip().splitlines()[-1])["stop"]
    a, b = _table(str(tmp_path / "whole")), _table(str(tmp_path / "cut"))
    assert b.candidate_id.is_unique
    assert a.equals(b), a.compare(b) if a.shape == b.shape else (a.shape, b.shape)


@pytest.mark.timeout(600)
def test_sigkill_then_resume_loses_and_duplicates_nothing(tmp_path):
    """The default (steady-state) mode: after kill -9 and `evo resume`, every row recorded
    before the kill is still there, no candidate is recorded twice, and the run ends at its
    evaluation budget."""
    cfg = config(tmp_path, **{"budgets.max_evals": 14})
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(cfg))
    rd = str(tmp_path / "cut")
    cut = _cli(["run", str(path), "--run-dir", rd, "--quiet"], start_new_session=True)
    deadline = time.monotonic() + 240
    n = 0
    while time.monotonic() < deadline and cut.poll() is None:
        time.sleep(0.2)
        try:
            n = len(read_frame(rd, "candidates", columns=["candidate_id"]))
        except Exception:  # noqa: BLE001 - nothing written yet
            n = 0
        if n >= 4 and (Path(rd) / "checkpoints").is_dir():
            break
    assert cut.poll() is None, "the run ended before it could be killed"
    os.killpg(cut.pid, signal.SIGKILL)
    cut.wait()
    before = set(read_frame(rd, "candidates", columns=["candidate_id"]).candidate_id)
    res = _cli(["resume", rd, "--quiet"])
    out, err = res.communicate(timeout=300)
    assert res.returncode == 0, err
    rows = read_frame(rd, "candidates")
    assert rows.candidate_id.is_unique
    assert before <= set(rows.candidate_id)
    assert len(rows[~rows.is_migrant]) == 14, json.loads(out.strip().splitlines()[-1])
    assert "resume" in set(read_frame(rd, "events").kind)
