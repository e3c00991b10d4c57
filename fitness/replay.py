"""The neutered replay: the candidate with its own kernels doing nothing (fitness.neuter), run
by the judge in a fresh process through the same calls as the candidate's own run.

Outputs that still match the reference were computed by something else: a PyTorch or
library fallback, host code. Nothing the candidate's process reports takes part.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from fitness.channel import Message
from fitness.lockstep import TimingRefused, run_ticks
from fitness.outputs import Verdict
from fitness.processes import Child, ChildFailed


def replay(protocol, children: list[Child], keep: list[int], refs) -> list[str]:
    """The candidate with its own kernels neutered, in a fresh process and folder, through
    the same calls as the candidate's own run (warm-up, the correctness rounds, the timed
    calls), so no call can tell the two runs apart. An output that still matches the
    reference where doing nothing would not (the round is not `trivial`) was computed by
    something other than those kernels: what it matched is returned, for the judge to refuse
    the run as a fallback. `protocol` is the judge's evaluation in progress (fitness.judge)."""
    tmp = Path(tempfile.mkdtemp(prefix="evo-replay-"))
    matched: list[str] = []
    try:
        (tmp / "neutered.py").write_text(protocol.neutered)
        child = protocol._start(children, "candidate", tmp, "neutered.py")
        protocol._expect(child, "hello", "replay")
        child.send("setup")
        protocol._expect(child, "ready", "replay")
        if protocol.opts.timing:  # as before the candidate's own load: nothing tells them apart
            protocol._calibrate(child)
        child.send("load")
        timeout = max(protocol.opts.timeout, protocol.opts.build_timeout)
        protocol._expect(child, "loaded", "replay", timeout=timeout)
        child.send("warmup", n=protocol.opts.warmup)
        protocol._expect(child, "warmed", "replay")
        for i in keep:
            child.send("round", index=i, seed=protocol.rounds[i].seed)
            msg = protocol._expect(child, "output", "replay")
            _replayed(protocol, child, msg, refs[i], f"round {i + 1}", matched)
        if protocol.opts.timing:
            at = {it: k for k, it in enumerate(protocol.recheck_at)}
            ticks = run_ticks(child, protocol.tick_seeds, protocol._expect, fetch=at)
            for k, msg in enumerate(ticks.rechecks):
                ref = refs[len(protocol.rounds) + k]
                what = f"timed call {protocol.recheck_at[k] + 1}"
                _replayed(protocol, child, msg, ref, what, matched)
    except (Verdict, ChildFailed, TimingRefused):
        pass  # it failed without its kernels: what it matched so far still counts
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return matched


def _replayed(protocol, child: Child, msg: Message, ref, what: str, matched: list) -> None:
    _, bounds, trivial = ref
    try:
        protocol._check_output(child, msg, bounds, what, record=False)
    except Verdict:
        return
    if not trivial:
        matched.append(what)
