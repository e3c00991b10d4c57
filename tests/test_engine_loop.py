"""The operators in the loop: the analyst's advice reaching a lineage, an ensemble of models,
the operator mix, repair attempts per lineage, initial children for an island with no seed,
cross-backend translation, and prompt overrides from the config.

Engine runs use a real local Ray, the real openai and anthropic SDKs against the loopback
server, and the real fitness service (the Triton interpreter on the CPU)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from pyarrow import fs as pafs

from evo.config import load_config_dict
from evo.engine import Engine
from evo.island import IslandHost
from evo.lineage import read_frame
from evo.rundir import RunDir
from fitness.profile import Profile, safe_id
from operators.offline import find_params
from tests.llm_server import LLMServer, Reply

ROOT = Path(__file__).resolve().parents[1]
SEED = (ROOT / "experiments" / "workloads" / "seeds" / "matmul_triton.py").read_text()
MATMUL = ROOT / "experiments" / "workloads" / "matmul.py"
KEY = "sk-test-engine-loop-0123"
TRITON_ASK = "kernels launched from `forward`"  # the system prompt of a Triton candidate


def variant(k: int) -> Reply:
    body = SEED.replace("\nclass ModelNew", f"\n_VARIANT = {k}\n\n\nclass ModelNew", 1)
    return Reply(f"Here it is.\n\n```python\n{body}```\n", 1000 + k, 200 + k)


def broken(k: int) -> Reply:
    body = SEED + (
        f"\n\nclass ModelNew(nn.Module):  # broken {k}\n"
        "    def forward(self, a, b):\n"
        f"        raise RuntimeError('boom {k}')\n"
    )
    return Reply(f"```python\n{body}```\n", 900, 100)


def counter(make):
    """A responder that answers each request with make(k), k = 1, 2, ..."""
    n = [0]

    def respond(request):
        n[0] += 1
        return make(n[0])

    return respond


def base(**over) -> dict:
    d = {
        "name": "loop",
        "workloads": ["builtin:matmul"],
        "population": {"islands": 1, "in_flight": 1, "cap": 8, "elites": 1},
        "migration": {"topology": "none"},
        "fitness": {"metric": "tests.fitness_plugins:shorter_is_fitter", "samples": 3},
        "budgets": {"max_evals": 4},
        "deterministic": True,
        "seed": 3,
    }
    d.update(over)
    return d


@pytest.fixture
def keys(monkeypatch):
    for var in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY"):
        monkeypatch.setenv(var, KEY)
    for var in ("OPENAI_BASE_URL", "ANTHROPIC_BASE_URL"):
        monkeypatch.delenv(var, raising=False)


# -- the analyst's advice, on an island host (plain Python)


def host(tmp_path, **over) -> IslandHost:
    cfg = load_config_dict(base(**over)).to_dict()
    cfg["fitness"]["device"] = "cuda"  # the operator tunes the GPU's parameters (none runs)
    return IslandHost("r1", str(tmp_path), "builtin:matmul", {"triton": [{"source": SEED}]}, cfg)


def correct(prop: dict) -> dict:
    return {"status": "correct", "reason": "", "speedup_vs_eager": 1.0, "metrics": {}}


def block_moves(parent: str, child: str) -> list[int]:
    """+1 / -1 per block parameter the child changed (by position in the source)."""
    a = [p for p in find_params(parent) if p.kind == "block"]
    b = [p for p in find_params(child) if p.kind == "block"]
    return [(q.value > p.value) - (q.value < p.value) for p, q in zip(a, b) if p.value != q.value]


def test_a_recommendation_steers_its_lineage_offline_and_in_the_llm_prompt(tmp_path):
    h = host(tmp_path, deterministic=False)
    island = h.islands[0]
    (seed,) = h.propose(island, 1)
    assert h.integrate([(seed, correct(seed))]) == [
        {"island": island, "candidate_id": seed["candidate_id"]}
    ]
    unhinted = [block_moves(SEED, p["source"]) for p in h.propose(island, 8)]

    rec = {"text": "Memory-bound: raise nothing, shrink the tiles.", "params_hint": {"block": -1}}
    assert h.set_recommendation(island, seed["candidate_id"], rec)
    assert not h.set_recommendation(island, "r1/none/000009", rec)
    children = h.propose(island, 8)
    assert children and all(c["recommendation"] == rec["text"] for c in children)
    hinted = [block_moves(SEED, c["source"]) for c in children]
    # Every hinted child moves a block size, and every block size it moves gets smaller;
    # without the hint the same island moved them both ways.
    assert all(m and all(x < 0 for x in m) for m in hinted), hinted
    assert {x for m in unhinted for x in m} == {-1, 1}

    # The recommendation survives a checkpoint, and an LLM island shows it to the model.
    state = h.get_state()
    llm = IslandHost(
        "r1",
        str(tmp_path / "llm"),
        "builtin:matmul",
        {"triton": [{"source": SEED}]},
        {**h.cfg, "llm": {"spec": "command:true"}, "operators": {"mutate": 1, "crossover": 0}},
    )
    llm.set_state(state)
    (req,) = llm.propose(island, 1)
    parent = req["extra"]["request"]["parents"][0]
    assert req["operator"] == "llm_mutate" and req["recommendation"] == rec["text"]
    assert parent["recommendation"] == rec["text"] and "params_hint" not in parent
    h.close()
    llm.close()


def test_a_run_profiles_its_new_bests_and_stores_the_advice(ray_cluster, tmp_path):
    """Each island's seed is its first new best; the two seeds are the same kernel, which is
    profiled once and advised on for both."""
    cfg = load_config_dict(
        base(
            deterministic=False,
            population={"islands": 2, "in_flight": 1, "cap": 8, "elites": 1},
            fitness={"device": "cpu", "samples": 3},
            analyst={"max_per_island": 1},
        )
    )
    run = str(tmp_path / "run")
    Engine(cfg, run, quiet=True).run()
    rows = read_frame(run, "candidates")
    seeds = set(rows[rows.operator == "seed"].candidate_id)
    events = read_frame(run, "events")
    (placement,) = [json.loads(d) for d in events[events.kind == "placement"].detail]
    assert len(placement["fitness"]) == placement["workers"] == 1  # where the worker ran
    assert placement["fitness"][0]["host"]
    done = [json.loads(d) for d in events[events.kind == "analysis"].detail]
    # (A child that times faster than its seed is a new best too, and may be profiled.)
    advised = [d for d in done if "recommendation" in d]
    on_seeds = [d for d in advised if d["candidate_id"] in seeds]
    assert {d["candidate_id"] for d in on_seeds} == seeds and len(on_seeds) == 2
    (first,) = [d for d in on_seeds if not d.get("reused")]  # one profile for the one kernel
    assert first["profile"] == f"artifacts/profiles/{safe_id(first['candidate_id'])}.json"
    rd = RunDir(run)
    stored = rd.fs.get_file_info(pafs.FileSelector(rd.path("artifacts", "profiles")))
    assert len(stored) == len([d for d in advised if not d.get("reused")])
    profile = Profile.from_json(RunDir(run).read_text(first["profile"]))
    assert profile.workload == "builtin:matmul" and profile.kernels
    rec = first["recommendation"]
    assert rec["text"] and rec["kind"] and all(d["recommendation"] == rec for d in on_seeds)
    # The advice is part of each island's state from then on.
    pops = RunDir(run).latest_checkpoint()["hosts"]["builtin:matmul"]["pops"]
    for seed in seeds:
        (m,) = [m for p in pops.values() for m in p["members"] if m["candidate_id"] == seed]
        assert m["summary"]["recommendation"] == rec["text"]


def test_deterministic_mode_turns_the_analyst_off_and_says_so(ray_cluster, tmp_path):
    cfg = load_config_dict(base(fitness={"device": "cpu", "samples": 3}, budgets={"max_evals": 1}))
    run = str(tmp_path / "run")
    Engine(cfg, run, quiet=True).run()
    events = read_frame(run, "events")
    details = [json.loads(d) for d in events[events.kind == "analysis"].detail]
    assert details == [{"off": "deterministic mode"}]
    assert not RunDir(run).exists("artifacts", "profiles")


# -- the LLM operators in the loop


def test_an_ensemble_draws_both_models_and_the_config_prompts_reach_them(
    ray_cluster, keys, tmp_path
):
    aux = tmp_path / "aux_helpers.py"
    aux.write_text("def helper_from_the_config():\n    return 'AUX-CODE-41'\n")
    with LLMServer(responder=counter(variant)) as server:
        cfg = load_config_dict(
            base(
                budgets={"max_evals": 7},
                llm={
                    "models": [
                        {"spec": "openai:m1", "base_url": server.openai_base_url},
                        {
                            "spec": "anthropic:m2",
                            "base_url": server.anthropic_base_url,
                            "weight": 2.0,
                            "price_in": 1.0,
                            "price_out": 2.0,
                        },
                    ]
                },  # fmt: skip
                operators={"mutate": 1.0, "crossover": 0, "repair": 0, "translate": 0},
                prompts=[
                    {"append": {"*": "MARKER-7f3"}, "aux_code": {"mutate": [str(aux)]}},
                    {"append": {"mutate": "LATE-STEP-NOTE"}, "steps": [3, 100]},
                ],
            )
        )
        run = str(tmp_path / "run")
        Engine(cfg, run, quiet=True).run()
    rows = read_frame(run, "candidates")
    calls = read_frame(run, "llm_calls")
    drafted = rows[rows.operator.str.startswith("llm_")]
    assert set(drafted.operator) == {"llm_mutate"} and len(drafted) == len(calls) >= 5
    assert set(calls.model) == {"m1", "m2"} and set(drafted.model) == {"m1", "m2"}
    # Each model is priced by its own entry: m1 is free, m2 is not.
    assert (calls[calls.model == "m1"].cost_usd == 0).all()
    assert (calls[calls.model == "m2"].cost_usd > 0).all()
    steps = dict(zip(drafted.llm_call_id, drafted.step, strict=True))
    for call in calls.itertuples():
        assert "MARKER-7f3" in call.prompt and "AUX-CODE-41" in call.prompt
        assert ("LATE-STEP-NOTE" in call.prompt) == (steps[call.llm_call_id] >= 3)


def test_a_failed_lineage_gets_at_most_k_repairs(ray_cluster, keys, tmp_path):
    with LLMServer(responder=counter(broken)) as server:
        cfg = load_config_dict(
            base(
                budgets={"max_evals": 9},
                llm={"spec": "openai:m1", "base_url": server.openai_base_url},
                operators={"mutate": 1.0, "crossover": 0, "repair": 100.0, "repair_attempts": 2},
            )
        )
        run = str(tmp_path / "run")
        Engine(cfg, run, quiet=True).run()
    rows = read_frame(run, "candidates").set_index("candidate_id")
    repairs = rows[rows.operator == "llm_repair"]
    metrics = {cid: dict(m) for cid, m in rows.metrics.items()}
    attempt = lambda cid: metrics[cid].get("repair_attempt", 0.0)  # noqa: E731
    assert len(repairs) >= 3
    parents = [p[0] for p in repairs.parent_ids]
    assert len(set(parents)) == len(parents)  # a failure is repaired once
    for cid, parent in zip(repairs.index, parents, strict=True):
        assert rows.status[parent] == "runtime_error"
        assert attempt(parent) < 2 and attempt(cid) == attempt(parent) + 1
    assert max(attempt(c) for c in repairs.index) == 2
    # After two repairs a lineage is left alone: the island mutates a correct member again.
    after = rows[(rows.operator == "llm_mutate") & (rows.step > repairs.step.min())]
    assert len(after) >= 1


def test_an_island_without_a_seed_starts_from_initial_and_ports_across_backends(
    ray_cluster, keys, tmp_path
):
    workload = tmp_path / "mm.py"  # a workload file of its own: no seed kernel
    shutil.copy(MATMUL, workload)

    n = [0]

    def respond(request):  # every reply new, so none is dropped as a duplicate
        n[0] += 1
        if TRITON_ASK in request.prompt:
            return Reply(f"```python\n{SEED}\n_REPLY = {n[0]}\n```\n", 500, 50)
        body = f"import torch\n\n_REPLY = {n[0]}\n\n\nclass ModelNew(torch.nn.Module):\n    pass\n"
        return Reply(f"```python\n{body}```")

    with LLMServer(responder=respond) as server:
        cfg = load_config_dict(
            base(
                workloads=[str(workload)],
                backends=["triton", "cuda"],
                budgets={"max_evals": 10},  # five steps an island: ports from step 2 on
                migration={"topology": "none", "cross_backend": True, "interval": 1},
                llm={"spec": "openai:m1", "base_url": server.openai_base_url},
                operators={"mutate": 1.0, "crossover": 0, "repair": 0, "translate": 50.0},
            )
        )
        run = str(tmp_path / "run")
        Engine(cfg, run, quiet=True).run()
    rows = read_frame(run, "candidates")
    calls = read_frame(run, "llm_calls").set_index("llm_call_id")
    triton = rows[rows.backend == "triton"].sort_values("step")
    assert triton.operator.iloc[0] == "llm_initial" and triton.status.iloc[0] == "correct"
    assert triton.parent_ids.iloc[0].tolist() == []
    cuda = rows[rows.backend == "cuda"].sort_values("step")
    assert cuda.operator.iloc[0] == "llm_initial"
    ports = cuda[cuda.operator == "llm_translate"]
    assert len(ports) >= 1
    ids = set(triton[triton.status == "correct"].candidate_id)
    for port in ports.itertuples():
        (parent,) = port.parent_ids
        assert parent in ids  # a correct kernel of the Triton island
        prompt = calls.prompt[port.llm_call_id]
        assert "_matmul_kernel" in prompt and "__global__" in prompt


def test_an_island_whose_model_repeats_itself_stops_asking(ray_cluster, keys, tmp_path):
    """Duplicates cost no evaluation: without a limit, a model that always gives the same
    kernel (or no code) would be asked again for ever (seen on the H100 with a scripted
    agent: 750 calls in 150 s)."""
    from evo.engine import STALL_LIMIT

    with LLMServer(default=variant(1)) as server:
        cfg = load_config_dict(
            base(
                deterministic=False,
                budgets={"max_evals": 50},
                llm={"spec": "openai:m1", "base_url": server.openai_base_url},
                operators={"mutate": 1.0, "crossover": 0, "repair": 0},
                analyst={"enabled": False},
            )
        )
        run = str(tmp_path / "run")
        res = Engine(cfg, run, quiet=True).run()
    rows = read_frame(run, "candidates")
    calls = read_frame(run, "llm_calls")
    events = read_frame(run, "events")
    assert res["stop"] == "no island has anything left to propose"
    assert list(rows.operator) == ["seed", "llm_mutate"]  # the one new kernel, judged once
    (stall,) = [json.loads(d) for d in events[events.kind == "stalled"].detail]
    assert stall["drafts"] == STALL_LIMIT and "duplicate" in stall["last"]
    assert STALL_LIMIT + 1 <= len(calls) <= STALL_LIMIT + 1 + cfg.population.in_flight


def test_a_resumed_island_does_not_repair_a_failure_twice(tmp_path):
    """The repairs a failure has had are rebuilt from the lineage on resume, not only from
    the checkpoint (which may predate them)."""
    cfg = load_config_dict(
        base(
            llm={"spec": "command:true"},
            operators={"mutate": 1.0, "crossover": 0, "repair": 100.0, "repair_attempts": 3},
        )
    ).to_dict()
    cfg["fitness"]["device"] = "cpu"
    failed = {"status": "runtime_error", "reason": "boom", "metrics": {}}
    a = IslandHost("r1", str(tmp_path / "a"), "builtin:matmul", {"triton": [{"source": SEED}]}, cfg)
    island = a.islands[0]
    (seed,) = a.propose(island, 1)
    a.integrate([(seed, failed)])
    checkpoint = a.get_state()
    (repair,) = a.propose(island, 1)
    assert repair["operator"] == "llm_repair" and repair["parent_ids"] == [seed["candidate_id"]]
    repair.update(source=SEED + "\n_R = 1\n", source_hash="r1hash")
    a.integrate([(repair, failed)])
    a.flush()
    rows = read_frame(str(tmp_path / "a"), "candidates")
    later = [r for r in rows.to_dict("records") if r["candidate_id"] == repair["candidate_id"]]

    b = IslandHost("r1", str(tmp_path / "b"), "builtin:matmul", {"triton": [{"source": SEED}]}, cfg)
    b.set_state(checkpoint)
    b.fold_rows(later)
    (again,) = b.propose(island, 1)
    assert again["operator"] == "llm_repair"
    assert again["parent_ids"] == [repair["candidate_id"]]  # not the seed's failure again
    a.close()
    b.close()


def test_children_in_flight_count_for_dedup_and_survive_a_checkpoint(tmp_path):
    """Children proposed before any of them is judged are all different sources (on the H100
    two identical children of one parent were both judged); their hashes are kept in the
    checkpoint and leave it when their verdicts are folded."""
    a = host(tmp_path / "a")
    island = a.islands[0]
    (seed,) = a.propose(island, 1)
    a.integrate([(seed, correct(seed))])
    props = a.propose(island, 30)  # none judged yet
    hashes = [p["source_hash"] for p in props]
    assert len(props) >= 5 and len(set(hashes)) == len(hashes)
    assert a.pending[island] == set(hashes)

    b = host(tmp_path / "b")
    b.set_state(json.loads(json.dumps(a.get_state())))
    assert b.pending[island] == set(hashes)
    b.integrate([(props[0], correct(props[0]))])
    assert b.pending[island] == set(hashes[1:]) and b.pops[island].seen(hashes[0])
    for p in b.propose(island, 30):
        assert p["source_hash"] not in hashes
    a.close()
    b.close()
