"""The LLM provider layer against real SDKs over real HTTP (a loopback server), a real
subprocess for `command:` and a real lineage table for `replay:`."""

from __future__ import annotations

import random
import sys
import threading
from pathlib import Path

import pytest

from evo.budget import Budget
from evo.lineage import LLM_CALL_SCHEMA, LineageWriter, read_table
from evo.lineage import recorded_llm_calls as READ_CALLS
from operators.llm import (
    NO_REPLY,
    CallResult,
    LLMClient,
    ModelEntry,
    ProviderConfigError,
    choose,
    make_provider,
    replay_key,
)
from tests.llm_server import (
    MALFORMED_DIFF_TEXT,
    NO_CODE_TEXT,
    Hang,
    LLMServer,
    RateLimited,
    Reply,
    ServerError,
    malformed_diff,
    no_code,
)

APIS = ("openai", "anthropic")
KEY = "sk-test-9f8e7d6c5b4a39281706"
PRICE_IN, PRICE_OUT = 3.0, 15.0  # USD per million tokens


@pytest.fixture(autouse=True)
def _keys(monkeypatch: pytest.MonkeyPatch) -> None:
    """Known credentials, and no endpoint from the environment of whoever runs the tests."""
    for var in ("OPENAI_BASE_URL", "ANTHROPIC_BASE_URL", "ANTHROPIC_AUTH_TOKEN"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)


@pytest.fixture
def server():
    with LLMServer() as s:
        yield s


class Sleeps(list):
    """An injected sleep that records what it was asked to wait and returns at once."""

    def __call__(self, seconds: float) -> None:
        self.append(seconds)


def base_url(server: LLMServer, api: str) -> str:
    return server.openai_base_url if api == "openai" else server.anthropic_base_url


def client(server: LLMServer, api: str, model: str = "test-model", **kw) -> LLMClient:
    entry_kw = {k: kw.pop(k) for k in ("max_tokens", "max_concurrency", "temperature") if k in kw}
    entry = ModelEntry(
        f"{api}:{model}",
        price_in=PRICE_IN,
        price_out=PRICE_OUT,
        base_url=base_url(server, api),
        **entry_kw,
    )
    kw.setdefault("sleep", Sleeps())
    kw.setdefault("timeout", 5.0)
    return LLMClient.from_entry(entry, **kw)


# -- one call, both SDKs


@pytest.mark.parametrize("api", APIS)
def test_normal_reply_is_parsed_priced_and_recorded(server: LLMServer, api: str) -> None:
    server.script(Reply("def kernel(): pass", input_tokens=120, output_tokens=45))
    rows: list[dict] = []
    c = client(server, api, record=rows.append, run_id="run-1", max_tokens=256, temperature=0.3)
    result = c.complete("speed this up", operator="mutate", system="you write kernels")

    assert result.ok and result.error is None and result.error_kind is None
    assert result.text == "def kernel(): pass"
    assert (result.input_tokens, result.output_tokens, result.attempts) == (120, 45, 1)
    assert result.cost_usd == 120 * PRICE_IN / 1e6 + 45 * PRICE_OUT / 1e6
    assert result.prompt_hash == replay_key(
        "mutate", "test-model", "you write kernels\n\nspeed this up"
    )

    (request,) = server.requests
    assert request.api == api
    assert request.body["model"] == "test-model"
    assert request.auth  # a key was presented (Bearer for openai and anthropic 2.x)
    if api == "openai":
        assert request.path == "/v1/chat/completions"
        assert request.body["messages"] == [
            {"role": "system", "content": "you write kernels"},
            {"role": "user", "content": "speed this up"},
        ]
        assert request.body["max_tokens"] == 256  # a base_url: the compatible-server argument
        assert request.body["temperature"] == 0.3
    else:
        assert request.path == "/v1/messages"
        assert request.body["system"] == "you write kernels"
        assert request.body["messages"] == [{"role": "user", "content": "speed this up"}]
        assert request.body["max_tokens"] == 256
        assert "temperature" not in request.body  # API 2026-10-21 rejects sampling parameters

    (row,) = rows
    assert set(row) == set(LLM_CALL_SCHEMA.names) - {"schema_version"}
    assert row["run_id"] == "run-1" and row["operator"] == "mutate"
    assert row["provider"] == api and row["model"] == "test-model"
    assert row["llm_call_id"] == result.llm_call_id
    assert row["prompt_hash"] == result.prompt_hash
    assert row["prompt"] == "you write kernels\n\nspeed this up"
    assert row["reply"] == "def kernel(): pass" and row["error"] is None
    assert (row["input_tokens"], row["output_tokens"], row["attempts"]) == (120, 45, 1)
    assert row["cost_usd"] == result.cost_usd
    assert row["created_at"].tzinfo is not None


@pytest.mark.parametrize("behaviour", [no_code(), malformed_diff()], ids=["no_code", "bad_diff"])
def test_a_reply_without_usable_code_is_still_a_successful_call(
    server: LLMServer, behaviour: Reply
) -> None:
    server.script(behaviour)
    result = client(server, "openai").complete("p", operator="mutate")
    assert result.ok
    assert result.text in (NO_CODE_TEXT, MALFORMED_DIFF_TEXT)
    assert result.text == behaviour.text


# -- retries


@pytest.mark.parametrize("api", APIS)
def test_429_is_retried_after_the_servers_retry_after(server: LLMServer, api: str) -> None:
    server.script(RateLimited(retry_after="7"), Reply("fine"))
    sleeps = Sleeps()
    result = client(server, api, sleep=sleeps).complete("p", operator="mutate")
    assert result.ok and result.text == "fine"
    assert result.attempts == 2
    assert sleeps == [7.0]
    assert len(server.requests) == 2


def test_429_without_retry_after_backs_off_exponentially(server: LLMServer) -> None:
    server.script(RateLimited(retry_after=None), RateLimited(retry_after=None), Reply("x"))
    sleeps = Sleeps()
    c = client(server, "openai", sleep=sleeps, backoff_base=2.0, rng=random.Random(0))
    result = c.complete("p", operator="mutate")
    assert result.ok and result.attempts == 3
    first, second = sleeps
    assert 1.0 <= first <= 2.0 and 2.0 <= second <= 4.0  # base * 2^n, jittered to [50%, 100%]


@pytest.mark.parametrize("api", APIS)
def test_500s_exhaust_the_retries_into_a_failure(server: LLMServer, api: str) -> None:
    server.default = ServerError(500, "the GPU fell over")
    rows: list[dict] = []
    sleeps = Sleeps()
    c = client(server, api, record=rows.append, max_retries=3, sleep=sleeps)
    result = c.complete("p", operator="mutate")
    assert not result.ok and result.text == ""
    assert result.attempts == 4 and len(server.requests) == 4 and len(sleeps) == 3
    assert result.error_kind == "http"
    assert result.error == "HTTP 500: the GPU fell over"
    assert "\n" not in result.error
    (row,) = rows
    assert row["reply"] is None and row["error"] == result.error and row["attempts"] == 4
    assert (row["input_tokens"], row["output_tokens"], row["cost_usd"]) == (0, 0, 0.0)


def test_a_4xx_other_than_429_is_not_retried(server: LLMServer) -> None:
    server.script(ServerError(400, "max_tokens is too large"))
    sleeps = Sleeps()
    result = client(server, "anthropic", sleep=sleeps).complete("p", operator="mutate")
    assert not result.ok and result.attempts == 1 and sleeps == []
    assert result.error == "HTTP 400: max_tokens is too large"


@pytest.mark.parametrize("api", APIS)
def test_a_timeout_is_retried_then_reported(server: LLMServer, api: str) -> None:
    server.default = Hang()  # until the server closes
    c = client(server, api, timeout=0.3, max_retries=1)
    result = c.complete("p", operator="mutate")
    assert not result.ok
    assert result.error_kind == "timeout" and result.error == "timeout after 0.3s"
    assert result.attempts == 2 and len(server.requests) == 2


def test_a_refused_connection_is_a_connection_failure() -> None:
    with LLMServer() as gone:
        url = gone.openai_base_url
    entry = ModelEntry("openai:m", base_url=url)
    result = LLMClient.from_entry(entry, max_retries=1, sleep=Sleeps()).complete("p", operator="x")
    assert not result.ok and result.error_kind == "connection" and result.attempts == 2


# -- money


def test_tokens_and_dollars_in_the_rows_add_up_to_the_scripted_usage(server: LLMServer) -> None:
    usage = [(1000, 200), (37, 4096), (1, 1), (250_000, 3)]
    server.script(*(Reply("r", i, o) for i, o in usage))
    rows: list[dict] = []
    budget = Budget(llm_dollars=100.0)
    c = client(server, "anthropic", record=rows.append, budget=budget)
    results = [c.complete(f"prompt {n}", operator="mutate") for n in range(len(usage))]

    assert all(r.ok for r in results)
    assert [(r["input_tokens"], r["output_tokens"]) for r in rows] == usage
    for row, (i, o) in zip(rows, usage):
        assert row["cost_usd"] == i * PRICE_IN / 1e6 + o * PRICE_OUT / 1e6
    total_in = sum(i for i, _ in usage)
    total_out = sum(o for _, o in usage)
    expected = total_in * PRICE_IN / 1e6 + total_out * PRICE_OUT / 1e6
    assert sum(r["cost_usd"] for r in rows) == pytest.approx(expected, rel=1e-12)
    spent = budget.snapshot()
    assert spent["llm_dollars"] == pytest.approx(expected, rel=1e-12)
    assert spent["llm_tokens"] == total_in + total_out
    assert spent["llm_dollars_reserved"] == pytest.approx(0, abs=1e-12)
    assert spent["llm_tokens_reserved"] == 0


def test_concurrent_calls_never_overshoot_the_dollar_budget(server: LLMServer) -> None:
    prompt = "x" * 300
    rows: list[dict] = []
    lock = threading.Lock()

    def record(row: dict) -> None:
        with lock:
            rows.append(row)

    probe = client(server, "openai", max_tokens=100, max_concurrency=16)
    worst, _ = probe.worst_case(prompt)
    cap = 5 * worst
    budget = Budget(llm_dollars=cap)
    # Each call costs exactly its reservation, so exactly five fit, however threads interleave.
    server.default = Reply("k", input_tokens=len(prompt) // 3, output_tokens=100, delay=0.02)
    c = client(server, "openai", max_tokens=100, max_concurrency=16, budget=budget, record=record)

    results: list[CallResult] = []
    start = threading.Barrier(16)

    def call() -> None:
        start.wait()
        r = c.complete(prompt, operator="mutate")
        with lock:
            results.append(r)

    threads = [threading.Thread(target=call) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    ok = [r for r in results if r.ok]
    refused = [r for r in results if not r.ok]
    assert len(ok) == 5 and len(server.requests) == 5
    assert len(refused) == 11
    assert all(r.error_kind == "budget" and r.attempts == 0 for r in refused)
    assert all(r.error.startswith("budget: llm_dollars") for r in refused)
    assert len(rows) == 16
    spent = budget.snapshot()
    assert spent["llm_dollars"] <= cap + 1e-12
    assert spent["llm_dollars"] == pytest.approx(sum(r.cost_usd for r in ok), rel=1e-12)
    assert spent["llm_dollars_reserved"] == pytest.approx(0, abs=1e-12)


def test_a_spent_budget_makes_no_request(server: LLMServer) -> None:
    budget = Budget(llm_dollars=1e-9)
    result = client(server, "openai", budget=budget).complete("p" * 30, operator="mutate")
    assert not result.ok and result.error_kind == "budget" and result.attempts == 0
    assert server.requests == []


def test_the_concurrency_limit_holds_across_threads_and_clients(server: LLMServer) -> None:
    server.default = Reply("k", delay=0.05)
    # Two clients of the same model and endpoint share one limit of 2.
    clients = [client(server, "openai", model="limited", max_concurrency=2) for _ in range(2)]
    threads = [
        threading.Thread(target=clients[n % 2].complete, args=("p",), kwargs={"operator": "m"})
        for n in range(8)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(server.requests) == 8
    assert server.max_in_flight == 2


# -- credentials


@pytest.mark.parametrize("api", APIS)
def test_credentials_never_reach_rows_logs_or_errors(api: str) -> None:
    with LLMServer(api_key=KEY) as server:
        rows: list[dict] = []
        c = client(server, api, record=rows.append)
        good = c.complete("p", operator="mutate")
        server.api_key = "a-different-key"  # now the server rejects ours, echoing it back
        bad = c.complete("p", operator="mutate")
    assert good.ok
    assert not bad.ok and bad.error.startswith("HTTP 401: Incorrect API key provided")
    assert bad.attempts == 1
    assert KEY not in bad.error and "[redacted]" in bad.error
    assert KEY not in repr(rows)
    assert KEY not in repr(server.requests)
    assert all(r.auth for r in server.requests)  # the key was sent, and not logged


def test_missing_openai_key_without_base_url_names_the_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY")
    with pytest.raises(ProviderConfigError, match="OPENAI_API_KEY"):
        make_provider("openai:gpt-4o")


def test_missing_anthropic_key_without_base_url_names_the_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY")
    with pytest.raises(ProviderConfigError, match="ANTHROPIC_API_KEY"):
        make_provider("anthropic:claude")


@pytest.mark.parametrize("api", APIS)
def test_a_local_server_needs_no_key(
    server: LLMServer, api: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY")
    monkeypatch.delenv("ANTHROPIC_API_KEY")
    server.script(Reply("local"))
    assert client(server, api).complete("p", operator="mutate").text == "local"


def test_base_urls_come_from_the_environment(
    server: LLMServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", server.openai_base_url)
    monkeypatch.setenv("ANTHROPIC_BASE_URL", server.anthropic_base_url + "/v1/")  # /v1 dropped
    server.script(Reply("from openai"), Reply("from anthropic"))
    for spec, text in (("openai:m", "from openai"), ("anthropic:m", "from anthropic")):
        assert make_provider(spec).complete("p").text == text
    assert [r.path for r in server.requests] == ["/v1/chat/completions", "/v1/messages"]


# -- specs


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("offline", "offline"),
        ("mistral:large", "unknown provider"),
        ("gpt-4o", "unknown provider"),
        ("openai:", "names no openai"),
        ("command:  ", "names no command"),
        ("command:'unclosed", "cannot split"),
    ],
)
def test_bad_specs_are_refused_with_a_clear_error(spec: str, message: str) -> None:
    with pytest.raises(ProviderConfigError, match=message):
        make_provider(spec)


def test_choose_draws_clients_by_weight() -> None:
    heavy = LLMClient.from_entry(ModelEntry("command:a", weight=3.0))
    light = LLMClient.from_entry(ModelEntry("command:b", weight=1.0))
    never = LLMClient.from_entry(ModelEntry("command:c", weight=0.0))
    rng = random.Random(1)
    picks = [choose([heavy, light, never], rng) for _ in range(4000)]
    assert never not in picks
    assert 0.7 < picks.count(heavy) / len(picks) < 0.8
    with pytest.raises(ProviderConfigError, match="positive weight"):
        choose([never], rng)


# -- command:


def agent(tmp_path: Path, body: str) -> str:
    """A `command:` spec running a small Python script in place of an agent CLI."""
    script = tmp_path / "agent.py"
    script.write_text("import sys\n" + body)
    return f"command:{sys.executable} {script}"


def test_command_pipes_the_prompt_and_reads_the_reply(tmp_path: Path) -> None:
    spec = agent(tmp_path, "p = sys.stdin.read()\nprint(f'got {len(p)} chars: ' + p.upper())\n")
    rows: list[dict] = []
    c = LLMClient.from_entry(ModelEntry(spec, price_in=1.0, price_out=2.0), record=rows.append)
    result = c.complete("abcd" * 10, operator="initial", system="sys")
    sent = "sys\n\n" + "abcd" * 10
    assert result.ok
    assert result.text == f"got {len(sent)} chars: {sent.upper()}\n"
    assert result.input_tokens == len(sent) // 4
    assert result.output_tokens == len(result.text) // 4
    assert rows[0]["provider"] == "command" and rows[0]["reply"] == result.text


def test_a_failing_command_is_a_failure_with_stderrs_tail(tmp_path: Path) -> None:
    body = "sys.stdin.read()\nsys.stderr.write('x' * 5000 + ' error: quota exhausted')\n"
    spec = agent(tmp_path, body + "sys.exit(3)\n")
    result = LLMClient.from_entry(ModelEntry(spec), sleep=Sleeps()).complete("p", operator="m")
    assert not result.ok and result.error_kind == "command" and result.attempts == 1
    assert "exited 3" in result.error
    assert result.error.endswith("error: quota exhausted")
    assert len(result.error) < 400


def test_a_command_that_runs_too_long_times_out(tmp_path: Path) -> None:
    spec = agent(tmp_path, "import time\ntime.sleep(30)\n")
    c = LLMClient.from_entry(ModelEntry(spec), timeout=0.5, max_retries=0)
    result = c.complete("p", operator="m")
    assert not result.ok and result.error_kind == "timeout"
    assert result.error.startswith("timeout after 0.5s")


def test_a_missing_program_is_a_failure_not_an_exception() -> None:
    c = LLMClient.from_entry(ModelEntry("command:/no/such/agent --yes"))
    result = c.complete("p", operator="m")
    assert not result.ok and result.error_kind == "command"
    assert "/no/such/agent" in result.error


# -- replay:


def write_calls(run_dir: Path, rows: list[dict]) -> None:
    with LineageWriter(str(run_dir), "llm_calls", "w0") as writer:
        writer.append_many(rows)


def recorded(operator: str, model: str, prompt: str, reply: str | None) -> dict:
    return {
        "operator": operator,
        "model": model,
        "prompt": prompt,
        "prompt_hash": replay_key(operator, model, prompt),
        "reply": reply,
        "input_tokens": 11,
        "output_tokens": 7,
        "error": None if reply is not None else "HTTP 500: x",
    }


def test_replay_answers_recorded_prompts_and_misses_others(tmp_path: Path) -> None:
    write_calls(
        tmp_path,
        [
            recorded("mutate", "gpt-x", "make it fast", "FAST"),
            recorded("repair", "gpt-x", "make it fast", "FIXED"),
            recorded("mutate", "gpt-x", "failed once", None),
        ],
    )
    rows: list[dict] = []
    c = LLMClient.from_entry(
        ModelEntry(f"replay:{tmp_path}"), recorded=READ_CALLS, record=rows.append
    )
    assert c.model == "gpt-x"
    hit = c.complete("make it fast", operator="mutate")
    assert hit.ok and hit.text == "FAST" and (hit.input_tokens, hit.output_tokens) == (11, 7)
    assert c.complete("make it fast", operator="repair").text == "FIXED"
    for prompt, operator in (("make it faster", "mutate"), ("failed once", "mutate")):
        miss = c.complete(prompt, operator=operator)
        assert not miss.ok and miss.error == NO_REPLY == "no recorded reply"
        assert miss.error_kind == "replay" and miss.attempts == 1
    assert rows[0]["provider"] == "replay" and rows[0]["model"] == "gpt-x"


def test_a_recorded_run_replays_through_the_client(server: LLMServer, tmp_path: Path) -> None:
    server.script(Reply("first"), Reply("second"))
    with LineageWriter(str(tmp_path), "llm_calls", "w0") as writer:
        live = client(server, "anthropic", model="claude-x", record=writer.append)
        live.complete("a", operator="mutate", system="sys")
        live.complete("b", operator="crossover")
    assert read_table(str(tmp_path), "llm_calls").num_rows == 2

    replayed = LLMClient.from_entry(ModelEntry(f"replay:{tmp_path}"), recorded=READ_CALLS)
    assert replayed.complete("a", operator="mutate", system="sys").text == "first"
    assert replayed.complete("b", operator="crossover").text == "second"
    assert replayed.complete("a", operator="mutate").error == NO_REPLY  # system differs


def test_replay_of_several_models_must_name_one(tmp_path: Path) -> None:
    write_calls(tmp_path, [recorded("m", "a", "p", "A"), recorded("m", "b", "p", "B")])
    with pytest.raises(ProviderConfigError, match="several models"):
        make_provider(f"replay:{tmp_path}", recorded=READ_CALLS)
    assert (
        make_provider(f"replay:{tmp_path}", model="b", recorded=READ_CALLS)
        .complete("p", operator="m")
        .text
        == "B"
    )


def test_replay_of_a_directory_without_llm_calls_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ProviderConfigError, match="no llm_calls"):
        make_provider(f"replay:{tmp_path}", recorded=READ_CALLS)


def test_replay_of_a_prompt_asked_twice_gives_both_replies_in_order(tmp_path: Path) -> None:
    write_calls(
        tmp_path,
        [recorded("m", "gpt-x", "p", "first"), recorded("m", "gpt-x", "p", "second")],
    )
    p = make_provider(f"replay:{tmp_path}", recorded=READ_CALLS)
    assert [p.complete("p", operator="m").text for _ in range(3)] == ["first", "second", "second"]
