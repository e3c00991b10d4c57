"""`evo run --seed`: where the islands start, passed to the config as `seed_kernels`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evo import engine
from evo.cli import _parser, main

EXPERIMENTS = Path(__file__).resolve().parents[1] / "experiments"


@pytest.fixture
def runs(monkeypatch):
    """`evo run` up to the engine: each call's config and run directory, no Ray started."""
    calls = []

    def run_config(cfg, run_dir, from_run=None, quiet=False):
        calls.append((cfg, run_dir))
        return {"run_dir": run_dir, "stub": True}

    monkeypatch.setattr(engine, "run_config", run_config)
    return calls


@pytest.mark.parametrize("command", ["run", "sweep"])
@pytest.mark.parametrize("value", ["builtin", "inductor"])
def test_the_parser_reads_seed_as_seed_kernels(command, value):
    config = [] if command == "run" else ["c.yaml"]
    args = _parser().parse_args([command, *config, "--seed", value])
    assert args.seed_kernels == value
    assert _parser().parse_args([command, *config]).seed_kernels is None


def test_an_unknown_seed_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as info:
        _parser().parse_args(["run", "--seed", "bogus"])
    assert info.value.code == 2
    assert "invalid choice: 'bogus'" in capsys.readouterr().err


def test_run_seed_inductor_sets_seed_kernels(runs, tmp_path, capsys):
    run_dir = str(tmp_path / "run")
    assert main(["run", "--seed", "inductor", "--run-dir", run_dir, "--quiet"]) == 0
    ((cfg, got_dir),) = runs
    assert cfg.seed_kernels == "inductor"
    assert cfg.seed == 0
    assert got_dir == run_dir and cfg.run_dir == run_dir
    assert json.loads(capsys.readouterr().out) == {"run_dir": run_dir, "stub": True}


def test_run_without_seed_keeps_the_configs_seed_kernels(runs, tmp_path):
    assert main(["run", "--run-dir", str(tmp_path / "a"), "--quiet"]) == 0
    level1 = str(EXPERIMENTS / "kernelbench_level1.yaml")
    assert main(["run", level1, "--run-dir", str(tmp_path / "b"), "--quiet"]) == 0
    assert [cfg.seed_kernels for cfg, _ in runs] == ["builtin", "inductor"]


def test_run_seed_builtin_overrides_a_configs_inductor_seeds(runs, tmp_path):
    level1 = str(EXPERIMENTS / "kernelbench_level1.yaml")
    assert main(["run", level1, "--seed", "builtin", "--run-dir", str(tmp_path), "--quiet"]) == 0
    ((cfg, _),) = runs
    assert cfg.seed_kernels == "builtin"
    assert cfg.kernelbench.problems[0] == "level1/1"  # the rest of the file still applies
