"""FitnessService and the FitnessWorker actor: a stream of candidates, placement, resilience."""

from pathlib import Path

import pytest

from fitness.results import Status
from fitness.worker import EvalRequest, FitnessService, start_workers

SEEDS = Path(__file__).resolve().parents[1] / "experiments" / "workloads" / "seeds"
FAST = {"baselines": False}


def request(name: str, source: str | None = None, **kw) -> EvalRequest:
    src = source if source is not None else (SEEDS / f"{name}_triton.py").read_text()
    kw["options"] = {**FAST, **kw.get("options", {})}
    return EvalRequest(source=src, workload=f"builtin:{name}", **kw)


@pytest.fixture(scope="module")
def service():
    return FitnessService(device="cpu", cache=True)


def test_stream_returns_verdicts_in_order(service):
    bad = (SEEDS / "row_sum_triton.py").read_text().replace("class ModelNew", "class Nope")
    results = service.evaluate_many(
        [request("row_sum"), request("row_sum", bad), request("softmax")]
    )
    assert [r["status"] for r in results] == ["correct", "generation_failure", "correct"]
    assert results[0]["workload"] == "builtin:row_sum"


def test_bad_request_becomes_a_status_and_the_service_lives_on(service):
    res = service.evaluate(EvalRequest(source="x = 1\n", workload="builtin:no_such"))
    assert res["status"] == Status.GENERATION_FAILURE.value and "no_such" in res["reason"]
    res = service.evaluate(request("row_sum", options={"no_such_option": 1}))
    assert res["status"] == Status.GENERATION_FAILURE.value and "no_such_option" in res["reason"]
    assert service.evaluate(request("row_sum"))["status"] == "correct"


def test_crashing_candidate_does_not_kill_the_service(service):
    src = (SEEDS / "row_sum_triton.py").read_text()
    crash = src.replace("import torch\n", "import torch\nimport os\n", 1)
    crash = crash.replace("class ModelNew", "os.abort()\n\n\nclass ModelNew", 1)
    res = service.evaluate(request("row_sum", crash, guardrails={"enabled": False}))
    assert res["status"] == "runtime_error" and "SIGABRT" in res["reason"]
    assert service.evaluate(request("row_sum"))["status"] == "correct"


def test_verdict_cache_hits_for_the_same_source(service):
    first = service.evaluate(request("softmax"))
    again = service.evaluate(request("softmax"))
    assert first["status"] == again["status"] == "correct"
    assert again["metrics"].get("cache_hit") == 1.0
    assert again["runtime_ms"] == first["runtime_ms"]


def test_one_worker_per_gpu_on_ray(ray_cluster):
    workers = start_workers(build_jobs=1)
    assert len(workers) == 2  # the session cluster fakes two GPUs
    infos = ray_cluster.get([w.info.remote() for w in workers])
    assert sorted(i["cuda_visible_devices"] for i in infos) == ["0", "1"]
    assert len({i["pid"] for i in infos}) == 2
    res = ray_cluster.get(workers[0].evaluate.remote(request("scaled_gelu")))
    assert res["status"] == "correct", res["reason"]
    rid = ray_cluster.get(workers[1].submit.remote(request("row_sum")))
    done = []
    while not done:
        done = ray_cluster.get(workers[1].poll.remote(timeout=1.0))
    assert done[0][0] == rid and done[0][1]["status"] == "correct"
    for w in workers:
        ray_cluster.kill(w)


def test_a_judge_process_of_its_own_judges_and_is_replaced_when_it_dies():
    """On a GPU the judge runs apart from the service (its clock must not share a Ray actor's
    interpreter lock); a judge killed mid-evaluation is a fault, and the next gets a new one."""
    import os
    import signal
    import threading
    import time

    service = FitnessService(device="cpu", judge_process=True)
    assert service.evaluate(request("row_sum"))["status"] == "correct"
    first = service.judge_pid()
    assert first and first != os.getpid()

    src = (SEEDS / "row_sum_triton.py").read_text()
    hang = src.replace("class ModelNew", "while True:\n    pass\n\n\nclass ModelNew", 1)

    def kill_judge_soon():
        time.sleep(3)
        os.kill(first, signal.SIGKILL)

    threading.Thread(target=kill_judge_soon, daemon=True).start()
    res = service.evaluate(request("row_sum", hang, guardrails={"enabled": False}))
    assert res["status"] == "runtime_error" and "judge process died" in res["reason"]
    assert service.evaluate(request("row_sum"))["status"] == "correct"
    assert service.judge_pid() not in (None, first)


def test_a_geomean_request_times_every_shape_and_the_first_wrong_one_decides(service):
    """Fitness over shapes (`geomean_speedup_vs_eager`): each extra shape is a full verdict;
    the default shape's verdict carries every shape's speedup and their geomean."""
    import math

    from evo.candidate import fitness_function
    from fitness.workloads import resolve_workload

    shapes = [dict(s) for s in resolve_workload("builtin:row_sum").shapes]
    src = (SEEDS / "row_sum_triton.py").read_text()
    base = {"options": {"baselines": True}, "shapes": [shapes[1]]}
    res = service.evaluate(request("row_sum", src, overrides=shapes[0], **base))
    assert res["status"] == "correct", res["reason"]
    m = res["metrics"]
    both = [res["speedup_vs_eager"], m["speedup_vs_eager@1"]]
    assert m["shapes"] == 2.0
    assert math.isclose(m["geomean_speedup_vs_eager"], math.sqrt(both[0] * both[1]))
    geo = fitness_function("geomean_speedup_vs_eager")
    assert geo(res, {}) == m["geomean_speedup_vs_eager"]
    assert geo({"speedup_vs_eager": 2.0, "metrics": {}}, {}) == 2.0  # one shape: its speedup

    # Wrong at shape 0 only; evaluated at shape 1, whose own rounds never visit shape 0.
    wrong = src.replace(
        "x2, y, n_cols, x2.stride(0)",
        f"x2, y, n_cols - (1 if x2.shape[0] == {shapes[0]['ROWS']} else 0), x2.stride(0)",
    )
    assert wrong != src
    other = {**base, "shapes": [shapes[0]]}
    res = service.evaluate(request("row_sum", wrong, overrides=shapes[1], **other))
    assert res["status"] == "mismatch" and res["reason"].startswith(f"at shape {shapes[0]}:")


def test_a_verdict_cached_without_baselines_is_not_served_to_a_request_with_them(service):
    """What the verdict holds is part of its key: a verdict judged without baselines has no
    speedups, so a request that wants them is judged again."""
    bare = service.evaluate(request("softmax"))
    assert bare["status"] == "correct" and bare["speedup_vs_eager"] is None
    full = service.evaluate(request("softmax", options={"baselines": True}))
    assert full["speedup_vs_eager"] is not None and not full["metrics"].get("cache_hit")
