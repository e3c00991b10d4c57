"""Isolation of a child process: what it may see, write and reach, and who it runs as."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

from fitness.containment import contain, die_with_parent, limit_resources, no_new_privileges

# Environment variables a candidate keeps; everything else is dropped (secrets included).
ENV_KEEP = (
    "PATH", "LANG", "LC_ALL", "CUDA_VISIBLE_DEVICES", "CUDA_HOME", "CUDA_PATH",
    "LD_LIBRARY_PATH", "PYTHONPATH", "TRITON_INTERPRET", "OMP_NUM_THREADS", "CC", "CXX",
    "TORCH_CUDA_ARCH_LIST", "NVIDIA_VISIBLE_DEVICES", "OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE",
    "MAX_JOBS", "VIRTUAL_ENV",
)  # fmt: skip


def isolate(job, needs: list[str]) -> None:
    """Cut the freshly forked child off: the OS walls (fitness.containment: namespaces, a
    root of its own, private scratch), its own session, a scrubbed environment, caches in its
    folder, output to a log file, resource limits, no network."""
    os.setsid()
    die_with_parent()
    walled = contain(job, needs)
    keep = {k: v for k, v in os.environ.items() if k in ENV_KEEP}
    os.environ.clear()
    os.environ.update(keep)
    tmp = Path(job.tmpdir)
    os.environ.update(
        {
            "HOME": str(tmp),
            "TMPDIR": str(tmp),
            "TRITON_CACHE_DIR": str(tmp / "triton-cache"),
            "TORCH_EXTENSIONS_DIR": str(tmp / "ext"),
            "TORCHINDUCTOR_CACHE_DIR": str(tmp / "inductor"),
            "PYTHONDONTWRITEBYTECODE": "1",
        }
    )
    os.environ.update(job.env_extra)
    if job.device == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"
    os.chdir(tmp)
    # The child's own output goes to a file: it must never reach the judge's stdout.
    log = os.open(tmp / "child.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    limit_resources(job.file_size_limit)
    if not walled:
        _unshare_network()


def drop_privileges(job) -> None:
    """Become `job.run_as` (a root judge only) before candidate code runs, and forbid any
    later gain of privileges (setuid programs) whoever the judge is.

    Everything the harness needs is open or loaded by then; the candidate keeps its own
    folders (given to that user) and can no longer read the judge's memory or environment
    through /proc, nor write the judge's caches.
    """
    user = _sandbox_user(job.run_as)
    if user is not None:
        for root in (job.tmpdir, os.environ.get("TORCH_EXTENSIONS_DIR", "")):
            if root and os.path.isdir(root):
                _chown_tree(root, user.pw_uid, user.pw_gid)
        os.setgroups([])
        os.setgid(user.pw_gid)
        os.setuid(user.pw_uid)
        die_with_parent(parent=os.getppid())  # a change of user clears the setting
    no_new_privileges()


def _sandbox_user(name: str):
    """The passwd entry of the user to become: None unless root is asked to become one."""
    if not name or os.geteuid() != 0:
        return None
    import pwd

    try:
        return pwd.getpwnam(name)
    except KeyError:
        return None


def _chown_tree(root: str, uid: int, gid: int) -> None:
    os.chown(root, uid, gid)
    for here, dirs, files in os.walk(root):
        for name in dirs + files:
            os.chown(os.path.join(here, name), uid, gid, follow_symlinks=False)


def _unshare_network() -> None:
    """Drop into an empty network namespace where the OS allows it (root, Linux)."""
    try:
        import ctypes  # the harness's own use, before any candidate code exists

        libc = ctypes.CDLL(None, use_errno=True)
        libc.unshare(0x40000000)  # CLONE_NEWNET; fails harmlessly without the capability
    except (OSError, AttributeError):
        pass


def run_bounded(
    cmd: list[str], cwd: str, env: dict, timeout_s: float, preexec_fn=None
) -> tuple[int | None, str]:
    """Run `cmd` in a session of its own, stdin and stdout closed; (exit code, stderr), or
    (None, stderr) when it outlived `timeout_s` and its whole process group was killed.
    A failure to start it (OSError, or its `preexec_fn` raising) is raised."""
    proc = subprocess.Popen(
        cmd,
        preexec_fn=preexec_fn,
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        _, stderr = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        _, stderr = proc.communicate()
        return None, stderr or ""
    return proc.returncode, stderr or ""
