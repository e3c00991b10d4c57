"""The provider interface every LLM backend implements, and the registry that builds one.

A provider turns one prompt into one `Completion` or raises `ProviderError`; it does no
retries, budgeting or recording (that is `LLMClient`'s job), so a new provider is one small
file that maps its transport's failures onto `ProviderError`.
"""

from __future__ import annotations

import email.utils
import hashlib
import json
import os
import re
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass

from fitness.errors import EvoError

SPEC_FORMS = "openai:MODEL, anthropic:MODEL, command:CMD or replay:RUN_DIR"


class ProviderConfigError(EvoError):
    """A provider cannot be built: bad spec, missing API key, unreadable replay run."""


@dataclass(frozen=True)
class Completion:
    """One reply and the usage the provider reported (or estimated, where it reports none)."""

    text: str
    input_tokens: int
    output_tokens: int


class ProviderError(Exception):
    """One attempt failed. `kind` is http, timeout, connection, command or replay;
    `retryable` says whether trying again may help; `retry_after` is the server's wait hint."""

    def __init__(
        self,
        reason: str,
        *,
        kind: str,
        retryable: bool = False,
        status: int | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(reason)
        self.reason = reason
        self.kind = kind
        self.retryable = retryable
        self.status = status
        self.retry_after = retry_after


class Provider(ABC):
    """One model behind one transport. `name` is the spec prefix, `model` what rows record."""

    name: str = ""
    model: str = ""
    endpoint: str = ""  # where requests go (a URL, a command); shares a concurrency limit

    @abstractmethod
    def complete(
        self,
        prompt: str,
        *,
        system: str | None = None,
        temperature: float = 0.7,
        max_tokens: int = 4096,
        timeout: float = 300.0,
        operator: str = "",
    ) -> Completion:
        """The model's reply to `prompt`; `operator` matters only to providers that key on it
        (replay). Raises ProviderError for a failed attempt."""

    def secrets(self) -> tuple[str, ...]:
        """Credentials this provider holds, so error text can be scrubbed of them."""
        return ()


# Reads a recorded run's `llm_calls` rows: (run_dir, columns) -> rows as dicts.
RecordedCalls = Callable[[str, list[str]], list[dict]]
ProviderFactory = Callable[[str, str | None, str | None, RecordedCalls | None], Provider]
_REGISTRY: dict[str, ProviderFactory] = {}


def register(prefix: str) -> Callable[[ProviderFactory], ProviderFactory]:
    """Make `prefix:REST` specs build providers with
    `factory(rest, base_url, model, recorded)`."""

    def add(factory: ProviderFactory) -> ProviderFactory:
        _REGISTRY[prefix] = factory
        return factory

    return add


def make_provider(
    spec: str,
    base_url: str | None = None,
    *,
    model: str | None = None,
    recorded: RecordedCalls | None = None,
) -> Provider:
    """The provider a spec names. `base_url` overrides the SDK endpoint (openai, anthropic);
    `model` picks the recorded model a `replay:` spec answers for (default: the only one);
    `recorded(run_dir, columns)` reads a run's `llm_calls` rows for `replay:` (the engine
    passes its lineage reader: operators do not import the engine)."""
    if spec.strip() == "offline":
        raise ProviderConfigError(
            "llm spec 'offline' names no LLM provider: offline runs use the parameter "
            "operator, not an LLM client"
        )
    prefix, sep, rest = spec.partition(":")
    if not sep or prefix not in _REGISTRY:
        raise ProviderConfigError(f"llm spec {spec!r}: unknown provider (use {SPEC_FORMS})")
    if not rest.strip():
        raise ProviderConfigError(f"llm spec {spec!r} names no {prefix} target (use {SPEC_FORMS})")
    return _REGISTRY[prefix](rest.strip(), base_url, model, recorded)


def replay_key(operator: str, model: str, prompt: str) -> str:
    """The hash replay looks a reply up by; JSON keeps the three fields unambiguous."""
    data = json.dumps([operator, model, prompt], ensure_ascii=False)
    return hashlib.sha256(data.encode("utf-8")).hexdigest()


def full_prompt(prompt: str, system: str | None) -> str:
    """The text a call sends, as `llm_calls.prompt` records it and replay keys it: the system
    prompt (if any), a blank line, then the prompt."""
    return prompt if system is None else f"{system}\n\n{prompt}"


def estimate_tokens(text: str) -> int:
    """A rough token count for providers that report no usage (about 4 characters a token)."""
    return len(text) // 4


# -- error text: one line, no credentials

_SECRET_NAME = re.compile(r"(API_?KEY|TOKEN|SECRET|PASSWORD)", re.IGNORECASE)


def redact(text: str, extra: tuple[str, ...] = ()) -> str:
    """`text` with any credential (given, or in a *_API_KEY/*TOKEN/*SECRET env var) masked."""
    secrets = [v for k, v in os.environ.items() if _SECRET_NAME.search(k) and len(v) >= 8]
    for secret in sorted({*secrets, *(s for s in extra if len(s) >= 4)}, key=len, reverse=True):
        text = text.replace(secret, "[redacted]")
    return text


def one_line(text: str, limit: int = 300) -> str:
    """Whitespace collapsed and cut to `limit` characters, for a reason field."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def error_message(body: object) -> str:
    """The human message in an API error body ({"message"} or {"error": {"message"}})."""
    if isinstance(body, Mapping):
        inner = body.get("error")
        if isinstance(inner, Mapping) and inner.get("message"):
            return str(inner["message"])
        if body.get("message"):
            return str(body["message"])
    return "" if body is None else str(body)


def retry_after(headers: Mapping[str, str]) -> float | None:
    """Seconds the server asks us to wait: `retry-after-ms`, or `Retry-After` as seconds or an
    HTTP date; None if absent or unreadable."""
    ms = headers.get("retry-after-ms")
    if ms:
        try:
            return max(0.0, float(ms) / 1000)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def http_failure(status: int, headers: Mapping[str, str], body: object) -> ProviderError:
    """A status-code failure: 429 and 5xx are retryable, other 4xx are not."""
    message = one_line(error_message(body)) or "no message"
    return ProviderError(
        f"HTTP {status}: {message}",
        kind="http",
        retryable=status == 429 or status >= 500,
        status=status,
        retry_after=retry_after(headers),
    )


@contextmanager
def sdk_errors(sdk, timeout: float) -> Iterator[None]:
    """A call through an official SDK (`openai` or `anthropic`: their errors share names and
    shapes), its failures as ProviderErrors: timeouts and lost connections are retryable, and
    HTTP statuses go through `http_failure`."""
    try:
        yield
    except sdk.APITimeoutError as e:  # a subclass of APIConnectionError: first
        raise ProviderError(f"timeout after {timeout:g}s", kind="timeout", retryable=True) from e
    except sdk.APIConnectionError as e:
        reason = f"connection error: {one_line(str(e.__cause__ or e))}"
        raise ProviderError(reason, kind="connection", retryable=True) from e
    except sdk.APIStatusError as e:
        raise http_failure(e.status_code, e.response.headers, e.body) from e
