"""The wire between the judge and a child: bounded JSON messages, outputs as sealed memfds.

A child's messages are data for the judge to check, never objects to believe. So:
- a message is one SOCK_SEQPACKET datagram of JSON, at most MAX_HEADER bytes, read with a
  timeout; nothing is unpickled;
- an output tensor crosses as a file descriptor (SCM_RIGHTS) of a memfd that the child has
  sealed against writes, growth and shrinking. The judge accepts only a regular file whose
  seals are set and whose size is exactly what the judge expects (from the reference, not from
  the child's header), and maps it read-only: its bytes can no longer change, whatever the
  child does next, and a FIFO, a device or a huge file is refused before a byte is read.
The judge's memory for one message is thus bounded by MAX_HEADER plus the outputs it expects.
"""

from __future__ import annotations

import array
import fcntl
import json
import mmap
import os
import select
import socket
import stat
import time
import warnings
from dataclasses import dataclass, field

import torch

MAX_HEADER = 1 << 17  # bytes of JSON in one message (error logs are cut to 6 KB)
MAX_FDS = 64  # output tensors in one message
SEALS = fcntl.F_SEAL_WRITE | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SHRINK
DTYPES = {
    str(d).removeprefix("torch."): d
    for d in (
        torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64, torch.int32,
        torch.int16, torch.int8, torch.uint8, torch.bool, torch.complex64,
    )
}  # fmt: skip


class ChannelError(Exception):
    """The peer broke the protocol or went quiet; `kind` is timeout, closed or malformed."""

    def __init__(self, kind: str, reason: str):
        super().__init__(reason)
        self.kind, self.reason = kind, reason


def pair() -> tuple[socket.socket, socket.socket]:
    """(judge end, child end) of a fresh channel."""
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    for s in (a, b):
        try:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, MAX_HEADER * 2)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, MAX_HEADER * 2)
        except OSError:
            pass
    return a, b


@dataclass
class Message:
    kind: str
    fields: dict
    fds: list[int] = field(default_factory=list)  # the outputs' memfds, owned by the message

    @property
    def metas(self) -> list:
        """The child's own account of its outputs (dtype, shape): a claim, not a fact."""
        metas = self.fields.get("tensors") or []
        return metas if isinstance(metas, list) else []

    def close(self) -> None:
        for fd in self.fds:
            try:
                os.close(fd)
            except OSError:
                pass
        self.fds = []


def send(sock: socket.socket, kind: str, fds: tuple[int, ...] = (), **fields) -> None:
    """One message; `fds` travel with it (SCM_RIGHTS)."""
    data = json.dumps({"kind": kind, **fields}).encode()
    anc = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))] if fds else []
    sock.sendmsg([data], anc)


def recv(sock: socket.socket, timeout: float | None, watch=None) -> Message:
    """The next message within `timeout` seconds (None: wait for ever). `watch()` is called
    about every 0.1 s while waiting and may raise (the judge's memory watch)."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        left = 0.1 if deadline is None else min(0.1, deadline - time.monotonic())
        if left <= 0:
            raise ChannelError("timeout", f"no answer within {timeout:g} s")
        ready, _, _ = select.select([sock], [], [], left)
        if ready:
            return _read(sock)
        if watch is not None:
            watch()


def _read(sock: socket.socket) -> Message:
    space = socket.CMSG_SPACE(MAX_FDS * array.array("i").itemsize)
    try:
        data, anc, flags, _ = sock.recvmsg(MAX_HEADER + 1, space)
    except OSError as e:
        raise ChannelError("closed", f"the channel failed: {e}") from None
    fds = _fds(anc)
    msg = Message("", {}, fds)
    if not data:
        msg.close()
        raise ChannelError("closed", "the process closed its channel")
    if len(data) > MAX_HEADER or flags & (socket.MSG_TRUNC | socket.MSG_CTRUNC):
        msg.close()
        raise ChannelError("malformed", f"a message longer than {MAX_HEADER} bytes")
    try:
        header = json.loads(data)
    except ValueError:
        header = None
    if not isinstance(header, dict) or not isinstance(header.get("kind"), str):
        msg.close()
        raise ChannelError("malformed", "a message that is not a JSON object with a kind")
    msg.kind = header.pop("kind")
    msg.fields = header
    return msg


def _fds(anc) -> list[int]:
    out = []
    for level, kind, data in anc:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            a = array.array("i")
            a.frombytes(data[: len(data) - len(data) % a.itemsize])
            out.extend(a)
    return out


# ---------------------------------------------------------------- outputs as memfds


def export(t: torch.Tensor) -> tuple[int, dict]:
    """(a sealed memfd holding t's bytes, its meta). The caller closes the fd after sending.

    Called by the harness in the child with torch's function and dispatch modes disabled, so
    the copy reads the bytes as they are, not through anything the candidate installed."""
    flat = t.detach().contiguous().reshape(-1).view(torch.uint8)
    n = flat.numel()
    fd = os.memfd_create("evo-output", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    if n:
        os.ftruncate(fd, n)
        with mmap.mmap(fd, n) as mm:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                torch.frombuffer(mm, dtype=torch.uint8, count=n).copy_(flat)
            del mm
    fcntl.fcntl(fd, fcntl.F_ADD_SEALS, SEALS | fcntl.F_SEAL_SEAL)
    return fd, {"dtype": str(t.dtype).removeprefix("torch."), "shape": list(t.shape)}


def view(fd: int, dtype: torch.dtype, shape: list[int]) -> torch.Tensor:
    """A read-only tensor over a sealed memfd of exactly dtype x shape bytes.

    Raises ChannelError('malformed') for anything else: not a regular file, not sealed, or
    another size. The bytes are read straight from the file's pages; the judge allocates
    nothing of the child's choosing."""
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        raise ChannelError("malformed", "an output descriptor that is not a regular file")
    numel = 1
    for s in shape:
        numel *= int(s)
    nbytes = numel * torch.empty((), dtype=dtype).element_size()
    if st.st_size != nbytes:
        raise ChannelError(
            "malformed", f"an output of {st.st_size} bytes where {nbytes} were expected"
        )
    try:
        seals = fcntl.fcntl(fd, fcntl.F_GET_SEALS)
    except OSError:
        seals = 0
    if seals & SEALS != SEALS:
        raise ChannelError("malformed", "an output that its process could still change")
    if nbytes == 0:
        return torch.empty(shape, dtype=dtype)
    mm = mmap.mmap(fd, nbytes, prot=mmap.PROT_READ)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a read-only buffer; the judge never writes it
        flat = torch.frombuffer(mm, dtype=torch.uint8, count=nbytes)
    return flat.view(dtype).reshape(shape)


def meta_of(meta) -> tuple[torch.dtype | None, list[int] | None]:
    """(dtype, shape) from a child's meta, None for what is malformed."""
    if not isinstance(meta, dict):
        return None, None
    dtype = DTYPES.get(str(meta.get("dtype")))
    shape = meta.get("shape")
    ok = isinstance(shape, list) and all(isinstance(s, int) and s >= 0 for s in shape)
    return dtype, (shape if ok else None)
