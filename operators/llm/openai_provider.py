"""`openai:MODEL`: chat completions through the official SDK, against OpenAI or any
OpenAI-compatible server (vLLM, SGLang, Ollama) named by `base_url` or `OPENAI_BASE_URL`."""

from __future__ import annotations

import os
from typing import Any

from .base import (
    Completion,
    Provider,
    ProviderConfigError,
    ProviderError,
    estimate_tokens,
    register,
    sdk_errors,
)

# Sent as the key to local servers that need none; the SDK refuses to build without one.
_NO_KEY = "no-key"


class OpenAIProvider(Provider):
    """The SDK's own retries are off (`max_retries=0`): `LLMClient` owns retrying."""

    name = "openai"

    def __init__(self, model: str, base_url: str | None = None) -> None:
        import openai

        base_url = base_url or os.environ.get("OPENAI_BASE_URL") or None
        key = os.environ.get("OPENAI_API_KEY") or ""
        if not key and not base_url:
            raise ProviderConfigError(
                f"openai:{model} needs OPENAI_API_KEY in the environment "
                "(or a base_url / OPENAI_BASE_URL for a local server that needs no key)"
            )
        self.model = model
        self.endpoint = base_url or "https://api.openai.com/v1"
        self._key = key
        self._client = openai.OpenAI(api_key=key or _NO_KEY, base_url=base_url, max_retries=0)
        # OpenAI's own API wants max_completion_tokens (reasoning models reject max_tokens);
        # compatible servers are more reliably served by the older max_tokens.
        self._tokens_arg = "max_tokens" if base_url else "max_completion_tokens"

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
        import openai

        messages: list[dict[str, Any]] = []
        if system is not None:
            messages.append({"role": "system", "content": system})
        messages.append({"role": "user", "content": prompt})
        with sdk_errors(openai, timeout):
            resp = self._client.chat.completions.create(
                model=self.model,
                messages=messages,  # type: ignore[arg-type]
                temperature=temperature,
                timeout=timeout,
                **{self._tokens_arg: max_tokens},
            )
        if not resp.choices:
            raise ProviderError("reply has no choices", kind="http")
        text = resp.choices[0].message.content or ""
        usage = resp.usage
        if usage is None:  # some compatible servers omit usage: estimate rather than charge 0
            return Completion(text, estimate_tokens(prompt + (system or "")), estimate_tokens(text))
        return Completion(text, usage.prompt_tokens, usage.completion_tokens)

    def secrets(self) -> tuple[str, ...]:
        return (self._key,) if self._key else ()


@register("openai")
def _build(rest: str, base_url: str | None, model: str | None, recorded=None) -> Provider:
    return OpenAIProvider(rest, base_url)
