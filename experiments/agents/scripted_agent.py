"""A scripted stand-in for a coding agent, for the `command:` provider.

    llm: {spec: "command:python3 experiments/agents/scripted_agent.py"}

It reads the prompt on stdin, finds the workload (the prompt's "## Reference: NAME" heading)
and the backend it is asked to write (the system prompt's contract), and answers with one of
the pre-written kernels in experiments/agents/kernels/ (NAME__BACKEND*.py), chosen by the
prompt's hash, in a fenced block, as a model would. A workload or backend it has no kernel for
gets a reply without code (the engine records a generation_failure). It proves the whole LLM
path on a GPU (prompt, reply, edit, CUDA build, verdict, lineage) without a model.
"""

from __future__ import annotations

import hashlib
import re
import sys
from pathlib import Path

KERNELS = Path(__file__).resolve().parent / "kernels"
# What the system prompt says about the file to write, per backend (operators/prompts).
ASKS = {"cuda": "`__global__` kernels built at import time", "triton": "`@triton.jit` kernels"}


def answer(prompt: str) -> str:
    match = re.search(r"^## Reference: (\S+)", prompt, re.M)
    backend = next((b for b, ask in ASKS.items() if ask in prompt), None)
    if match is None or backend is None:
        return "I cannot tell which workload or backend this prompt is about."
    slug = match.group(1).replace(":", "_").replace("/", "_")
    files = sorted(KERNELS.glob(f"{slug}__{backend}*.py"))
    if not files:
        return f"I have no {backend} kernel for {match.group(1)}."
    pick = int(hashlib.sha256(prompt.encode()).hexdigest(), 16) % len(files)
    return f"Here is a kernel ({files[pick].name}).\n\n```python\n{files[pick].read_text()}```\n"


if __name__ == "__main__":
    sys.stdout.write(answer(sys.stdin.read()))
