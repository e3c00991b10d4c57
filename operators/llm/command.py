"""`command:CMD`: an executable (an agent CLI, a local model wrapper) that reads the prompt on
stdin and writes its reply on stdout. CMD is split like a shell would (shlex), never run by
one."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess

from .base import (
    Completion,
    Provider,
    ProviderConfigError,
    ProviderError,
    estimate_tokens,
    one_line,
    register,
)


class CommandProvider(Provider):
    """Runs CMD once per prompt. A non-zero exit (not retried) or a timeout (retried, as for
    the HTTP providers) fails the attempt with the tail of stderr in the reason.

    A command reports no usage, so tokens are estimated as len(text) // 4 for the prompt and
    the reply; price a command model at zero unless that estimate is good enough to bill by.
    """

    name = "command"

    def __init__(self, command: str) -> None:
        try:
            self.argv = shlex.split(command)
        except ValueError as e:
            raise ProviderConfigError(f"command:{command}: cannot split the command: {e}") from e
        if not self.argv:
            raise ProviderConfigError("command: names no program")
        self.model = command
        self.endpoint = command

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
        text_in = prompt if system is None else f"{system}\n\n{prompt}"
        try:
            # A session of its own, so a timeout kills the command's children too.
            proc = subprocess.Popen(
                self.argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                start_new_session=True,
            )
        except OSError as e:
            raise ProviderError(f"cannot run {self.argv[0]}: {e.strerror}", kind="command") from e
        try:
            out, err = proc.communicate(text_in, timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            _, err = proc.communicate()
            reason = f"timeout after {timeout:g}s{_tail(err)}"
            raise ProviderError(reason, kind="timeout", retryable=True) from None
        if proc.returncode != 0:
            raise ProviderError(
                f"{self.argv[0]} exited {proc.returncode}{_tail(err)}", kind="command"
            )
        return Completion(out, estimate_tokens(text_in), estimate_tokens(out))


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()


def _tail(stderr: str | None, limit: int = 200) -> str:
    """': <last line(s) of stderr>', or nothing if it was empty."""
    text = one_line(stderr or "", limit=10_000)
    if not text:
        return ""
    return ": " + (text if len(text) <= limit else "..." + text[-limit:])


@register("command")
def _build(rest: str, base_url: str | None, model: str | None, recorded=None) -> Provider:
    return CommandProvider(rest)
