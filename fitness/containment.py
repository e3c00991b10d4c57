"""The OS walls around a child process: namespaces, a minimal root, and a private scratch.

A freshly forked child calls `contain(job)` before anything else runs in it. Where the OS
allows (a root judge on Linux), the child gets new mount, PID, network, IPC and UTS
namespaces; a root filesystem of its own, made of read-only binds of exactly what it must
import (the system's directories, Python and its packages, the judge's own package, the
workload file); a work folder and /tmp, /var/tmp and /dev/shm that are tmpfs of their own,
gone with it; and it runs under the first process of its PID namespace, so that when it goes,
the kernel kills every process it started, double forks included. The judge's files, the run
directory, other candidates and the network are simply not there.

Binding each path at its own name also serves a judge whose checkout and venv live under a
directory only root may enter (`chmod 700`): in the new root that directory is a plain
folder holding only the binds, so an unprivileged candidate can import from it.

The judge reads which layers are in force from /proc (fitness.walls, `EvalResult.isolation`);
a layer the OS refused is left out, and with EVO_REQUIRE_SANDBOX=1 the judge refuses to run
without every one of them (`require`).
"""

from __future__ import annotations

import ctypes
import os
import platform
import resource
import signal
import sys
from pathlib import Path

from fitness.errors import EvoError

# The layers a full sandbox has, in the order `isolation` lists them.
LAYERS = ("mount", "pid", "net", "ipc", "tmpfs", "user", "no_new_privs", "rlimits")
_CLONE_NEWNS, _CLONE_NEWUTS, _CLONE_NEWIPC = 0x00020000, 0x04000000, 0x08000000
_CLONE_NEWPID, _CLONE_NEWNET = 0x20000000, 0x40000000
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_NOEXEC = 1, 2, 4, 8
_MS_REMOUNT, _MS_BIND, _MS_REC, _MS_PRIVATE = 32, 4096, 16384, 1 << 18
_MNT_DETACH = 2
_PR_SET_PDEATHSIG, _PR_SET_NO_NEW_PRIVS = 1, 38
_SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41}.get(platform.machine())
# System folders bound read-only where they exist (compilers, headers, libraries, certs).
SYSTEM_DIRS = ("/usr", "/lib", "/lib64", "/lib32", "/bin", "/sbin", "/etc", "/opt")
# The project's packages that a child imports (fitness.workloads imports experiments).
PROJECT_PACKAGES = ("fitness", "backends", "experiments")
SCRATCH_BYTES = 1 << 30  # each private tmpfs (/tmp, /var/tmp, /dev/shm)
WORKDIR_BYTES = 4 << 30  # the work folder (Triton's cache, nvcc's temporaries)
NOFILE = 4096
# Processes and threads of the sandbox user, counted machine-wide by the kernel once it is
# that user (root is exempt): a fork bomb stops here. torch starts a few dozen threads.
NPROC = 8192
_libc = ctypes.CDLL(None, use_errno=True)


class SandboxMissing(EvoError):
    """EVO_REQUIRE_SANDBOX=1 and a layer could not be put in force."""


def required() -> bool:
    return os.environ.get("EVO_REQUIRE_SANDBOX", "") not in ("", "0")


def require(layers: list[str], who: str) -> None:
    """Raise SandboxMissing naming the missing layers, when the environment demands them."""
    missing = [layer for layer in LAYERS if layer not in layers]
    if missing and required():
        raise SandboxMissing(
            f"EVO_REQUIRE_SANDBOX=1, but the {who} ran without these isolation layers: "
            f"{', '.join(missing)} ({explain(missing)})"
        )


def explain(missing: list[str]) -> str:
    if os.geteuid() != 0:
        return "the judge is not root: namespaces and a change of user need root"
    return "the OS refused them (a container without CAP_SYS_ADMIN, or no user 'nobody')"


def _check(ret: int, what: str) -> None:
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _mount(src: str | None, dst: str, fstype: str | None, flags: int, data: str = "") -> None:
    ret = _libc.mount(
        src.encode() if src else None,
        dst.encode(),
        fstype.encode() if fstype else None,
        ctypes.c_ulong(flags),
        data.encode() if data else None,
    )
    _check(ret, f"mount {src or fstype} on {dst}")


def die_with_parent(parent: int | None = None) -> None:
    """SIGKILL this process when its parent goes (a change of user clears the setting).
    `parent` is the pid the parent must have; by default any but 1 (init adopted us)."""
    _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    gone = os.getppid() == 1 if parent is None else os.getppid() != parent
    if gone:  # the parent went before the setting took
        os._exit(1)


def contain(job, needs: list[str]) -> bool:
    """Put the walls up around this (freshly forked) process; whether the namespaces went up
    (the judge reads what is in force from /proc, fitness.walls).

    `needs` are the paths the child must read (besides the system's and Python's own); the
    job's work folder becomes a tmpfs holding copies of its files (or, with `private_workdir`
    False, is bound read-write) and a CUDA extension folder is bound read-write. Forks: the
    caller continues as the job, under the first process of a new PID namespace."""
    if os.geteuid() != 0 or not sys.platform.startswith("linux"):
        return False
    flags = _CLONE_NEWNS | _CLONE_NEWPID | _CLONE_NEWNET | _CLONE_NEWIPC | _CLONE_NEWUTS
    if _libc.unshare(ctypes.c_int(flags)) != 0:
        return False
    _become_init()
    try:
        _private_root(job, needs)
    except OSError as e:
        print(f"evo sandbox: no private root: {e}", file=sys.stderr)
    return True


def _become_init() -> None:
    """Fork into the new PID namespace twice: its first process only waits for the second,
    which runs the job. The first process of a namespace ignores the signals it sends itself
    (so `abort()` there would turn into a SIGSEGV), and the kernel kills the whole namespace
    when it goes. Each waiting parent ends as its child did, so the judge's view of the
    process (exit code, fatal signal, death) stays the same."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the namespace's first process; its parent is outside (pid 0 from here)
        os.close(r)
        die_with_parent(parent=0)
        job_pid = os.fork()
        if job_pid == 0:
            os.close(w)
            die_with_parent(parent=1)
            return
        _close_all_but(w)
        status = _wait(job_pid)
        os.write(w, status.to_bytes(4, "little"))
        os._exit(0)
    os.close(w)
    _close_all_but(r)
    _wait(pid)
    data = os.read(r, 4)
    _end_as(int.from_bytes(data, "little") if len(data) == 4 else 1 << 8)


def _close_all_but(keep: int) -> None:
    """A waiting process holds no descriptor of the job's: the job's channel and pipes see
    their end when the job's own copies close (a parent blocked on an exec pipe included)."""
    os.closerange(3, keep)
    os.closerange(keep + 1, os.sysconf("SC_OPEN_MAX"))


def _wait(pid: int) -> int:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    while True:
        try:
            return os.waitpid(pid, 0)[1]
        except InterruptedError:
            continue
        except ChildProcessError:
            return 1 << 8


def _end_as(status: int) -> None:
    """Exit with a child's wait status: the same code, or the same fatal signal."""
    if os.WIFSIGNALED(status):  # whatever handlers were inherited
        sig = os.WTERMSIG(status)
        try:
            signal.signal(sig, signal.SIG_DFL)
        except (OSError, ValueError):
            pass
        os.kill(os.getpid(), sig)
    os._exit(os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 1)


def _private_root(job, needs: list[str]) -> None:
    _mount(None, "/", None, _MS_REC | _MS_PRIVATE)
    root = Path(job.tmpdir) / ".root"
    root.mkdir(exist_ok=True)
    _mount("tmpfs", str(root), "tmpfs", _MS_NOSUID | _MS_NODEV, "mode=0755,size=16m")
    for scratch in ("/tmp", "/var/tmp"):  # first: what is bound below may live in /tmp
        _tmpfs(root, scratch)
    for path in _read_only_paths(needs):
        _bind(path, root, read_only=True)
    ext = job.env_extra.get("TORCH_EXTENSIONS_DIR", "")
    if ext and os.path.isdir(ext):  # CUDA builds, shared by the build and the run of a source
        _bind(ext, root, read_only=False, rec=False)
    if getattr(job, "private_workdir", True):
        _scratch_workdir(job.tmpdir, root)
    else:  # not recursive: the new root's own mount point stays out of view
        _bind(job.tmpdir, root, read_only=False, rec=False)
    _dev(root)
    (root / "proc").mkdir(exist_ok=True)
    _mount("proc", str(root / "proc"), "proc", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC)
    if os.path.isdir("/sys"):
        _bind("/sys", root, read_only=True, rec=True)
    old = root / ".old"
    old.mkdir()
    if _SYS_PIVOT_ROOT is None:
        raise OSError(0, f"pivot_root unknown on {platform.machine()}")
    _check(_libc.syscall(_SYS_PIVOT_ROOT, str(root).encode(), str(old).encode()), "pivot_root")
    os.chdir("/")
    _check(_libc.umount2(b"/.old", _MNT_DETACH), "umount the old root")
    os.rmdir("/.old")
    os.chdir(job.tmpdir)


def _read_only_paths(needs: list[str]) -> list[str]:
    """System folders, Python's prefixes and packages, the project's packages a child imports
    (not the rest of the checkout: runs, tests, .git) and `needs`, nested ones left out."""
    project = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    paths = list(SYSTEM_DIRS) + [sys.prefix, sys.base_prefix, sys.exec_prefix]
    paths += [p for p in sys.path if p and not _inside(os.path.abspath(p), project)]
    paths += [os.path.join(project, pkg) for pkg in PROJECT_PACKAGES] + list(needs)
    out: list[str] = []
    for p in sorted({os.path.abspath(p) for p in paths if p and os.path.exists(p)}):
        if p in ("/", "/tmp", "/var/tmp", "/dev", "/proc", "/sys"):
            continue
        if not any(_inside(p, q) for q in out):
            out.append(p)
    return out


def _inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def _bind(path: str, root: Path, read_only: bool, rec: bool = True) -> None:
    target = Path(str(root) + path)
    if os.path.islink(path) and os.path.dirname(path) == "/":  # /lib -> usr/lib
        if not target.exists() and not target.is_symlink():
            target.parent.mkdir(parents=True, exist_ok=True)
            os.symlink(os.readlink(path), target)
        return
    if os.path.isdir(path):
        target.mkdir(parents=True, exist_ok=True)
    else:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.touch(exist_ok=True)
    _mount(path, str(target), None, _MS_BIND | (_MS_REC if rec else 0))
    if read_only:
        flags = _MS_BIND | _MS_REMOUNT | _MS_RDONLY | _MS_NOSUID
        _mount(None, str(target), None, flags)


def _scratch_workdir(tmpdir: str, root: Path) -> None:
    """The work folder as a tmpfs of its own (WORKDIR_BYTES), holding copies of the files the
    judge put there: whatever the child writes goes with it, and cannot fill the disk."""
    target = _tmpfs(root, tmpdir, mode="0700", size=WORKDIR_BYTES)
    for entry in os.scandir(tmpdir):
        if entry.is_file(follow_symlinks=False):
            with open(entry.path, "rb") as src, open(target / entry.name, "wb") as dst:
                dst.write(src.read())


def _tmpfs(root: Path, path: str, mode: str = "1777", size: int = SCRATCH_BYTES) -> Path:
    """A fresh tmpfs at `path` in the new root (its mount point made as needed)."""
    target = Path(str(root) + path)
    target.mkdir(parents=True, exist_ok=True)
    _mount("tmpfs", str(target), "tmpfs", _MS_NOSUID | _MS_NODEV, f"mode={mode},size={size}")
    return target


def _dev(root: Path) -> None:
    """The host's /dev (GPUs, null, random), with a private /dev/shm and no host mqueue."""
    _bind("/dev", root, read_only=False, rec=True)
    _tmpfs(root, "/dev/shm")
    if os.path.isdir("/dev/mqueue"):
        _tmpfs(root, "/dev/mqueue")


def no_new_privileges() -> None:
    """No later gain of privileges: setuid programs run with the caller's."""
    _libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)


def limit_resources(file_size: int = 16 << 30) -> None:
    resource.setrlimit(resource.RLIMIT_FSIZE, (file_size, file_size))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    for kind, most in ((resource.RLIMIT_NOFILE, NOFILE), (resource.RLIMIT_NPROC, NPROC)):
        cap = min(_finite(v, most) for v in resource.getrlimit(kind))  # never above today's
        resource.setrlimit(kind, (cap, cap))


def _finite(limit: int, most: int) -> int:
    """A limit no larger than `most` (RLIM_INFINITY counts as larger than anything)."""
    return most if limit == resource.RLIM_INFINITY else min(limit, most)
