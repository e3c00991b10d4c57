"""`LLMClient`: what operators call. One provider plus its registry entry, with the policy
every provider shares: a per-model concurrency limit, cost reserved before the call, retries
with backoff, and exactly one `llm_calls` row per call. A failed call is a result, not an
exception, so the engine can turn it into a `generation_failure`.
"""

from __future__ import annotations

import random
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from .base import (
    Completion,
    Provider,
    ProviderConfigError,
    ProviderError,
    RecordedCalls,
    full_prompt,
    make_provider,
    one_line,
    redact,
    replay_key,
)

Record = Callable[[dict[str, Any]], None]


class CostBudget(Protocol):
    """What the client needs of the engine's budget (evo.budget.Budget): a reservation of a
    call's worst case, settled or cancelled after. A refusal raises an exception with a `kind`
    (evo.budget.BudgetExceeded); operators do not import the engine."""

    def reserve_llm(self, dollars: float, tokens: int) -> Any: ...


@dataclass(frozen=True)
class ModelEntry:
    """One model of the registry: how to reach it, what it costs (USD per million input and
    output tokens), how to sample it, and its share of proposals (`weight`, see `choose`)."""

    spec: str
    price_in: float = 0.0
    price_out: float = 0.0
    temperature: float = 0.7
    max_tokens: int = 4096
    weight: float = 1.0
    max_concurrency: int = 4
    base_url: str | None = None

    def __post_init__(self) -> None:
        for name in ("price_in", "price_out", "weight"):
            if getattr(self, name) < 0:
                raise ProviderConfigError(f"model {self.spec}: {name} must be >= 0")
        for name in ("max_tokens", "max_concurrency"):
            if getattr(self, name) < 1:
                raise ProviderConfigError(f"model {self.spec}: {name} must be >= 1")


@dataclass(frozen=True)
class CallResult:
    """The outcome of one call. On failure `ok` is False, `text` is empty, `error` is one line
    and `error_kind` says which: budget, http, timeout, connection, command, replay, internal."""

    ok: bool
    text: str
    input_tokens: int
    output_tokens: int
    cost_usd: float
    attempts: int
    latency_s: float
    error: str | None
    llm_call_id: str
    prompt_hash: str
    error_kind: str | None = None


# Concurrency limits are per model and endpoint, shared by every client in the process.
_SLOTS: dict[tuple[str, str, str], threading.BoundedSemaphore] = {}
_SLOTS_LOCK = threading.Lock()


def concurrency_slot(provider: Provider, limit: int) -> threading.BoundedSemaphore:
    """The process-wide semaphore of `provider`'s model; the first limit asked for holds."""
    key = (provider.name, provider.endpoint, provider.model)
    with _SLOTS_LOCK:
        if key not in _SLOTS:
            _SLOTS[key] = threading.BoundedSemaphore(limit)
        return _SLOTS[key]


class LLMClient:
    """Calls one model for operators. Safe to share between threads.

    `budget` (optional) has each call's worst case reserved first: the prompt at
    len(prompt) // 3 tokens plus `max_tokens` of output, at the entry's prices; the real usage
    is settled after. `record(row)` receives one `llm_calls` row per call. Retries cover 429,
    5xx, connection errors and timeouts (up to `max_retries` more attempts), waiting
    `Retry-After` when the server sends it and exponential backoff with jitter otherwise;
    `sleep` is injectable so tests need not wait.
    """

    def __init__(
        self,
        provider: Provider,
        entry: ModelEntry,
        *,
        budget: CostBudget | None = None,
        record: Record | None = None,
        run_id: str = "",
        max_retries: int = 4,
        timeout: float = 300.0,
        backoff_base: float = 1.0,
        backoff_max: float = 60.0,
        sleep: Callable[[float], None] = time.sleep,
        rng: random.Random | None = None,
    ) -> None:
        if max_retries < 0:
            raise ValueError(f"max_retries must be >= 0, got {max_retries}")
        self.provider = provider
        self.entry = entry
        self.budget = budget
        self.record = record
        self.run_id = run_id
        self.max_retries = max_retries
        self.timeout = timeout
        self.backoff_base = backoff_base
        self.backoff_max = backoff_max
        self._sleep = sleep
        self._rng = rng or random.Random()
        self._slot = concurrency_slot(provider, entry.max_concurrency)

    @classmethod
    def from_entry(
        cls, entry: ModelEntry, recorded: RecordedCalls | None = None, **kwargs: Any
    ) -> LLMClient:
        """A client for `entry.spec` (see `make_provider`, and `recorded` there for replay);
        kwargs as for the constructor."""
        return cls(make_provider(entry.spec, entry.base_url, recorded=recorded), entry, **kwargs)

    @property
    def model(self) -> str:
        return self.provider.model

    def cost(self, input_tokens: int, output_tokens: int) -> float:
        """Dollars for this usage at the entry's prices."""
        return input_tokens * self.entry.price_in / 1e6 + output_tokens * self.entry.price_out / 1e6

    def worst_case(self, prompt: str, system: str | None = None) -> tuple[float, int]:
        """(dollars, tokens) reserved before calling with this prompt."""
        tokens_in = len(full_prompt(prompt, system)) // 3
        return self.cost(tokens_in, self.entry.max_tokens), tokens_in + self.entry.max_tokens

    def complete(self, prompt: str, *, operator: str, system: str | None = None) -> CallResult:
        """Ask the model; never raises for an LLM failure (see `CallResult.ok`)."""
        start = time.monotonic()
        call_id = uuid.uuid4().hex
        text_sent = full_prompt(prompt, system)
        key = replay_key(operator, self.provider.model, text_sent)

        def finish(
            completion: Completion | None, attempts: int, error: str | None, kind: str | None
        ) -> CallResult:
            tokens = (completion.input_tokens, completion.output_tokens) if completion else (0, 0)
            result = CallResult(
                ok=completion is not None,
                text=completion.text if completion else "",
                input_tokens=tokens[0],
                output_tokens=tokens[1],
                cost_usd=self.cost(*tokens),
                attempts=attempts,
                latency_s=time.monotonic() - start,
                error=None if error is None else one_line(redact(error, self.provider.secrets())),
                llm_call_id=call_id,
                prompt_hash=key,
                error_kind=kind,
            )
            if self.record is not None:
                self.record(self._row(result, operator, text_sent))
            return result

        reservation = None
        if self.budget is not None:
            try:
                reservation = self.budget.reserve_llm(*self.worst_case(prompt, system))
            except Exception as e:  # noqa: BLE001 - a refusal is any error with a budget `kind`
                if getattr(e, "kind", None) is None:
                    raise
                return finish(None, 0, f"budget: {e}", "budget")
        completion: Completion | None = None
        error: ProviderError | None = None
        attempts = 0
        try:
            while True:
                attempts += 1
                try:
                    with self._slot:
                        completion = self.provider.complete(
                            prompt,
                            system=system,
                            temperature=self.entry.temperature,
                            max_tokens=self.entry.max_tokens,
                            timeout=self.timeout,
                            operator=operator,
                        )
                    break
                except ProviderError as e:
                    error = e
                if not error.retryable or attempts > self.max_retries:
                    break
                self._sleep(self._delay(attempts, error.retry_after))
        except Exception as e:  # a provider bug must not take the island down with it
            error = ProviderError(f"{type(e).__name__}: {e}", kind="internal")
        finally:
            if reservation is not None:
                if completion is not None:
                    reservation.settle(
                        self.cost(completion.input_tokens, completion.output_tokens),
                        completion.input_tokens + completion.output_tokens,
                    )
                else:
                    reservation.cancel()
        if completion is not None:
            return finish(completion, attempts, None, None)
        assert error is not None
        return finish(None, attempts, error.reason, error.kind)

    def _delay(self, attempt: int, retry_after: float | None) -> float:
        """Seconds to wait before attempt `attempt + 1`."""
        if retry_after is not None:
            return min(retry_after, self.backoff_max)
        backoff = min(self.backoff_max, self.backoff_base * 2 ** (attempt - 1))
        return backoff * self._rng.uniform(0.5, 1.0)

    def _row(self, result: CallResult, operator: str, prompt: str) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "llm_call_id": result.llm_call_id,
            "operator": operator,
            "provider": self.provider.name,
            "model": self.provider.model,
            "prompt_hash": result.prompt_hash,
            "prompt": prompt,
            "reply": result.text if result.ok else None,
            "input_tokens": result.input_tokens,
            "output_tokens": result.output_tokens,
            "cost_usd": result.cost_usd,
            "latency_s": result.latency_s,
            "attempts": result.attempts,
            "error": result.error,
            "created_at": datetime.now(UTC),
        }


def choose(clients: Sequence[LLMClient], rng: random.Random) -> LLMClient:
    """One client, drawn with probability proportional to its entry's `weight`."""
    weights = [c.entry.weight for c in clients]
    if not clients or sum(weights) <= 0:
        raise ProviderConfigError("no model with a positive weight to choose from")
    return rng.choices(list(clients), weights=weights)[0]
