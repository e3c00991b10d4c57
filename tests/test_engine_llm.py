"""`evo run` with a model: the LLM operators on a real local Ray, the real openai SDK against
the loopback server, the real fitness service (interpreter), and replay of the recorded run."""

from __future__ import annotations

from pathlib import Path

import pytest

from evo.config import load_config_dict
from evo.engine import Engine
from evo.lineage import read_frame
from tests.llm_server import LLMServer, Reply, no_code

ROOT = Path(__file__).resolve().parents[1]
SEED = (ROOT / "experiments" / "workloads" / "seeds" / "matmul_triton.py").read_text()
KEY = "sk-test-engine-llm-0123"


def variant(k: int) -> Reply:
    """A whole-file reply: the seed with a harmless constant, so each child is new."""
    body = SEED.replace("\nclass ModelNew", f"\n_VARIANT = {k}\n\n\nclass ModelNew", 1)
    return Reply(f"Here is a faster version.\n\n```python\n{body}```\n", 1000 + k, 200 + k)


@pytest.fixture
def server(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with LLMServer() as s:
        yield s


def config(spec: str, base_url: str | None, **over) -> dict:
    d = {
        "name": "llm",
        "workloads": ["builtin:matmul"],
        "population": {"islands": 1, "in_flight": 1, "cap": 8, "elites": 1},
        "migration": {"topology": "none"},
        "fitness": {"metric": "tests.fitness_plugins:shorter_is_fitter", "samples": 3},
        "budgets": {"max_evals": 4},
        "llm": {
            "spec": spec,
            "base_url": base_url,
            "max_concurrency": 2,
            "price_in": 3.0,
            "price_out": 15.0,
        },
        "deterministic": True,
        "seed": 3,
    }
    d.update(over)
    return d


def test_a_run_with_a_model_records_its_calls_and_a_replay_repeats_its_children(
    ray_cluster, server, tmp_path
):
    script = [variant(1), no_code(), variant(2), variant(3), variant(4), variant(5)]
    server.script(*script)
    first = str(tmp_path / "live")
    cfg = load_config_dict(config("openai:m1", server.openai_base_url))
    res = Engine(cfg, first, quiet=True).run()
    rows = read_frame(first, "candidates").sort_values("step")
    calls = read_frame(first, "llm_calls")

    assert res["stop"] == "budget: max_evals", res
    assert rows.operator.iloc[0] == "seed"
    drafted = rows[rows.operator.str.startswith("llm_")]
    assert len(calls) == len(server.requests) == len(drafted)
    failed = drafted[drafted.status == "generation_failure"]
    assert len(failed) == 1 and "no code" in failed.reason.iloc[0]
    # Deterministic mode splits max_evals into proposals per island: the seed, then three
    # drafts, one of them a generation_failure (it costs no evaluation, but a proposal).
    judged = drafted[drafted.status != "generation_failure"]
    assert len(judged) == 2 and set(judged.status) == {"correct"}
    assert set(drafted.model) == {"m1"} and set(drafted.llm_call_id) == set(calls.llm_call_id)
    assert all("_VARIANT" in s for s in judged.source)
    sent = script[: len(calls)]
    assert calls.input_tokens.sum() == sum(r.input_tokens for r in sent)
    assert calls.output_tokens.sum() == sum(r.output_tokens for r in sent)
    dollars = sum(r.input_tokens * 3e-6 + r.output_tokens * 15e-6 for r in sent)
    assert calls.cost_usd.sum() == pytest.approx(dollars, rel=1e-12)
    assert not any(KEY in str(v) for v in calls.prompt.tolist() + calls.reply.tolist())

    # The replay asks no server: every answer comes from the first run's llm_calls.
    again = str(tmp_path / "replay")
    cfg = load_config_dict(config(f"replay:{first}", None))
    Engine(cfg, again, quiet=True).run()
    replayed = read_frame(again, "candidates").sort_values("step")
    cols = ["step", "operator", "source_hash", "status", "parent_ids"]
    strip = lambda df: [  # noqa: E731 - parent ids carry each run's id
        (r.step, r.operator, r.source_hash, r.status, [p.split("/", 1)[1] for p in r.parent_ids])
        for r in df[cols].itertuples()
    ]
    assert strip(replayed) == strip(rows)
    assert len(server.requests) == len(calls)


def test_a_request_whose_prompt_cannot_be_built_is_a_generation_failure(tmp_path):
    """A broken request (here: a repair with no error to show) fails its own child only."""
    from evo.budget import Budget
    from evo.drafting import Drafter

    cfg = load_config_dict(config("command:true", None))
    d = Drafter(cfg, str(tmp_path), "r", Budget())
    bad = {"kind": "repair", "parents": [{"source": SEED, "status": "mismatch", "label": "s"}],
           "inspirations": []}  # fmt: skip
    prop = {"candidate_id": "r/x/1", "island": "builtin:matmul|triton|0", "step": 1,
            "backend": "triton", "extra": {"request": bad}}  # fmt: skip
    d.submit("builtin:matmul", prop)
    while d.busy:
        (got,) = d.done() or [None]
        if got:
            break
    d.close()
    w, p, draft = got
    assert not draft.ok and draft.reason.startswith("operator error: PromptError: repair needs")


def test_drafted_children_a_budget_refused_are_judged_on_resume_without_asking_again(
    ray_cluster, server, tmp_path
):
    """A child the model already wrote but the evaluation budget refused is kept in the
    checkpoint; `evo resume` with a larger budget judges that very source (no second call
    for it), and no step is lost: each island's steps are its rows plus the children the
    last budget stop refused (drafts land in any order, so that may be an earlier step)."""
    from evo.engine import resume
    from evo.rundir import RunDir

    server.script(*[variant(k) for k in range(1, 13)])
    rd = str(tmp_path / "run")
    # Two seeds, then two drafts per island as its seed's verdict lands: the first draft back
    # takes the last of the 3 evaluations, and the next is refused.
    over = {"population": {"islands": 2, "in_flight": 2, "cap": 8, "elites": 1},
            "budgets": {"max_evals": 3}}  # fmt: skip
    cfg = load_config_dict(config("openai:m1", server.openai_base_url, deterministic=False, **over))
    Engine(cfg, rd, quiet=True).run()
    refused = RunDir(rd).latest_checkpoint()["unadmitted"]
    assert refused and all(p["source"] and p["llm_call_id"] for p in refused), refused
    asked = len(server.requests)

    res = resume(rd, max_evals=6, quiet=True)
    assert res["stop"] == "budget: max_evals", res
    rows = read_frame(rd, "candidates")
    assert len(rows) == 6 and rows.candidate_id.is_unique
    left = RunDir(rd).latest_checkpoint()["unadmitted"]
    steps: dict[str, list] = {}
    for island, step in [*zip(rows.island, rows.step), *((p["island"], p["step"]) for p in left)]:
        steps.setdefault(island, []).append(step)
    for island, s in steps.items():
        assert sorted(s) == list(range(len(s))), (island, sorted(s))
    by_id = rows.set_index("candidate_id")
    for p in refused:  # judged as drafted: the same source, the same call
        assert by_id.loc[p["candidate_id"], "source_hash"] == p["source_hash"]
        assert by_id.loc[p["candidate_id"], "llm_call_id"] == p["llm_call_id"]
    calls = read_frame(rd, "llm_calls")
    drafted = rows[rows.operator.str.startswith("llm_")]
    assert set(calls.llm_call_id) == set(drafted.llm_call_id) | {p["llm_call_id"] for p in left}
    assert len(server.requests) == len(calls) > asked
