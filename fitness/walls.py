"""What walls a child process is in, read by the judge from /proc (never asked of the child).

A verdict's `isolation` field lists these; `fitness.containment` says how each is put up.
"""

from __future__ import annotations

import os

from fitness.containment import LAYERS

_NAMESPACES = (("mnt", "mount"), ("pid", "pid"), ("net", "net"), ("ipc", "ipc"))


def probe(device: str, run_as: str = "nobody") -> list[str]:
    """The layers a candidate's process gets on this machine: a child that runs no candidate
    code is walled in as one would be, and read from /proc."""
    import shutil
    import tempfile

    from fitness.processes import Child
    from fitness.sandbox import Job

    tmp = tempfile.mkdtemp(prefix="evo-probe-")
    job = Job("probe", "", {}, [], device, [], [], tmp, run_as=run_as)
    child = Child(job, 16 << 30)  # a CUDA context alone holds about 1 GiB
    try:
        child.recv("probe", 60.0)  # hello
        child.recv("probe", 60.0)  # ready: the change of user is done
        return child.isolation()
    finally:
        child.kill()
        shutil.rmtree(tmp, ignore_errors=True)


def observed_layers(pid: int) -> list[str]:
    """The layers in force around process `pid`, in LAYERS order ([] if it cannot be read)."""
    if pid <= 0:
        return []
    found = set()
    for ns, layer in _NAMESPACES:
        try:
            if os.readlink(f"/proc/{pid}/ns/{ns}") != os.readlink(f"/proc/self/ns/{ns}"):
                found.add(layer)
        except OSError:
            pass
    if "mount" in found and not _same_root(pid):
        mounts = _mounts(pid)
        if all(mounts.get(p) == "tmpfs" for p in ("/tmp", "/var/tmp", "/dev/shm")):
            found.add("tmpfs")
    else:
        found.discard("mount")
    status = _status(pid)
    if os.geteuid() == 0 and status.get("Uid", "0").split()[0] != "0":
        found.add("user")
    if status.get("NoNewPrivs", "0").strip() == "1":
        found.add("no_new_privs")
    if _limited(pid):
        found.add("rlimits")
    return [layer for layer in LAYERS if layer in found]


def _same_root(pid: int) -> bool:
    try:
        a, b = os.stat(f"/proc/{pid}/root/"), os.stat("/")
    except OSError:
        return True
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def _mounts(pid: int) -> dict[str, str]:
    """Mount point -> file system type, the last mount on each point winning."""
    out = {}
    try:
        with open(f"/proc/{pid}/mountinfo") as f:
            for line in f:
                left, _, right = line.partition(" - ")
                parts = left.split()
                if len(parts) > 4 and right:
                    out[parts[4]] = right.split()[0]
    except OSError:
        pass
    return out


def _status(pid: int) -> dict[str, str]:
    try:
        with open(f"/proc/{pid}/status") as f:
            return dict(line.rstrip("\n").split(":\t", 1) for line in f if ":\t" in line)
    except OSError:
        return {}


def _limited(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/limits") as f:
            text = f.read()
    except OSError:
        return False
    rows = {line[:26].strip(): line[26:].split() for line in text.splitlines()[1:]}
    capped = all(
        (rows.get(name) or ["unlimited"])[0] != "unlimited"
        for name in ("Max file size", "Max processes", "Max open files")
    )
    return capped and (rows.get("Max core file size") or [""])[0] == "0"
