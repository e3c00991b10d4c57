"""A candidate's process never outlives its judge."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]


def test_a_killed_judge_leaves_no_candidate_process_behind():
    """`evo eval` of a candidate that spins for ever, killed with SIGKILL mid-evaluation: the
    candidate's process dies with it (it would otherwise spin on, unowned)."""
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(ROOT)}
    judge = subprocess.Popen(
        [sys.executable, "-m", "evo", "eval", str(ROOT / "tests/exploits/17_hang.py"),
         "--workload", "builtin:scaled_gelu", "--device", "cpu", "--json"],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    spinning = []
    deadline = time.monotonic() + 120
    while not spinning and time.monotonic() < deadline:
        time.sleep(0.5)
        kids = psutil.Process(judge.pid).children(recursive=True)
        # the candidate's child: a session of its own, and busy
        spinning = [p for p in kids if _spins_in_own_session(p, _sid(judge))]
    assert spinning, "the candidate never started spinning"
    judge.send_signal(signal.SIGKILL)
    judge.wait()
    gone, alive = psutil.wait_procs(spinning, timeout=20)
    assert not alive, [p.pid for p in alive]


def _spins_in_own_session(p: psutil.Process, judge_sid: int) -> bool:
    """The candidate's child: in a session other than the judge's (its own, or the one of the
    processes that wait for it around its PID namespace), and busy. A process that ends while
    it is looked at (the judge's short-lived helpers) is not it."""
    try:
        return _sid(p) not in (judge_sid, -1) and p.cpu_percent(1.0) > 20  # a shared CPU
    except (psutil.NoSuchProcess, ProcessLookupError):
        return False


def _sid(p) -> int:
    try:
        return os.getsid(p.pid)
    except OSError:
        return -1
