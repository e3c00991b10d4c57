"""Child processes for evaluations: forked from a warm server, watched, and killed by the judge.

The fork server imports torch and triton once (never CUDA) and is started with a scrubbed
environment, so a child starts in milliseconds and inherits no secrets, not even through
/proc of its parent. Messages from a child are JSON headers and raw byte frames; the judge
never unpickles anything a child sends.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import multiprocessing as mp
import os
import re
import shutil
import signal
import sys
import tempfile
import threading
import time
import types
from dataclasses import dataclass

import psutil
import torch

from fitness.isolation import ENV_KEEP
from fitness.sandbox import Job, child_main

_PRELOAD = ["torch", "triton", "fitness.preload", "fitness.sandbox", "fitness.workloads"]
_lock = threading.Lock()
_ctx = None
_mode = None
MAX_FRAME = 1 << 34  # a single tensor frame may not exceed 16 GiB
DTYPES = {
    str(d).removeprefix("torch."): d
    for d in (
        torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64, torch.int32,
        torch.int16, torch.int8, torch.uint8, torch.bool, torch.complex64,
    )
}  # fmt: skip


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


def _shared_memory_dir() -> str | None:
    """A private folder in /dev/shm for one child's output frames, where it has room."""
    try:
        if shutil.disk_usage("/dev/shm").free < (4 << 30):
            return None
        return tempfile.mkdtemp(prefix="evo-frames-", dir="/dev/shm")
    except OSError:
        return None


class ChildFailed(Exception):
    """The child stopped answering: `kind` is timeout, died or memory; `reason` is one line."""

    def __init__(self, kind: str, reason: str):
        super().__init__(reason)
        self.kind = kind
        self.reason = reason


@dataclass
class Message:
    kind: str
    fields: dict
    tensors: list[torch.Tensor]


class Child:
    """One forked job and the judge's end of its pipe."""

    def __init__(self, job: Job, memory_limit_bytes: int):
        ctx = context(job.device)
        self.shm_dir = _shared_memory_dir()
        job = dataclasses.replace(job, shm_dir=self.shm_dir or "")
        self.conn, child_conn = ctx.Pipe(duplex=True)
        self.proc = ctx.Process(target=child_main, args=(child_conn, job), daemon=True)
        with _blank_main():
            self.proc.start()
        child_conn.close()
        self.memory_limit = memory_limit_bytes
        try:
            self._ps = psutil.Process(self.proc.pid)
        except psutil.Error:
            self._ps = None

    def send(self, op: str, **kw) -> None:
        try:
            self.conn.send({"op": op, **kw})
        except (OSError, ValueError, BrokenPipeError):
            raise ChildFailed("died", self._death_reason(op)) from None

    def recv(self, phase: str, timeout: float) -> Message:
        """The next message, or ChildFailed on timeout, death or the memory limit."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise ChildFailed("timeout", f"no answer within {timeout:g} s in phase {phase}")
            try:
                if self.conn.poll(min(0.1, left)):
                    return self._read()
            except (EOFError, OSError):
                raise ChildFailed("died", self._death_reason(phase)) from None
            rss = self._rss()
            if rss > self.memory_limit:
                raise ChildFailed(
                    "memory",
                    f"host memory {rss / 2**30:.1f} GiB exceeded the limit "
                    f"{self.memory_limit / 2**30:.1f} GiB in phase {phase}",
                )

    def _read(self) -> Message:
        header = json.loads(self.conn.recv_bytes(1 << 24))
        if not isinstance(header, dict) or not isinstance(header.get("kind"), str):
            raise ChildFailed("died", "malformed message from the child")
        tensors = []
        for meta in header.pop("tensors", []) or []:
            tensors.append(self._read_tensor(meta))
        return Message(header.pop("kind"), header, tensors)

    def _read_tensor(self, meta: dict) -> torch.Tensor:
        """One raw frame, received straight into a tensor of the declared dtype and shape."""
        dtype = DTYPES.get(str(meta.get("dtype")))
        if dtype is None or not isinstance(meta.get("shape"), list):
            raise ChildFailed("died", f"unsupported output dtype {meta.get('dtype')!r}")
        shape = [int(s) for s in meta["shape"]]
        numel = math.prod(shape)
        nbytes = numel * torch.empty((), dtype=dtype).element_size()
        if numel < 0 or nbytes > MAX_FRAME:
            raise ChildFailed("died", "an output frame is larger than the judge accepts")
        buf = torch.empty(nbytes, dtype=torch.uint8)
        if nbytes and "file" in meta:
            self._read_file(str(meta["file"]), buf)
        elif nbytes:
            try:
                got = self.conn.recv_bytes_into(memoryview(buf.numpy()))
            except mp.BufferTooShort:
                raise ChildFailed("died", "an output frame is longer than declared") from None
            if got != nbytes:
                raise ChildFailed("died", "an output frame does not match its declared shape")
        return buf.view(dtype).reshape(shape)

    def _read_file(self, name: str, buf: torch.Tensor) -> None:
        """Copy a frame file into the judge's own memory, then delete it."""
        if not self.shm_dir or not re.fullmatch(r"\d+\.bin", name):
            raise ChildFailed("died", "an output frame names a file outside its folder")
        path = os.path.join(self.shm_dir, name)
        try:
            with open(path, "rb", buffering=0) as f:
                if os.fstat(f.fileno()).st_size != buf.numel():
                    raise ChildFailed("died", "an output frame does not match its declared shape")
                view, got = memoryview(buf.numpy()), 0
                while got < buf.numel():
                    n = f.readinto(view[got:])
                    if not n:
                        break
                    got += n
            os.unlink(path)
        except OSError as e:
            raise ChildFailed("died", f"an output frame could not be read: {e}") from None
        if got != buf.numel():
            raise ChildFailed("died", "an output frame does not match its declared shape")

    def _rss(self) -> int:
        if self._ps is None:
            return 0
        try:
            return self._ps.memory_info().rss
        except psutil.Error:
            return 0

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
        pid = self.proc.pid
        if self.proc.is_alive():
            try:
                os.killpg(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                self.proc.kill()
        self.proc.join(timeout=5)
        self.conn.close()
        if self.shm_dir:
            shutil.rmtree(self.shm_dir, ignore_errors=True)
