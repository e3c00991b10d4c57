"""The fault agent of the GPU fault run: distinct slots per call, faults first, then honest
matmul seeds with other launch configurations (experiments/agents/fault_agent.py)."""

from __future__ import annotations

import ast
import importlib.util
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from experiments.bench.faults import FAULT_MARKS
from fitness.guardrails import check
from operators.edits import extract_code

ROOT = Path(__file__).resolve().parents[1]
AGENT = ROOT / "experiments" / "agents" / "fault_agent.py"
SEED = ROOT / "experiments" / "workloads" / "seeds" / "matmul_triton.py"
EXPLOITS = ROOT / "tests" / "exploits"
FAULT_FILES = ["17_gpu_illegal_address.py", "17_gpu_hang.py", "17_gpu_oom.py"]
FENCED = re.compile(r"```python\n(.*?)```", re.S)
# The seed's GPU launch configuration: the second `return dict(...)` of _launch_config.
LAUNCH = re.compile(r"^\s*return dict\((BLOCK_M=.*)\)\s*$", re.M)


def _load():
    spec = importlib.util.spec_from_file_location("fault_agent_under_test", AGENT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


agent = _load()


def fenced(reply: str) -> str:
    """The one ```python block of a reply."""
    blocks = FENCED.findall(reply)
    assert len(blocks) == 1, reply[:200]
    return blocks[0]


def gpu_launch(code: str) -> str:
    interpreter, gpu = LAUNCH.findall(code)
    assert interpreter.startswith("BLOCK_M=16,")  # the interpreter's branch comes first
    return gpu


# --- claim ----------------------------------------------------------------------------------


def test_claim_hands_out_0_1_2_in_turn(tmp_path):
    state = tmp_path / "nested" / "state"  # made when missing
    assert [agent.claim(state) for _ in range(5)] == [0, 1, 2, 3, 4]
    assert sorted(p.name for p in state.iterdir()) == [f"slot-{k}" for k in range(5)]


def test_claim_fills_the_first_free_slot(tmp_path):
    (tmp_path / "slot-0").touch()
    (tmp_path / "slot-2").touch()
    assert [agent.claim(tmp_path) for _ in range(3)] == [1, 3, 4]


def test_concurrent_claims_take_distinct_slots(tmp_path):
    with ThreadPoolExecutor(max_workers=16) as pool:
        slots = list(pool.map(lambda _: agent.claim(tmp_path), range(16)))
    assert sorted(slots) == list(range(16))
    assert agent.claim(tmp_path) == 16


# --- answers --------------------------------------------------------------------------------


@pytest.mark.parametrize("slot", range(3))
def test_the_first_three_answers_are_the_gpu_faults_in_order(slot):
    reply = agent.answer(slot)
    source = (EXPLOITS / FAULT_FILES[slot]).read_text()
    doc = ast.get_docstring(ast.parse(source))
    assert doc and doc.startswith("Exploit class 17")
    code = fenced(reply)
    assert code == source
    assert ast.get_docstring(ast.parse(code)) == doc
    assert extract_code(reply) == source  # as the command provider's operator reads it
    assert FAULT_FILES[slot] in reply.split("```")[0]  # the prose names the candidate


def test_each_fault_of_the_bench_is_answered_once_in_its_order():
    replies = [agent.answer(slot) for slot in range(3)]
    found = [[mark for mark in FAULT_MARKS if mark in r] for r in replies]
    assert [FAULT_MARKS[m] for (m,) in found] == ["illegal_access", "hang", "oom"]
    assert all(mark not in agent.answer(3) for mark in FAULT_MARKS)


def test_honest_answers_are_the_matmul_seed_with_another_gpu_launch():
    seed = SEED.read_text()
    seed_launch = gpu_launch(seed)
    launches = []
    for slot in range(3, 3 + 16):
        code = fenced(agent.answer(slot))
        assert extract_code(agent.answer(slot)) == code
        launch = gpu_launch(code)
        assert launch != seed_launch, slot
        assert gpu_launch(code) in agent.CONFIGS
        # only the GPU launch changed: the kernel and the interpreter's launch are the seed's
        assert code.replace(launch, seed_launch) == seed
        launches.append(launch)
    assert len(set(launches)) == 16  # 16 consecutive honest answers, all different


def test_honest_answers_pass_the_strict_guardrails_and_use_valid_tiles():
    for slot in range(3, 3 + len(agent.CONFIGS)):
        code = fenced(agent.answer(slot))
        verdict = check(code, "triton")
        assert verdict.ok, (slot, verdict.reason)
        tiles = dict(kv.split("=") for kv in gpu_launch(code).split(", "))
        assert all(int(tiles[t]) >= 16 for t in ("BLOCK_M", "BLOCK_N", "BLOCK_K"))  # tl.dot


def test_honest_answers_cycle_through_the_configs():
    period = len(agent.CONFIGS)
    assert agent.answer(3) == agent.answer(3 + period)
    assert agent.answer(3) != agent.answer(4)


def test_no_honest_answer_repeats_the_seeds_gpu_launch():
    seed_launch = gpu_launch(SEED.read_text())
    same = [
        slot
        for slot in range(3, 3 + len(agent.CONFIGS))
        if gpu_launch(fenced(agent.answer(slot))) == seed_launch
    ]
    assert same == []


# --- as the command provider runs it --------------------------------------------------------


def ask(state: Path, prompt: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "experiments/agents/fault_agent.py", str(state)],
        input=prompt,
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )


def test_the_agent_as_a_command_answers_from_its_state_dir(tmp_path):
    state = tmp_path / "state"
    prompt = "Improve this kernel for builtin:matmul.\n" * 200  # read and ignored
    first = ask(state, prompt)
    assert first.returncode == 0, first.stderr
    assert first.stdout == agent.answer(0)
    assert fenced(first.stdout) == (EXPLOITS / FAULT_FILES[0]).read_text()
    assert (state / "slot-0").exists()
    second = ask(state, prompt)
    assert second.returncode == 0, second.stderr
    assert second.stdout == agent.answer(1)
