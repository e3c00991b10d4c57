"""LLM providers and the client operators call through.

`make_provider(spec)` builds a provider from an `--llm` spec (openai:MODEL, anthropic:MODEL,
command:CMD, replay:RUN_DIR); `LLMClient` adds concurrency limits, budget reservation,
retries and `llm_calls` rows. Each provider is one module that registers its prefix.
"""

from . import anthropic_provider, command, openai_provider, replay  # noqa: F401  (register)
from .base import (
    Completion,
    Provider,
    ProviderConfigError,
    ProviderError,
    full_prompt,
    make_provider,
    register,
    replay_key,
)
from .client import CallResult, LLMClient, ModelEntry, choose, concurrency_slot
from .replay import NO_REPLY

__all__ = [
    "NO_REPLY",
    "CallResult",
    "Completion",
    "LLMClient",
    "ModelEntry",
    "Provider",
    "ProviderConfigError",
    "ProviderError",
    "choose",
    "concurrency_slot",
    "full_prompt",
    "make_provider",
    "register",
    "replay_key",
]
