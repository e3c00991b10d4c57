"""LLM operators end to end: a rendered prompt, the real SDKs against the loopback server, and
a child's source or a generation_failure reason for every kind of reply."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from evo.budget import Budget
from evo.lineage import LineageWriter
from evo.lineage import recorded_llm_calls as READ_CALLS
from operators.llm import LLMClient, ModelEntry
from operators.llm_operator import LLMOperator
from operators.prompting import CodeSample, PromptContext
from tests.llm_server import LLMServer, Reply, ServerError, malformed_diff, no_code

KEY = "sk-test-operator-0123456789"
WORKLOADS = Path(__file__).resolve().parents[1] / "experiments" / "workloads"
PARENT = (WORKLOADS / "seeds" / "row_sum_triton.py").read_text()
REFERENCE = (WORKLOADS / "row_sum.py").read_text()
# A diff the parent accepts: a different warp count for the widest rows.
OLD_LINE = next(ln for ln in PARENT.splitlines() if "num_warps" in ln and "=" in ln)
DIFF = f"<<<<<<< SEARCH\n{OLD_LINE}\n=======\n{OLD_LINE}  # tuned\n>>>>>>> REPLACE\n"


@pytest.fixture(autouse=True)
def _credentials(monkeypatch):
    for var in ("OPENAI_BASE_URL", "ANTHROPIC_BASE_URL"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)


@pytest.fixture
def server():
    with LLMServer() as s:
        yield s


def client(server: LLMServer, api: str = "openai", model: str = "m1", **kw) -> LLMClient:
    url = server.openai_base_url if api == "openai" else server.anthropic_base_url
    weight = kw.pop("weight", 1.0)
    entry = ModelEntry(f"{api}:{model}", price_in=3.0, price_out=15.0, base_url=url, weight=weight)
    kw.setdefault("sleep", lambda s: None)
    kw.setdefault("timeout", 5.0)
    kw.setdefault("max_retries", 1)
    return LLMClient.from_entry(entry, **kw)


def ctx(**kw) -> PromptContext:
    base = dict(
        reference=REFERENCE,
        workload="builtin:row_sum",
        parent=CodeSample(PARENT),
        recommendation="memory-bound at 41% of DRAM peak: give each program more columns",
        edit_format="diff",
    )
    return PromptContext(**{**base, **kw})


def test_mutate_applies_the_replys_diff_and_sends_the_parent_and_the_advice(server):
    server.script(Reply(f"Here is the change.\n\n{DIFF}", 900, 120))
    op = LLMOperator([client(server)])
    d = op.propose("mutate", "triton", ctx(), random.Random(0))
    assert d.ok and d.reason == "" and f"{OLD_LINE}  # tuned" in d.source
    assert d.source.replace("  # tuned", "") == PARENT
    assert (d.input_tokens, d.output_tokens) == (900, 120) and d.model == "m1"
    assert d.cost_usd == pytest.approx(900 * 3e-6 + 120 * 15e-6)
    (req,) = server.requests
    sent = "\n".join(m["content"] for m in req.body["messages"])
    assert "give each program more columns" in sent and OLD_LINE.strip() in sent
    assert d.templates[:2] == ("system.j2", "mutate.j2")


@pytest.mark.parametrize(
    ("reply", "words"),
    [
        (no_code(), "reply unusable: no code"),
        (malformed_diff(), "reply unusable: "),
        (Reply(DIFF.replace(OLD_LINE, "    this line is not in the parent")), "matches nothing"),
    ],
    ids=["no-code", "malformed-diff", "missing-anchor"],
)
def test_an_unusable_reply_is_a_generation_failure_with_its_reason(server, reply, words):
    server.script(reply)
    d = LLMOperator([client(server)]).propose("mutate", "triton", ctx(), random.Random(0))
    assert not d.ok and d.source is None and words in d.reason, d.reason
    assert d.llm_call_id  # the call happened and was recorded


def test_a_failed_call_and_a_refused_budget_are_generation_failures(server):
    server.script(ServerError(500), ServerError(500))
    d = LLMOperator([client(server)]).propose(
        "repair", "triton", ctx(error="boom"), random.Random(0)
    )
    assert not d.ok and d.reason.startswith("LLM: ") and "500" in d.reason
    broke = Budget(llm_dollars=0.0)
    d = LLMOperator([client(server, budget=broke)]).propose(
        "mutate", "triton", ctx(), random.Random(0)
    )
    assert not d.ok and d.reason.startswith("budget: ") and len(server.requests) == 2


def test_initial_needs_no_parent_and_rewrites_whole(server):
    server.script(Reply(f"```python\n{PARENT}```\n"))
    c = ctx(parent=None, edit_format="diff")
    d = LLMOperator([client(server, "anthropic")]).propose("initial", "triton", c, random.Random(0))
    assert d.ok and d.source == PARENT


def test_an_ensemble_draws_models_by_weight(server):
    server.script(*[Reply(f"```python\n{PARENT}```\n")] * 40)
    op = LLMOperator(
        [client(server, model="big", weight=1.0), client(server, model="small", weight=3.0)]
    )
    rng = random.Random(7)
    models = [
        op.propose("mutate", "triton", ctx(edit_format="rewrite"), rng).model for _ in range(40)
    ]
    assert 3 <= models.count("big") <= 18 and models.count("small") > models.count("big")


def test_a_replayed_run_proposes_the_same_children(server, tmp_path):
    """Recorded live, then answered from llm_calls/: the same contexts give the same drafts."""
    replies = [Reply(f"ok\n{DIFF}"), no_code(), Reply(f"```python\n{PARENT}```")]
    server.script(*replies)
    # The first two prompts are the same text: replay gives their replies in recorded order.
    contexts = [("mutate", ctx()), ("mutate", ctx(step=2)), ("repair", ctx(error="x"))]
    with LineageWriter(str(tmp_path), "llm_calls", "w0") as w:
        live = LLMOperator([client(server, record=w.append)])
        first = [live.propose(o, "triton", c, random.Random(0)) for o, c in contexts]
    entry = ModelEntry(f"replay:{tmp_path}")
    again = LLMOperator([LLMClient.from_entry(entry, recorded=READ_CALLS)])
    second = [again.propose(o, "triton", c, random.Random(0)) for o, c in contexts]
    assert [(d.source, d.reason) for d in second] == [(d.source, d.reason) for d in first]
    assert [d.ok for d in first] == [True, False, True]
    miss = again.propose("mutate", "triton", ctx(recommendation="other"), random.Random(0))
    assert not miss.ok and "no recorded reply" in miss.reason
