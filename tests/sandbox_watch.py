"""What a judged candidate left behind: files outside its sandbox and processes that outlived it.

`Snapshot.take` lists the places a candidate could write to (the system's scratch folders,
the home folder, the judge's repository, and the folders a test adds, such as a run
directory) and the test process's descendants; `leftovers` compares two snapshots. The
judge's own fork server is a descendant that lives across evaluations, so take the "before"
snapshot after one warm-up evaluation.

The scratch folders, the home folder and the repository are shared with whatever else runs
on the machine (other test sessions, editors), so there a new or changed entry counts only if
it is the candidate's: its name holds the test's marker, or it belongs to another user than
the test's (a root judge runs candidates as `nobody`), outside the judge's own scratch
folders. The folders a test adds are its own: there every new or changed entry counts.
"""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

import fitness

REPO = Path(fitness.__file__).resolve().parent.parent  # the judge's own checkout
SCRATCH = (Path("/tmp"), Path("/var/tmp"), Path("/dev/shm"))
# Caches and tool state that test runs write into the repository.
SKIP_NAMES = frozenset(
    {".git", ".venv", "__pycache__", ".pytest_cache", ".ruff_cache", ".mypy_cache"}
)
# The judge's own scratch folders (each evaluation's, removed with it), by name prefix.
JUDGE_SCRATCH = ("evo-eval-", "evo-ref-", "evo-frames-", "pymp-")
# How deep each kind of root is listed: scratch and home hold other tools' trees.
SHALLOW, DEEP = 2, 8


@dataclass(frozen=True)
class Entry:
    size: int  # -1 for a folder
    mtime_ns: int
    uid: int


@dataclass(frozen=True)
class Snapshot:
    """Shared entries, the test's own entries, and descendant processes (pid -> command)."""

    shared: dict[str, Entry]
    own: dict[str, Entry]
    processes: dict[int, str]
    at: float = field(default_factory=time.time)

    @classmethod
    def take(cls, *own: Path) -> Snapshot:
        """The shared roots (scratch, $HOME, the repository), the test's `own` folders, and
        the test process's descendants."""
        shared: dict[str, Entry] = {}
        for root in SCRATCH + (Path.home(),):
            _walk(root, SHALLOW, shared)
        _walk(REPO, DEEP, shared)
        mine: dict[str, Entry] = {}
        for root in own:
            _walk(Path(root), DEEP, mine)
        return cls(shared, mine, descendants())


def descendants() -> dict[int, str]:
    """The test process's descendants, by pid, with their command lines."""
    out = {}
    for p in psutil.Process().children(recursive=True):
        try:
            out[p.pid] = " ".join(p.cmdline())[:200]
        except psutil.Error:
            continue
    return out


def processes_named(marker: str) -> list[int]:
    """Every process on the machine whose name (comm) or command line holds `marker`."""
    found = []
    for p in psutil.process_iter(["pid", "name", "cmdline"]):
        try:
            if marker in (p.info["name"] or "") or marker in " ".join(p.info["cmdline"] or []):
                found.append(p.pid)
        except psutil.Error:
            continue
    return found


def marked_files(marker: str) -> list[str]:
    """Files and folders in the scratch folders (two levels down) whose name holds `marker`."""
    entries: dict[str, Entry] = {}
    for root in SCRATCH:
        _walk(root, SHALLOW, entries)
    return [p for p in entries if marker in os.path.basename(p)]


def _walk(root: Path, depth: int, out: dict[str, Entry]) -> None:
    try:
        it = os.scandir(root)
    except OSError:
        return
    with it:
        for e in it:
            if e.name in SKIP_NAMES:
                continue
            try:
                st = e.stat(follow_symlinks=False)
            except OSError:
                continue
            if e.is_dir(follow_symlinks=False):
                out[e.path] = Entry(-1, 0, st.st_uid)
                if depth > 1:
                    _walk(Path(e.path), depth - 1, out)
            else:
                out[e.path] = Entry(st.st_size, st.st_mtime_ns, st.st_uid)


def _candidates(path: str, entry: Entry, marker: str) -> bool:
    """Whether a new or changed shared entry is a candidate's (see the module docstring)."""
    if marker and marker in path:
        return True
    if any(part.startswith(JUDGE_SCRATCH) for part in Path(path).parts):
        return False
    return entry.uid != os.getuid()


def leftovers(before: Snapshot, after: Snapshot, marker: str = "") -> list[str]:
    """What is in `after` and not in `before`: entries new or changed, processes new."""
    lines = []
    for entries, old_entries, shared in (
        (after.shared, before.shared, True),
        (after.own, before.own, False),
    ):
        for path, entry in sorted(entries.items()):
            old = old_entries.get(path)
            changed = old is None or (entry.size >= 0 and old != entry)
            if not changed or (shared and not _candidates(path, entry, marker)):
                continue
            what = "folder" if entry.size < 0 else "file"
            lines.append(f"{'new' if old is None else 'changed'} {what} {path} (uid {entry.uid})")
    for pid, cmd in sorted(after.processes.items()):
        if pid not in before.processes:
            lines.append(f"process {pid} still running: {cmd}")
    return lines


def settle(before: Snapshot, *own: Path, marker: str = "", wait_s: float = 3.0) -> list[str]:
    """`leftovers` once the judge has had up to `wait_s` to reap and clean up."""
    deadline = time.monotonic() + wait_s
    while True:
        found = leftovers(before, Snapshot.take(*own), marker)
        if not found or time.monotonic() > deadline:
            return found
        time.sleep(0.2)


def remove_marked(marker: str, *own: Path) -> None:
    """Delete what a test's candidate planted (only entries whose names hold the marker)."""
    entries: dict[str, Entry] = {}
    for root in SCRATCH + (Path.home(),):
        _walk(root, SHALLOW, entries)
    for root in (REPO, *own):
        _walk(Path(root), DEEP, entries)
    for path in sorted(entries, key=len, reverse=True):
        if marker not in os.path.basename(path) or not os.path.lexists(path):
            continue
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            os.unlink(path)
