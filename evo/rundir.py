"""The run directory's own files: the lock, the resolved config, checkpoints.

Everything goes through a pyarrow filesystem, so a run directory may be a local path or an
object-store URI. A checkpoint is committed by a marker written after its data; readers take
the newest committed one, and only the newest KEEP_CHECKPOINTS are kept.
"""

from __future__ import annotations

import json
import os
import socket
from dataclasses import dataclass

import pyarrow.fs as pafs

from evo.lineage import open_run_dir
from fitness.errors import EvoError

# Checkpoints kept: resume reads the newest committed one. A sweep checkpoints every minute
# and each holds every island's population (about 0.7 MB for 20 KernelBench islands), so a
# run of days kept whole would fill its directory with ones nobody reads.
KEEP_CHECKPOINTS = 3


@dataclass
class RunDir:
    uri: str

    def __post_init__(self):
        self.fs, self.root = open_run_dir(self.uri)
        self._lock_fd = None

    def path(self, *parts: str) -> str:
        return "/".join([self.root.rstrip("/"), *parts])

    def exists(self, *parts: str) -> bool:
        return self.fs.get_file_info(self.path(*parts)).type != pafs.FileType.NotFound

    def write_text(self, rel: str, text: str) -> None:
        parent = self.path(*rel.split("/")[:-1]) if "/" in rel else self.root
        self.fs.create_dir(parent, recursive=True)
        with self.fs.open_output_stream(self.path(rel)) as f:
            f.write(text.encode())

    def read_text(self, rel: str) -> str:
        with self.fs.open_input_stream(self.path(rel)) as f:
            return f.read().decode()

    # -- the lock: one run or resume at a time
    def lock(self) -> None:
        """Take the run directory. Locally an flock (released by the OS if the holder dies);
        on an object store a marker that a dead holder leaves behind (remove it by hand)."""
        owner = f"pid {os.getpid()} on {socket.gethostname()}"
        if isinstance(self.fs, pafs.LocalFileSystem):
            import fcntl

            os.makedirs(self.root, exist_ok=True)
            fd = os.open(os.path.join(self.root, ".lock"), os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                held = os.pread(fd, 200, 0).decode(errors="replace").strip()
                os.close(fd)
                raise EvoError(f"run directory {self.uri} is in use ({held or 'locked'})") from None
            os.ftruncate(fd, 0)
            os.pwrite(fd, owner.encode(), 0)
            self._lock_fd = fd
            return
        if self.exists("LOCK"):
            raise EvoError(
                f"run directory {self.uri} is in use ({self.read_text('LOCK')}); if that "
                f"process is gone, delete {self.path('LOCK')}"
            )
        self.write_text("LOCK", owner)
        self._lock_fd = "marker"

    def unlock(self) -> None:
        if self._lock_fd is None:
            return
        if self._lock_fd == "marker":
            self.fs.delete_file(self.path("LOCK"))
        else:
            os.close(self._lock_fd)
        self._lock_fd = None

    # -- checkpoints
    def write_checkpoint(self, state: dict) -> int:
        """Commit the next checkpoint, then delete those older than the newest
        KEEP_CHECKPOINTS (committed or torn). A store that refuses the delete costs only
        room: the next checkpoint tries again."""
        found = self._checkpoints()
        n = max((k for k, committed in found.items() if committed), default=0) + 1
        rel = f"checkpoints/{n:06d}"
        self.write_text(f"{rel}/state.json", json.dumps(state))
        self.write_text(f"{rel}/COMMITTED", "")
        try:
            for k in found:
                if k <= n - KEEP_CHECKPOINTS:
                    self.fs.delete_dir(self.path(f"checkpoints/{k:06d}"))
        except OSError:
            pass
        return n

    def _checkpoints(self) -> dict[int, bool]:
        """Every checkpoint folder by number, and whether it is committed (one listing)."""
        if not self.exists("checkpoints"):
            return {}
        found: dict[int, bool] = {}
        sel = pafs.FileSelector(self.path("checkpoints"), recursive=True)
        for info in self.fs.get_file_info(sel):
            parts = info.path.rstrip("/").split("/")
            if info.type == pafs.FileType.Directory and parts[-1].isdigit():
                found.setdefault(int(parts[-1]), False)
            elif parts[-1] == "COMMITTED" and parts[-2].isdigit():
                found[int(parts[-2])] = True
        return found

    def latest_checkpoint_number(self) -> int | None:
        done = [k for k, committed in self._checkpoints().items() if committed]
        return max(done) if done else None

    def latest_checkpoint(self) -> dict | None:
        n = self.latest_checkpoint_number()
        if n is None:
            return None
        return json.loads(self.read_text(f"checkpoints/{n:06d}/state.json"))
