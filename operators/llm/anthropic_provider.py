"""`anthropic:MODEL`: the Messages API through the official SDK (`ANTHROPIC_API_KEY`, and
`base_url` or `ANTHROPIC_BASE_URL` for a proxy or compatible server)."""

from __future__ import annotations

import os
from typing import Any

from .base import (
    Completion,
    Provider,
    ProviderConfigError,
    register,
    sdk_errors,
)

_NO_KEY = "no-key"


class AnthropicProvider(Provider):
    """The SDK's own retries are off (`max_retries=0`): `LLMClient` owns retrying.

    The SDK appends `/v1/messages` to its base URL, so a base URL written with a trailing
    `/v1` (as OpenAI-style endpoints are) is accepted and the `/v1` dropped. `temperature` is
    not sent: API version 2026-10-21 (SDK 2.x) removed sampling parameters, and the API
    answers 400 to a request that carries one.
    """

    name = "anthropic"

    def __init__(self, model: str, base_url: str | None = None) -> None:
        import anthropic

        base_url = base_url or os.environ.get("ANTHROPIC_BASE_URL") or None
        if base_url:
            base_url = base_url.rstrip("/").removesuffix("/v1")
        key = os.environ.get("ANTHROPIC_API_KEY") or ""
        if not key and not base_url:
            raise ProviderConfigError(
                f"anthropic:{model} needs ANTHROPIC_API_KEY in the environment "
                "(or a base_url / ANTHROPIC_BASE_URL for a server that needs no key)"
            )
        self.model = model
        self.endpoint = base_url or "https://api.anthropic.com"
        self._key = key
        # An explicit key also stops the SDK from looking for profiles or federation files.
        self._client = anthropic.Anthropic(api_key=key or _NO_KEY, base_url=base_url, max_retries=0)

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
        import anthropic

        extra: dict[str, Any] = {} if system is None else {"system": system}
        with sdk_errors(anthropic, timeout):
            resp = self._client.messages.create(
                model=self.model,
                messages=[{"role": "user", "content": prompt}],
                max_tokens=max_tokens,
                timeout=timeout,
                **extra,
            )
        text = "".join(block.text for block in resp.content if block.type == "text")
        return Completion(text, resp.usage.input_tokens, resp.usage.output_tokens)

    def secrets(self) -> tuple[str, ...]:
        return (self._key,) if self._key else ()


@register("anthropic")
def _build(rest: str, base_url: str | None, model: str | None, recorded=None) -> Provider:
    return AnthropicProvider(rest, base_url)
