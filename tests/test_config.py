"""Experiment configs: the shipped files load, every mistake names its key, round trips hold."""

import dataclasses
from datetime import datetime
from pathlib import Path

import pytest

from evo.config import (
    DEFAULT_CONFIG,
    PRECISIONS,
    BudgetConfig,
    ConfigError,
    GuardrailsConfig,
    KernelBenchConfig,
    LLMConfig,
    PopulationConfig,
    RunConfig,
    SelectionConfig,
    default_run_dir,
    dump_config,
    load_config,
    load_config_dict,
    reserve_run_dir,
)
from fitness.errors import EvoError

EXPERIMENTS = Path(__file__).resolve().parent.parent / "experiments"
BASE = {"workloads": ["builtin:softmax"]}


def with_(**changes) -> dict:
    """BASE plus top-level `changes`."""
    return {**BASE, **changes}


def error_of(data: dict) -> str:
    with pytest.raises(ConfigError) as info:
        load_config_dict(data)
    return str(info.value)


def test_quickstart_is_the_default_and_runs_three_builtins_offline():
    cfg = load_config(None)
    assert DEFAULT_CONFIG == EXPERIMENTS / "quickstart.yaml"
    assert cfg == load_config(EXPERIMENTS / "quickstart.yaml")
    assert cfg.name == "quickstart"
    assert cfg.workloads == (
        "builtin:rmsnorm",
        "builtin:matmul_bias_relu",
        "builtin:matmul_scale_gelu",
    )
    assert cfg.backends == ("triton",)
    assert cfg.population.islands == 2
    assert cfg.budgets.max_evals == 90
    assert cfg.llm.spec == "offline"
    assert cfg.kernelbench is None


def test_kernelbench_sweep_covers_levels_1_and_2_in_both_backends():
    cfg = load_config(EXPERIMENTS / "kernelbench_level1_2.yaml")
    assert cfg.kernelbench.levels == (1, 2)
    assert cfg.kernelbench.root is None
    assert {p.split("/")[0] for p in cfg.kernelbench.problems} == {"level1", "level2"}
    assert cfg.workloads == ()
    assert cfg.backends == ("triton", "cuda")
    assert cfg.llm.spec == "openai:gpt-4.1-mini"


def test_defaults_fill_every_missing_key():
    cfg = load_config_dict(BASE)
    assert cfg == RunConfig(workloads=("builtin:softmax",))
    assert cfg.population == PopulationConfig(
        islands=2, cap=32, elites=2, failure_pool=8, in_flight=2
    )
    assert cfg.selection.strategy == "tournament"
    assert cfg.selection.descriptors == ("sol_fraction", "code_size")
    assert (cfg.migration.topology, cfg.migration.interval, cfg.migration.rate) == ("ring", 10, 1)
    assert cfg.migration.cross_backend is False
    assert cfg.fitness.metric == "speedup_vs_eager"
    assert (cfg.fitness.device, cfg.fitness.precision, cfg.fitness.timeout) == ("auto", "fp32", 180)
    assert cfg.budgets == BudgetConfig()
    assert all(v is None for v in dataclasses.asdict(cfg.budgets).values())
    assert cfg.llm == LLMConfig(spec="offline", max_concurrency=4, temperature=0.7)
    assert (cfg.seed, cfg.deterministic, cfg.checkpoint_seconds) == (0, False, 60.0)
    assert cfg.run_dir is None and cfg.address is None
    # An empty section, or a null one, is the defaults too.
    assert load_config_dict(with_(population=None, selection={})) == cfg


def test_configs_are_frozen_and_lists_become_tuples():
    cfg = load_config_dict(with_(backends=["triton", "cuda"]))
    assert cfg.backends == ("triton", "cuda")
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.seed = 3  # type: ignore[misc]
    assert hash(cfg) == hash(load_config_dict(with_(backends=["triton", "cuda"])))


def test_int_widens_to_float_but_bool_is_not_an_integer():
    cfg = load_config_dict(with_(fitness={"timeout": 30}, budgets={"llm_dollars": 5}))
    assert isinstance(cfg.fitness.timeout, float) and cfg.fitness.timeout == 30.0
    assert isinstance(cfg.budgets.llm_dollars, float)
    assert error_of(with_(population={"cap": True})) == (
        "<dict>: population.cap: expected an integer, got true"
    )
    assert "budgets.max_evals: expected an integer or null, got 2.5" in error_of(
        with_(budgets={"max_evals": 2.5})
    )


@pytest.mark.parametrize(
    "data, message",
    [
        (
            {"population": {"cap": "ten"}},
            "population.cap: expected an integer, got 'ten'",
        ),
        ({"fitness": {"timeout": "fast"}}, "fitness.timeout: expected a number, got 'fast'"),
        ({"fitness": {"timeout": float("inf")}}, "fitness.timeout: expected a finite number"),
        ({"name": 2024}, "name: expected a string, got 2024"),
        ({"deterministic": "yes"}, "deterministic: expected true or false, got 'yes'"),
        ({"backends": "triton"}, "backends: expected a list, got 'triton'"),
        ({"population": [1, 2]}, "population: expected a mapping, got [1, 2]"),
        ({"kernelbench": {"levels": [1, "two"]}}, "kernelbench.levels[1]: expected an integer"),
    ],
)
def test_wrong_types_name_the_key_path(data, message):
    assert message in error_of(with_(**data))


@pytest.mark.parametrize(
    "data, message",
    [
        (
            {"selection": {"strategy": "roulete"}},
            "selection.strategy: unknown 'roulete' "
            "(choose from tournament, fitness_proportional, map_elites)",
        ),
        (
            {"migration": {"topology": "star"}},
            "migration.topology: unknown 'star' (choose from ring, all_to_all, none)",
        ),
        (
            {"backends": ["triton", "rocm"]},
            "backends[1]: unknown 'rocm' (choose from triton, cuda)",
        ),
        ({"fitness": {"device": "gpu"}}, "fitness.device: unknown 'gpu' (choose from auto, cpu"),
        ({"fitness": {"precision": "fp8"}}, "fitness.precision: unknown 'fp8'"),
        ({"fitness": {"metric": "speed"}}, "fitness.metric: unknown 'speed' (choose from"),
        ({"llm": {"spec": "gpt-4"}}, "llm.spec: unknown 'gpt-4' (choose from offline, openai:"),
        ({"llm": {"spec": "openai:"}}, "llm.spec: 'openai:' names no model"),
        ({"llm": {"spec": "replay: "}}, "llm.spec: 'replay: ' names no run directory"),
    ],
)
def test_unknown_choices_list_the_known_ones(data, message):
    assert message in error_of(with_(**data))


@pytest.mark.parametrize(
    "data, message",
    [
        ({"population": {"cap": 0}}, "population.cap: must be at least 1, got 0"),
        ({"population": {"islands": 0}}, "population.islands: must be at least 1"),
        ({"population": {"in_flight": 0}}, "population.in_flight: must be at least 1"),
        ({"population": {"elites": -1}}, "population.elites: must be at least 0"),
        ({"population": {"cap": 4, "elites": 5}}, "population.elites: 5 exceeds cap (4)"),
        ({"population": {"failure_pool": -1}}, "population.failure_pool: must be at least 0"),
        ({"selection": {"tournament_size": 0}}, "selection.tournament_size: must be at least 1"),
        ({"selection": {"offspring_penalty": -0.1}}, "selection.offspring_penalty: must be at"),
        ({"selection": {"descriptors": []}}, "selection.descriptors: needs at least one"),
        ({"selection": {"descriptors": ["a b"]}}, "selection.descriptors[0]: 'a b' is not a"),
        ({"selection": {"bins": 0}}, "selection.bins: must be at least 1"),
        ({"migration": {"interval": 0}}, "migration.interval: must be at least 1"),
        ({"migration": {"rate": -1}}, "migration.rate: must be at least 0"),
        ({"migration": {"rate": 40}}, "migration.rate: 40 exceeds population.cap (32)"),
        ({"fitness": {"timeout": 0}}, "fitness.timeout: must be positive, got 0.0"),
        ({"fitness": {"samples": 0}}, "fitness.samples: must be positive, got 0"),
        ({"budgets": {"max_evals": 0}}, "budgets.max_evals: must be positive, got 0"),
        ({"budgets": {"llm_dollars": -1}}, "budgets.llm_dollars: must be positive"),
        ({"llm": {"max_concurrency": 0}}, "llm.max_concurrency: must be at least 1"),
        ({"llm": {"temperature": 3}}, "llm.temperature: must be within [0, 2], got 3.0"),
        ({"llm": {"max_tokens": 0}}, "llm.max_tokens: must be at least 1"),
        ({"llm": {"base_url": "localhost:8000"}}, "llm.base_url: expected an http(s) URL"),
        ({"seed": -1}, "seed: must be at least 0"),
        ({"checkpoint_seconds": 0}, "checkpoint_seconds: must be positive"),
        ({"name": "my run"}, "name: 'my run' is not a folder name"),
        ({"backends": []}, "backends: needs at least one backend"),
        ({"backends": ["cuda", "cuda"]}, "backends[1]: 'cuda' is listed twice"),
    ],
)
def test_out_of_range_values_name_the_key_path(data, message):
    assert message in error_of(with_(**data))


@pytest.mark.parametrize(
    "workloads, message",
    [
        (["builtin:sofmax"], "workloads[0]: no builtin workload 'sofmax' (did you mean"),
        (["builtin:softmax", "kernelbench:76"], "workloads[1]: 'kernelbench:76' is not kernel"),
        (["softmax"], "workloads[0]: 'softmax' is neither builtin:NAME"),
        (["builtin:softmax", "builtin:softmax"], "workloads[1]: 'builtin:softmax' is listed"),
    ],
)
def test_bad_workload_names_are_caught_before_the_run(workloads, message):
    assert message in error_of({"workloads": workloads})


def test_workloads_may_be_builtins_kernelbench_problems_or_files():
    names = ["builtin:layernorm", "kernelbench:level2/76", "kernelbench:level1/23_Softmax.py"]
    names.append("my/problems/fused_op.py")
    assert load_config_dict({"workloads": names}).workloads == tuple(names)


def test_a_config_must_name_something_to_run():
    message = "workloads: none given (list workloads, or kernelbench levels or problems)"
    assert error_of({}) == f"<dict>: {message}"
    assert message in error_of({"kernelbench": {"root": "/kb"}})
    assert load_config_dict({"kernelbench": {"levels": [1]}}).kernelbench.levels == (1,)
    assert load_config_dict({"kernelbench": {"problems": ["level3/5"]}}).workloads == ()


def test_kernelbench_problems_must_lie_in_the_listed_levels():
    kb = load_config_dict({"kernelbench": {"levels": [2], "problems": ["level2/76_Gemm_Add"]}})
    assert kb.kernelbench == KernelBenchConfig(levels=(2,), problems=("level2/76_Gemm_Add",))
    assert "kernelbench.problems[0]: 'level3/5' is not in levels [1, 2]" in error_of(
        {"kernelbench": {"levels": [1, 2], "problems": ["level3/5"]}}
    )
    assert "kernelbench.problems[0]: 'Gemm_Add' is not levelN/ID" in error_of(
        {"kernelbench": {"problems": ["Gemm_Add"]}}
    )
    assert "kernelbench.levels[0]: must be at least 1" in error_of({"kernelbench": {"levels": [0]}})


def test_fitness_metric_may_be_a_user_function_path():
    for metric in ("mypkg.scores:weighted", "mypkg.scores.weighted"):
        assert load_config_dict(with_(fitness={"metric": metric})).fitness.metric == metric


def test_a_geomean_metric_takes_shape_indices_and_no_other_metric_does():
    cfg = load_config_dict(with_(fitness={"metric": "geomean_speedup_vs_eager", "shapes": [1, 2]}))
    assert cfg.fitness.shapes == (1, 2)
    assert load_config_dict(with_(fitness={"metric": "geomean_speedup_vs_compile"})).fitness
    err = error_of(with_(fitness={"metric": "speedup_vs_eager", "shapes": [1]}))
    assert "fitness.shapes: only a geomean metric uses it" in err
    err = error_of(with_(fitness={"metric": "geomean_speedup_vs_eager", "shapes": [-1]}))
    assert "fitness.shapes[0]: expected an index into SHAPES, got -1" in err


def test_llm_prices_are_dollars_per_million_tokens_and_never_negative():
    llm = load_config_dict(with_(llm={"spec": "openai:m", "price_in": 2.5, "price_out": 10})).llm
    assert (llm.price_in, llm.price_out) == (2.5, 10.0)
    assert "llm.price_out: must be at least 0" in error_of(with_(llm={"price_out": -1}))


def test_llm_specs_of_every_form_are_accepted():
    for spec in ("offline", "openai:gpt-4.1-mini", "anthropic:claude-x", "command:my-llm --fast"):
        assert load_config_dict(with_(llm={"spec": spec})).llm.spec == spec
    assert load_config_dict(with_(llm={"spec": "replay:runs/a"})).llm.spec == "replay:runs/a"


def test_precisions_match_the_fitness_service():
    from fitness.precision import Precision

    assert PRECISIONS == tuple(p.value for p in Precision)


def test_unknown_keys_suggest_the_closest_known_one():
    assert error_of(with_(migrations={})) == (
        "<dict>: unknown key 'migrations' (did you mean 'migration'?)"
    )
    assert "unknown key 'population.caps' (did you mean 'population.cap'?)" in error_of(
        with_(population={"caps": 3})
    )
    assert "unknown key 'zzz' (known keys: name, workloads," in error_of(with_(zzz=1))


def test_configs_built_in_code_are_validated_too():
    with pytest.raises(ConfigError, match=r"^cap: must be at least 1, got 0$"):
        PopulationConfig(cap=0)
    with pytest.raises(ConfigError, match="strategy: unknown 'x'"):
        dataclasses.replace(SelectionConfig(), strategy="x")
    assert issubclass(ConfigError, EvoError)


def test_to_dict_round_trips_through_load_config_dict():
    for path in (EXPERIMENTS / "quickstart.yaml", EXPERIMENTS / "kernelbench_level1_2.yaml"):
        cfg = load_config(path)
        plain = cfg.to_dict()
        assert plain["backends"] == list(cfg.backends) and isinstance(plain["population"], dict)
        assert load_config_dict(plain) == cfg


def test_dump_config_round_trips_through_load_config(tmp_path):
    cfg = load_config(
        EXPERIMENTS / "kernelbench_level1_2.yaml",
        {"run_dir": str(tmp_path / "run"), "fitness.samples": 7, "llm.base_url": "http://h/v1"},
    )
    dump_config(cfg, tmp_path / "config.yaml")
    assert (tmp_path / "config.yaml").read_text().startswith("# Resolved config")
    assert load_config(tmp_path / "config.yaml") == cfg


def test_overrides_replace_keys_after_the_file():
    cfg = load_config(
        None,
        {"budgets.max_evals": 20, "llm.spec": "offline", "run_dir": "x", "kernelbench.levels": [1]},
    )
    assert cfg.budgets.max_evals == 20
    assert cfg.run_dir == "x"
    assert cfg.kernelbench == KernelBenchConfig(levels=(1,))
    assert cfg.workloads == load_config(None).workloads


def test_bad_overrides_are_named_as_overrides():
    with pytest.raises(ConfigError) as info:
        load_config(None, {"budgets.max_eval": 5})
    assert str(info.value) == (
        "override: unknown key 'budgets.max_eval' (did you mean 'budgets.max_evals'?)"
    )
    with pytest.raises(ConfigError, match="override: unknown key 'name.x' .'name' has no sub"):
        load_config(None, {"name.x": 1})
    with pytest.raises(ConfigError) as info:
        load_config(None, {"budgets.max_evals": "many"})
    assert str(info.value) == (
        "override: budgets.max_evals: expected an integer or null, got 'many'"
    )
    assert info.value.key == "budgets.max_evals"


def test_file_errors_name_the_file_and_line(tmp_path):
    missing = tmp_path / "nope.yaml"
    with pytest.raises(ConfigError, match=f"^config file not found: {missing}$"):
        load_config(missing)
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nworkloads: [builtin:softmax\npopulation:\n  cap: 3\n")
    with pytest.raises(ConfigError, match=rf"^{bad}:3: invalid YAML"):
        load_config(bad)
    typo = tmp_path / "typo.yaml"
    typo.write_text("workloads: [builtin:softmax]\npopulation:\n  cap: ten\n")
    with pytest.raises(ConfigError) as info:
        load_config(typo)
    assert str(info.value) == f"{typo}: population.cap: expected an integer, got 'ten'"
    listed = tmp_path / "list.yaml"
    listed.write_text("- builtin:softmax\n")
    with pytest.raises(ConfigError, match="expected a mapping of keys"):
        load_config(listed)


def test_duplicate_keys_are_refused_not_silently_dropped(tmp_path):
    dup = tmp_path / "dup.yaml"
    dup.write_text("workloads: [builtin:softmax]\nbudgets: {max_evals: 5}\nbudgets: {}\n")
    with pytest.raises(ConfigError, match=rf"^{dup}:3: invalid YAML: duplicate key 'budgets'"):
        load_config(dup)


def test_exponent_floats_read_as_numbers(tmp_path):
    path = tmp_path / "exp.yaml"
    path.write_text("workloads: [builtin:softmax]\nfitness: {timeout: 1e3}\n")
    assert load_config(path).fitness.timeout == 1000.0


def test_default_run_dir_is_dated_and_timed_under_runs():
    cfg = load_config_dict(with_(name="sweep-1"))
    assert default_run_dir(cfg, datetime(2025, 3, 7, 9, 5, 2)) == "runs/2025-03-07_090502-sweep-1"


def test_two_runs_started_in_the_same_second_get_their_own_directories(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = load_config_dict(with_(name="sweep-1"))
    now = datetime(2025, 3, 7, 9, 5, 2)
    first, second = reserve_run_dir(cfg, now), reserve_run_dir(cfg, now)
    assert first == "runs/2025-03-07_090502-sweep-1" and second == first + "-2"
    assert (tmp_path / first).is_dir() and (tmp_path / second).is_dir()


# --- seed kernels and guardrails (compiler seeds) -------------------------------------------


def test_seed_kernels_default_to_builtin_and_guardrails_to_strict():
    cfg = load_config_dict(BASE)
    assert cfg.seed_kernels == "builtin"
    assert cfg.guardrails == GuardrailsConfig(allow_library_gemm=False)
    assert load_config(None).seed_kernels == "builtin"


@pytest.mark.parametrize("value", ["builtin", "inductor"])
def test_seed_kernels_take_builtin_or_inductor(value):
    assert load_config_dict(with_(seed_kernels=value)).seed_kernels == value


@pytest.mark.parametrize(
    "value, message",
    [
        ("compiler", "seed_kernels: unknown 'compiler' (choose from builtin, inductor)"),
        ("Inductor", "seed_kernels: unknown 'Inductor' (choose from builtin, inductor)"),
        (1, "seed_kernels: expected a string, got 1"),
        (None, "seed_kernels: expected a string, got null"),
    ],
)
def test_bad_seed_kernels_name_the_key(value, message):
    with pytest.raises(ConfigError) as info:
        load_config_dict(with_(seed_kernels=value))
    assert message in str(info.value)
    assert info.value.key == "seed_kernels"


def test_guardrails_allow_library_gemm_is_a_bool():
    cfg = load_config_dict(with_(guardrails={"allow_library_gemm": True}))
    assert cfg.guardrails.allow_library_gemm is True
    assert load_config_dict(with_(guardrails={})).guardrails.allow_library_gemm is False
    assert load_config_dict(with_(guardrails=None)).guardrails.allow_library_gemm is False
    message = "guardrails.allow_library_gemm: expected true or false, got 'yes'"
    assert message in error_of(with_(guardrails={"allow_library_gemm": "yes"}))


@pytest.mark.parametrize("key", ["allow_torch_ops", "allow_library_gemms", "enabled"])
def test_unknown_guardrails_keys_are_named(key):
    with pytest.raises(ConfigError) as info:
        load_config_dict(with_(guardrails={key: True}))
    assert f"unknown key 'guardrails.{key}'" in str(info.value)
    assert info.value.key == f"guardrails.{key}"


def test_seed_inductor_is_read_as_seed_kernels_with_random_seed_zero():
    cfg = load_config_dict({"workloads": ["builtin:softmax"], "seed": "inductor"})
    assert cfg.seed_kernels == "inductor"
    assert cfg.seed == 0
    assert cfg == load_config_dict(with_(seed_kernels="inductor"))


def test_an_explicit_seed_kernels_wins_over_seed_inductor():
    cfg = load_config_dict(with_(seed="inductor", seed_kernels="builtin"))
    assert (cfg.seed_kernels, cfg.seed) == ("builtin", 0)
    # an integer seed stays the random seed
    cfg = load_config_dict(with_(seed=7, seed_kernels="inductor"))
    assert (cfg.seed_kernels, cfg.seed) == ("inductor", 7)


def test_seed_inductor_in_a_yaml_file_and_seed_kernels_as_an_override(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("workloads: [builtin:softmax]\nseed: inductor\n")
    cfg = load_config(path)
    assert (cfg.seed_kernels, cfg.seed) == ("inductor", 0)
    # `evo run --seed builtin` is the override seed_kernels: builtin, and wins
    assert load_config(path, {"seed_kernels": "builtin"}).seed_kernels == "builtin"
    assert load_config(None, {"seed_kernels": "inductor"}).seed_kernels == "inductor"
    with pytest.raises(ConfigError) as info:
        load_config(None, {"seed_kernels": "jit"})
    assert str(info.value) == (
        "override: seed_kernels: unknown 'jit' (choose from builtin, inductor)"
    )
    with pytest.raises(ConfigError, match="override: unknown key 'guardrails.x'"):
        load_config(None, {"guardrails.x": True})


LEVEL_PROBLEMS = {
    1: ["1", "2", "8", "10", "12", "13", "16", "17", "40", "88"],
    2: ["9", "12", "14", "29", "56", "59", "63", "68", "76", "86"],
}


@pytest.mark.parametrize("level", [1, 2])
def test_kernelbench_level_configs_seed_from_inductor_offline(level):
    path = EXPERIMENTS / f"kernelbench_level{level}.yaml"
    cfg = load_config(path)
    assert cfg.name == f"kernelbench-level{level}"
    assert cfg.kernelbench.levels == (level,)
    assert cfg.kernelbench.root is None
    assert cfg.kernelbench.problems == tuple(f"level{level}/{n}" for n in LEVEL_PROBLEMS[level])
    assert cfg.workloads == ()
    assert cfg.seed_kernels == "inductor"
    assert cfg.guardrails.allow_library_gemm is False
    assert cfg.backends == ("triton",)
    assert cfg.llm.spec == "offline" and not cfg.llm.active
    assert cfg.budgets.per_workload_max_evals == 50
    assert cfg.seed == 0
    # the resolved config round-trips, the new keys included
    plain = cfg.to_dict()
    assert plain["seed_kernels"] == "inductor"
    assert plain["guardrails"] == {"allow_library_gemm": False}
    assert load_config_dict(plain) == cfg
    assert load_config(path, {"guardrails.allow_library_gemm": True}).guardrails == (
        GuardrailsConfig(allow_library_gemm=True)
    )
