"""The scripted agent for the `command:` provider answers real prompts with its kernels."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from fitness.workloads import resolve_workload
from operators.edits import extract_code
from operators.prompting import CodeSample, PromptContext, render

ROOT = Path(__file__).resolve().parents[1]
AGENT = ROOT / "experiments" / "agents" / "scripted_agent.py"
KERNELS = ROOT / "experiments" / "agents" / "kernels"


def ask(prompt: str) -> str:
    done = subprocess.run(
        [sys.executable, str(AGENT)], input=prompt, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def prompt(operator: str, backend: str, workload: str) -> str:
    w = resolve_workload(workload)
    parent = (
        CodeSample(w.seed_path.read_text(), {"status": "correct"})
        if operator != "initial"
        else None
    )
    ctx = PromptContext(reference=w.source, workload=workload, parent=parent, edit_format="diff")
    p = render(operator, backend, ctx)
    return p.system + "\n\n" + p.user


def test_the_agent_answers_each_backend_with_one_of_its_kernels():
    triton = extract_code(ask(prompt("mutate", "triton", "builtin:row_sum")))
    assert triton in {f.read_text() for f in KERNELS.glob("builtin_row_sum__triton*.py")}
    cuda = extract_code(ask(prompt("initial", "cuda", "builtin:softmax")))
    assert cuda == (KERNELS / "builtin_softmax__cuda.py").read_text()
    assert "__global__" in cuda


def test_a_workload_it_has_no_kernel_for_gets_a_reply_without_code():
    reply = ask(prompt("mutate", "triton", "builtin:matmul"))
    assert "```" not in reply and "no triton kernel for builtin:matmul" in reply
