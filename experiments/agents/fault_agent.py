"""A command-provider agent that answers with faulty kernels first, then honest ones.

    llm: {spec: "command:python3 experiments/agents/fault_agent.py STATE_DIR"}

For the GPU fault run (experiments/bench/faults.py) on builtin:matmul. Its first three answers
are the GPU fault candidates of tests/exploits/ (an illegal memory access, a kernel that never
finishes, an allocation past the GPU's memory); every later answer is the matmul seed with
another launch configuration, so the run goes on with honest children. Concurrent calls take
distinct answers: each claims the next free slot file in STATE_DIR.
"""

from __future__ import annotations

import itertools
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FAULTS = ("17_gpu_illegal_address.py", "17_gpu_hang.py", "17_gpu_oom.py")
SEED = ROOT / "experiments" / "workloads" / "seeds" / "matmul_triton.py"
GPU_CONFIG = "BLOCK_M=128, BLOCK_N=128, BLOCK_K=32, GROUP_M=8, num_warps=8, num_stages=3"
CONFIGS = [
    f"BLOCK_M={m}, BLOCK_N={n}, BLOCK_K={k}, GROUP_M=8, num_warps={w}, num_stages={s}"
    for m, n, k, w, s in itertools.product((64, 128), (64, 128), (32, 64), (4, 8), (3, 4))
]
CONFIGS.remove(GPU_CONFIG)  # every honest answer differs from the seed


def claim(state: Path) -> int:
    """The first slot number no other call has taken."""
    state.mkdir(parents=True, exist_ok=True)
    for k in itertools.count():
        try:
            os.close(os.open(state / f"slot-{k}", os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            return k
        except FileExistsError:
            continue
    raise AssertionError("unreachable")


def answer(slot: int) -> str:
    if slot < len(FAULTS):
        source = (ROOT / "tests" / "exploits" / FAULTS[slot]).read_text()
        name = FAULTS[slot]
    else:
        seed = SEED.read_text()
        assert GPU_CONFIG in seed, "the matmul seed's launch configuration moved"
        config = CONFIGS[(slot - len(FAULTS)) % len(CONFIGS)]
        source, name = seed.replace(GPU_CONFIG, config), f"matmul seed with {config}"
    return f"Here is a kernel ({name}).\n\n```python\n{source}```\n"


if __name__ == "__main__":
    sys.stdin.read()
    sys.stdout.write(answer(claim(Path(sys.argv[1]))))
