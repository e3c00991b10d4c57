"""Child processes for evaluations: forked from a warm server, walled in, watched, killed.

The fork server imports torch and triton once (never CUDA) and is started with a scrubbed
environment, so a child starts in milliseconds and inherits no secrets, not even through
/proc of its parent. Each child puts up its OS walls first (fitness.containment). Messages
from a child are bounded JSON and sealed memfds (fitness.channel); the judge never unpickles
anything a child sends, and it reads the walls a child is in from /proc, not from the child.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import signal
import sys
import threading
import types

import psutil
import torch

from fitness import channel
from fitness.channel import ChannelError, Message
from fitness.isolation import ENV_KEEP
from fitness.sandbox import Job, child_main

_PRELOAD = [
    "torch", "triton", "fitness.preload", "fitness.sandbox", "fitness.workloads",
    "fitness.channel", "fitness.containment",
]  # fmt: skip
_lock = threading.Lock()
_ctx = None
_mode = None
__all__ = ["Child", "ChildFailed", "Message", "context"]


def context(device: str):
    """The forkserver context, started once per process with a scrubbed environment.

    Triton decides at import whether it interprets on the CPU, and the server imports it once,
    so one process evaluates on one kind of device.
    """
    global _ctx, _mode
    with _lock:
        if _ctx is not None and _mode != device:
            from fitness.errors import EvoError

            raise EvoError(
                f"this process already evaluates on {_mode}; "
                f"evaluate on {device} in another process"
            )
        if _ctx is None:
            from multiprocessing import forkserver

            ctx = mp.get_context("forkserver")
            ctx.set_forkserver_preload(_PRELOAD)
            saved = dict(os.environ)
            try:
                for k in list(os.environ):
                    if k not in ENV_KEEP:
                        del os.environ[k]
                if device == "cpu":
                    os.environ["TRITON_INTERPRET"] = "1"
                else:
                    os.environ.pop("TRITON_INTERPRET", None)
                with _blank_main():
                    forkserver.ensure_running()
            finally:
                os.environ.clear()
                os.environ.update(saved)
            _ctx, _mode = ctx, device
        return _ctx


@contextlib.contextmanager
def _blank_main():
    """Hide the caller's __main__: neither the server nor a child may re-import its script."""
    main = sys.modules["__main__"]
    sys.modules["__main__"] = types.ModuleType("__main__")
    try:
        yield
    finally:
        sys.modules["__main__"] = main


class ChildFailed(Exception):
    """The child stopped answering or broke the protocol: `kind` is timeout, died, memory or
    malformed; `reason` is one line."""

    def __init__(self, kind: str, reason: str):
        super().__init__(reason)
        self.kind = kind
        self.reason = reason


class Child:
    """One forked job and the judge's end of its channel."""

    def __init__(self, job: Job, memory_limit_bytes: int):
        ctx = context(job.device)
        self.sock, child_sock = channel.pair()
        self.proc = ctx.Process(target=child_main, args=(child_sock, job), daemon=True)
        with _blank_main():
            self.proc.start()
        child_sock.close()
        self.memory_limit = memory_limit_bytes
        try:
            self._ps = psutil.Process(self.proc.pid)
        except psutil.Error:
            self._ps = None

    def send(self, op: str, **kw) -> None:
        try:
            channel.send(self.sock, op, **kw)
        except OSError:
            raise ChildFailed("died", self._death_reason(op)) from None

    def recv(self, phase: str, timeout: float) -> Message:
        """The next message, or ChildFailed on timeout, death, a broken protocol or the
        memory limit."""
        try:
            return channel.recv(self.sock, timeout, lambda: self._watch(phase))
        except ChannelError as e:
            if e.kind == "timeout":
                reason = f"no answer within {timeout:g} s in phase {phase}"
                raise ChildFailed("timeout", reason) from None
            if e.kind == "closed":
                raise ChildFailed("died", self._death_reason(phase)) from None
            raise ChildFailed("malformed", f"{e.reason} in phase {phase}") from None

    def tensors(self, msg: Message, expected: list | None = None) -> list[torch.Tensor]:
        """The outputs a message carries, as read-only views of their sealed memfds.

        `expected` holds the (dtype, shape) the judge expects for each (from the reference);
        without it (the reference's own outputs), the message's metas are used, within the
        memory limit. The caller has compared the child's metas with `expected` already."""
        if expected is None:
            expected = [channel.meta_of(m) for m in msg.metas]
            total = 0
            for dtype, shape in expected:
                if dtype is None or shape is None:
                    raise ChildFailed("malformed", "an output with a malformed dtype or shape")
                total += torch.Size(shape).numel() * torch.empty((), dtype=dtype).element_size()
            if total > self.memory_limit:
                raise ChildFailed("memory", "the outputs are larger than the memory limit")
        if len(msg.fds) != len(expected):
            msg.close()
            raise ChildFailed(
                "malformed", f"{len(msg.fds)} output descriptors for {len(expected)} outputs"
            )
        try:
            return [channel.view(fd, d, list(s)) for fd, (d, s) in zip(msg.fds, expected)]
        except ChannelError as e:
            raise ChildFailed("malformed", e.reason) from None
        finally:
            msg.close()

    def processes(self) -> list[psutil.Process]:
        """The child's processes as the judge sees them: the one it forked, then every
        descendant (the PID namespace's first process, the job, what the job started)."""
        if self._ps is None:
            return []
        try:
            return [self._ps, *self._ps.children(recursive=True)]
        except psutil.Error:
            return [self._ps]

    @contextlib.contextmanager
    def frozen(self):
        """Every process of the child stopped (SIGSTOP) while the judge reads its outputs."""
        pids = [p.pid for p in self.processes()]
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGSTOP)
        try:
            yield
        finally:
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGCONT)

    def isolation(self) -> list[str]:
        """The walls the job's process is in, read by the judge from /proc. Asked before any
        candidate code runs, when the child is one chain: the forked process, the PID
        namespace's first process that waits, and the job at its end."""
        from fitness.walls import observed_layers

        job = self._ps
        try:
            while job is not None and job.children():
                job = job.children()[0]
        except psutil.Error:
            return []
        return observed_layers(job.pid if job is not None else 0)

    def _watch(self, phase: str) -> None:
        rss = self._rss()
        if rss > self.memory_limit:
            raise ChildFailed(
                "memory",
                f"host memory {rss / 2**30:.1f} GiB exceeded the limit "
                f"{self.memory_limit / 2**30:.1f} GiB in phase {phase}",
            )

    def _rss(self) -> int:
        total = 0
        for p in self.processes():
            with contextlib.suppress(psutil.Error):
                total += p.memory_info().rss
        return total

    def _death_reason(self, phase: str) -> str:
        self.proc.join(timeout=2)
        code = self.proc.exitcode
        if code is None:
            return f"the process closed its channel during {phase}"
        if code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = f"signal {-code}"
            return f"the process crashed with {name} during {phase}"
        return f"the process exited with code {code} during {phase} before reporting"

    def kill(self) -> None:
        """Kill the child's process group; its PID namespace (where it has one) goes with its
        first process, taking every process the candidate started."""
        pid = self.proc.pid
        if self.proc.is_alive():
            try:
                os.killpg(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                self.proc.kill()
        self.proc.join(timeout=5)
        self.sock.close()
