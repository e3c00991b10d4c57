"""`replay:RUN_DIR`: answers from a recorded run's `llm_calls/` table, so a run can be
re-executed (or debugged) without calling a model. A prompt not in the recording fails."""

from __future__ import annotations

import threading

from .base import (
    Completion,
    Provider,
    ProviderConfigError,
    ProviderError,
    RecordedCalls,
    full_prompt,
    register,
    replay_key,
)

NO_REPLY = "no recorded reply"


class ReplayProvider(Provider):
    """Looks replies up by `replay_key(operator, model, full_prompt(prompt, system))` with the
    recorded model, the key `LLMClient` records as `prompt_hash`.

    `model` names which recorded model to answer for; left out, the recording must hold
    exactly one. Failed calls in the recording are not replayed; a key recorded more than
    once gives its replies in recorded order, then the last again. Usage is the recorded
    usage.
    """

    name = "replay"

    def __init__(
        self, run_dir: str, model: str | None = None, recorded: RecordedCalls | None = None
    ) -> None:
        if recorded is None:
            raise ProviderConfigError(
                f"replay:{run_dir}: no reader of recorded calls was given (the engine passes "
                "its lineage reader)"
            )
        columns = ["operator", "model", "prompt", "reply", "input_tokens", "output_tokens"]
        try:
            rows = recorded(run_dir, columns)
        except FileNotFoundError:
            raise ProviderConfigError(
                f"replay:{run_dir}: no llm_calls/ table in that run"
            ) from None
        except OSError as e:
            raise ProviderConfigError(f"replay:{run_dir}: cannot read llm_calls: {e}") from e
        rows = [r for r in rows if r["reply"] is not None]
        models = sorted({r["model"] or "" for r in rows})
        if model is None:
            if len(models) > 1:
                raise ProviderConfigError(
                    f"replay:{run_dir} recorded several models ({', '.join(models)}): "
                    "name the one to replay"
                )
            model = models[0] if models else ""
        self.model = model
        self.endpoint = run_dir
        # Every recorded reply per key, in recorded order: the n-th call with a prompt gets the
        # n-th reply (then the last again), so a prompt asked twice replays both answers.
        self._replies: dict[str, list[Completion]] = {}
        self._served: dict[str, int] = {}
        self._lock = threading.Lock()
        for r in rows:
            if (r["model"] or "") == model:
                key = replay_key(r["operator"] or "", model, r["prompt"] or "")
                usage = (r["input_tokens"] or 0, r["output_tokens"] or 0)
                self._replies.setdefault(key, []).append(Completion(r["reply"], *usage))

    def __len__(self) -> int:
        return len(self._replies)

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
        key = replay_key(operator, self.model, full_prompt(prompt, system))
        found = self._replies.get(key)
        if not found:
            raise ProviderError(NO_REPLY, kind="replay")
        with self._lock:
            n = self._served.get(key, 0)
            self._served[key] = n + 1
        return found[min(n, len(found) - 1)]


@register("replay")
def _build(rest: str, base_url: str | None, model: str | None, recorded=None) -> Provider:
    return ReplayProvider(rest, model, recorded)
