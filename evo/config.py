"""Experiment configuration: a YAML file read into frozen, validated dataclasses.

Each dataclass checks its fields when built, so a config made in code or by
`dataclasses.replace` is as valid as one read from a file. Errors name the key path and the
file. Paths in a config are kept as written: relative to where the run starts.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import re
import types
from dataclasses import dataclass, field
from datetime import datetime
from functools import cache
from pathlib import Path
from typing import Any, get_args, get_origin, get_type_hints

import yaml

import experiments
from backends import BACKENDS
from fitness.errors import EvoError
from fitness.workloads import builtin_names

DEFAULT_CONFIG = Path(experiments.__file__).parent / "quickstart.yaml"

STRATEGIES = ("tournament", "fitness_proportional", "map_elites")
TOPOLOGIES = ("ring", "all_to_all", "none")
METRICS = (
    "speedup_vs_eager",
    "speedup_vs_compile",
    "geomean_speedup_vs_eager",  # over the default shape and `fitness.shapes`
    "geomean_speedup_vs_compile",
)
DEVICES = ("auto", "cpu", "cuda")
PRECISIONS = ("fp32", "tf32", "bf16", "fp16")  # fitness.precision.Precision (it imports torch)
LLM_PREFIXES = ("openai", "anthropic", "command", "replay")
LLM_FORMS = "offline, openai:MODEL, anthropic:MODEL, command:CMD, replay:RUN_DIR"

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_IDENT = r"[A-Za-z_]\w*"
_DOTTED = re.compile(rf"{_IDENT}(\.{_IDENT})*:{_IDENT}|{_IDENT}(\.{_IDENT})+")
_KB_PROBLEM = re.compile(r"level(\d+)/\d+(_[\w.-]*)?")


class ConfigError(EvoError):
    """A bad experiment config; `key` is the dotted key path at fault, where there is one."""

    def __init__(self, message: str, key: str | None = None, detail: str | None = None):
        super().__init__(message)
        self.key = key
        self.detail = detail


def _invalid(key: str, detail: str) -> ConfigError:
    return ConfigError(f"{key}: {detail}", key, detail)


def _show(value: Any) -> str:
    """A value as the user wrote it in YAML: null, true, 'text', 3."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    return repr(value)


def _choose(key: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise _invalid(key, f"unknown {value!r} (choose from {', '.join(choices)})")


def _require(ok: bool, key: str, detail: str) -> None:
    if not ok:
        raise _invalid(key, detail)


def _unique(key: str, values: tuple) -> None:
    for i, v in enumerate(values):
        _require(v not in values[:i], f"{key}[{i}]", f"{_show(v)} is listed twice")


# -- type checking, driven by the field annotations


@cache
def _hints(cls: type) -> dict[str, Any]:
    return {f.name: get_type_hints(cls)[f.name] for f in dataclasses.fields(cls)}


def _optional(hint: Any) -> tuple[Any, bool]:
    """(inner type, whether None is allowed) of `X` or `X | None`."""
    if get_origin(hint) is types.UnionType:
        args = [a for a in get_args(hint) if a is not type(None)]
        return args[0], True
    return hint, False


_WANTS = {int: "an integer", float: "a number", str: "a string", bool: "true or false"}


def _coerce(value: Any, hint: Any, key: str) -> Any:
    """`value` checked against `hint`; ints widen to floats and lists become tuples."""
    inner, nullable = _optional(hint)
    if value is None and nullable:
        return None
    if get_origin(inner) is tuple:
        if not isinstance(value, list | tuple):
            raise _invalid(key, f"expected a list, got {_show(value)}")
        item = get_args(inner)[0]
        return tuple(_coerce(v, item, f"{key}[{i}]") for i, v in enumerate(value))
    if get_origin(inner) is dict:
        if not isinstance(value, dict):
            raise _invalid(key, f"expected a mapping, got {_show(value)}")
        item = get_args(inner)[1]
        out = {}
        for k, v in value.items():
            _require(isinstance(k, str), key, f"expected string keys, got {_show(k)}")
            out[k] = _coerce(v, item, f"{key}.{k}")
        return out
    if dataclasses.is_dataclass(inner):
        if value is None or isinstance(value, dict):
            return _build(inner, value, f"{key}.")
        if not isinstance(value, inner):
            raise _invalid(key, f"expected a mapping, got {_show(value)}")
        return value
    ok = {
        bool: isinstance(value, bool),
        int: isinstance(value, int) and not isinstance(value, bool),
        float: isinstance(value, int | float) and not isinstance(value, bool),
        str: isinstance(value, str),
    }[inner]
    if not ok:
        wanted = _WANTS[inner] + (" or null" if nullable else "")
        raise _invalid(key, f"expected {wanted}, got {_show(value)}")
    if inner is float:
        value = float(value)
        _require(math.isfinite(value), key, f"expected a finite number, got {_show(value)}")
    return value


class _Checked:
    """Base of the config dataclasses: coerce every field, then run the class's `_check`."""

    def __post_init__(self) -> None:
        for name, hint in _hints(type(self)).items():
            object.__setattr__(self, name, _coerce(getattr(self, name), hint, name))
        self._check()


def _positive(key: str, value: int | float | None) -> None:
    _require(value is None or value > 0, key, f"must be positive, got {_show(value)}")


def _at_least(key: str, value: int | float, low: int | float) -> None:
    _require(value >= low, key, f"must be at least {low}, got {_show(value)}")


# -- the sections


@dataclass(frozen=True)
class KernelBenchConfig(_Checked):
    """KernelBench problems to run: every problem of `levels`, or only `problems` when given.

    `problems` are `levelN/ID` or `levelN/ID_Name`; with `levels` set, each must be in one of
    them. `root` None means $KERNELBENCH_ROOT at run time.
    """

    root: str | None = None
    levels: tuple[int, ...] = ()
    problems: tuple[str, ...] = ()

    def _check(self) -> None:
        for i, level in enumerate(self.levels):
            _at_least(f"levels[{i}]", level, 1)
        _unique("levels", self.levels)
        for i, ref in enumerate(self.problems):
            match = _KB_PROBLEM.fullmatch(ref.removesuffix(".py"))
            key = f"problems[{i}]"
            _require(match is not None, key, f"{ref!r} is not levelN/ID or levelN/ID_Name")
            level = int(match.group(1))
            in_levels = not self.levels or level in self.levels
            _require(in_levels, key, f"{ref!r} is not in levels {list(self.levels)}")
        _unique("problems", self.problems)


@dataclass(frozen=True)
class PopulationConfig(_Checked):
    """Islands per (workload, backend) and the size of each island's population."""

    islands: int = 2
    cap: int = 32
    elites: int = 2
    failure_pool: int = 8
    in_flight: int = 2  # children proposed or evaluating at once, per island

    def _check(self) -> None:
        _at_least("islands", self.islands, 1)
        _at_least("cap", self.cap, 1)
        _at_least("elites", self.elites, 0)
        _require(self.elites <= self.cap, "elites", f"{self.elites} exceeds cap ({self.cap})")
        _at_least("failure_pool", self.failure_pool, 0)
        _at_least("in_flight", self.in_flight, 1)


@dataclass(frozen=True)
class SelectionConfig(_Checked):
    """How an island picks parents. `tournament_size` serves tournament; `offspring_penalty`
    fitness_proportional (weight / (1 + penalty * children)); `descriptors` and `bins`
    map_elites (a descriptor is code_size, bound, or a metric read as a fraction in [0, 1])."""

    strategy: str = "tournament"
    tournament_size: int = 3
    offspring_penalty: float = 0.5
    descriptors: tuple[str, ...] = ("sol_fraction", "code_size")
    bins: int = 4

    def _check(self) -> None:
        _choose("strategy", self.strategy, STRATEGIES)
        _at_least("tournament_size", self.tournament_size, 1)
        _at_least("offspring_penalty", self.offspring_penalty, 0)
        _require(bool(self.descriptors), "descriptors", "needs at least one descriptor")
        for i, name in enumerate(self.descriptors):
            ok = re.fullmatch(_IDENT, name) is not None
            _require(ok, f"descriptors[{i}]", f"{name!r} is not a metric name")
        _unique("descriptors", self.descriptors)
        _at_least("bins", self.bins, 1)


@dataclass(frozen=True)
class MigrationConfig(_Checked):
    """Islands trade their best `rate` members every `interval` island steps along a topology;
    `cross_backend` lets a Triton island send to a CUDA island of the same workload."""

    topology: str = "ring"
    interval: int = 10
    rate: int = 1
    cross_backend: bool = False

    def _check(self) -> None:
        _choose("topology", self.topology, TOPOLOGIES)
        _at_least("interval", self.interval, 1)
        _at_least("rate", self.rate, 0)


@dataclass(frozen=True)
class FitnessConfig(_Checked):
    """What a verdict scores (a named speedup or a user function `pkg.module:function`) and
    the `evo eval` options every evaluation runs with; `samples` None is the protocol's own."""

    metric: str = "speedup_vs_eager"
    device: str = "auto"
    precision: str = "fp32"
    samples: int | None = None
    timeout: float = 180.0
    # A geomean metric's other shapes: indices into the workload's SHAPES, each evaluated
    # besides the default shape; None: every SHAPES entry other than the default.
    shapes: tuple[int, ...] | None = None

    def _check(self) -> None:
        ok = self.metric in METRICS or _DOTTED.fullmatch(self.metric) is not None
        choices = f"choose from {', '.join(METRICS)}, or a pkg.module:function path"
        _require(ok, "metric", f"unknown {self.metric!r} ({choices})")
        if self.shapes is not None:
            geo = self.metric.startswith("geomean_")
            _require(geo, "shapes", f"only a geomean metric uses it, not {self.metric!r}")
            for i, k in enumerate(self.shapes):
                ok = isinstance(k, int) and not isinstance(k, bool) and k >= 0
                _require(ok, f"shapes[{i}]", f"expected an index into SHAPES, got {_show(k)}")
        _choose("device", self.device, DEVICES)
        _choose("precision", self.precision, PRECISIONS)
        _positive("samples", self.samples)
        _positive("timeout", self.timeout)


@dataclass(frozen=True)
class BudgetConfig(_Checked):
    """Limits that stop a run (None: no limit). `per_workload_max_evals` caps each workload."""

    max_evals: int | None = None
    wall_seconds: float | None = None
    llm_dollars: float | None = None
    llm_tokens: int | None = None
    gpu_seconds: float | None = None
    per_workload_max_evals: int | None = None

    def _check(self) -> None:
        for f in dataclasses.fields(self):
            _positive(f.name, getattr(self, f.name))


def _check_model(m: Any, offline_ok: bool) -> None:
    """The checks a model entry and the `llm` section's own model share."""
    prefix, sep, rest = m.spec.partition(":")
    if not (offline_ok and m.spec == "offline") and not (sep and prefix in LLM_PREFIXES):
        raise _invalid("spec", f"unknown {m.spec!r} (choose from {LLM_FORMS})")
    what = {"command": "command", "replay": "run directory"}.get(prefix, "model")
    _require(not sep or bool(rest.strip()), "spec", f"{m.spec!r} names no {what}")
    _at_least("price_in", m.price_in, 0)
    _at_least("price_out", m.price_out, 0)
    _at_least("max_concurrency", m.max_concurrency, 1)
    ok = 0 <= m.temperature <= 2
    _require(ok, "temperature", f"must be within [0, 2], got {m.temperature}")
    _at_least("max_tokens", m.max_tokens, 1)
    url = m.base_url
    ok = url is None or url.startswith(("http://", "https://"))
    _require(ok, "base_url", f"expected an http(s) URL, got {_show(url)}")


@dataclass(frozen=True)
class ModelConfig(_Checked):
    """One model of the registry: how often it is drawn (`weight`, relative), how it is
    called, and its price in USD per million input / output tokens."""

    spec: str = ""
    weight: float = 1.0
    temperature: float = 0.7
    max_tokens: int = 4096
    max_concurrency: int = 4
    base_url: str | None = None
    price_in: float = 0.0
    price_out: float = 0.0

    def _check(self) -> None:
        _require(bool(self.spec), "spec", f"a model needs a spec ({LLM_FORMS[9:]})")
        _check_model(self, offline_ok=False)
        _positive("weight", self.weight)


@dataclass(frozen=True)
class LLMConfig(_Checked):
    """The model behind the operators: offline (no LLM), openai:MODEL, anthropic:MODEL,
    command:CMD (a program reading the prompt on stdin) or replay:RUN_DIR (a run's replies).

    `models` is a registry for an ensemble: each child's model is drawn by weight; with it
    set, `spec` and the call settings here are not used. `--llm SPEC` replaces both with one
    model.
    """

    spec: str = "offline"
    max_concurrency: int = 4
    temperature: float = 0.7
    max_tokens: int = 4096
    base_url: str | None = None
    # USD per million input / output tokens: what a call costs against budgets.llm_dollars
    # (reserved at its worst case before the call, settled at its reported usage after).
    price_in: float = 0.0
    price_out: float = 0.0
    models: tuple[ModelConfig, ...] = ()

    def _check(self) -> None:
        _check_model(self, offline_ok=True)
        specs = tuple(m.spec for m in self.models)
        for i, spec in enumerate(specs):
            _require(spec not in specs[:i], f"models[{i}].spec", f"{spec!r} is listed twice")

    @property
    def active(self) -> bool:
        """Whether a model writes the children (else the offline operator does)."""
        return bool(self.models) or self.spec != "offline"

    def registry(self) -> tuple[ModelConfig, ...]:
        """The models to draw from: `models`, or `spec` with this section's settings."""
        if self.models:
            return self.models
        if self.spec == "offline":
            return ()
        keep = ("max_concurrency", "temperature", "max_tokens", "base_url", "price_in")
        return (ModelConfig(self.spec, **{k: getattr(self, k) for k in keep},
                            price_out=self.price_out),)  # fmt: skip


LLM_OPERATORS = ("mutate", "crossover", "repair", "translate")


@dataclass(frozen=True)
class OperatorsConfig(_Checked):
    """How an LLM island makes a child: relative weights of the operators (drawn among those
    that have what they need: crossover two correct members, repair a failure with attempts
    left, translate a correct kernel on another backend's island), and `repair_attempts`,
    the repairs one failed lineage gets before it is left alone. An island with no seed
    kernel starts from `initial` children written from the reference."""

    mutate: float = 0.6
    crossover: float = 0.2
    repair: float = 0.2
    translate: float = 0.1
    repair_attempts: int = 3

    def _check(self) -> None:
        for name in LLM_OPERATORS:
            _at_least(name, getattr(self, name), 0)
        _require(self.mutate > 0, "mutate", "must be positive: it is the fallback operator")
        _at_least("repair_attempts", self.repair_attempts, 0)

    def weights(self) -> dict[str, float]:
        return {name: getattr(self, name) for name in LLM_OPERATORS}


PROMPT_KEYS = ("initial", "mutate", "repair", "crossover", "translate")


@dataclass(frozen=True)
class PromptsConfig(_Checked):
    """One set of prompt changes (operators.prompting.PromptOverrides).

    `replace`: operator or "system" -> a .j2 template file taking the built-in one's place.
    `append`: operator, "system" or "*" -> text added at the end of that prompt.
    `aux_code`: operator or "*" -> files or folders whose code the prompt shows.
    `steps`: [first, last] island steps the set is in force for (null: every step).
    `dirs`: folders searched for templates (a replacement may {% include %} from them).
    """

    replace: dict[str, str] = field(default_factory=dict)
    append: dict[str, str] = field(default_factory=dict)
    aux_code: dict[str, tuple[str, ...]] = field(default_factory=dict)
    steps: tuple[int, ...] | None = None
    dirs: tuple[str, ...] = ()

    def _check(self) -> None:
        ops = (*PROMPT_KEYS, "system")
        for what, allowed in (("replace", ops), ("append", (*ops, "*")),
                              ("aux_code", (*PROMPT_KEYS, "*"))):  # fmt: skip
            for k in getattr(self, what):
                _choose(f"{what}.{k}", k, allowed)
        for k, path in self.replace.items():
            _require(Path(path).is_file(), f"replace.{k}", f"no such template file: {path}")
        for k, paths in self.aux_code.items():
            for i, path in enumerate(paths):
                ok = Path(path).exists()
                _require(ok, f"aux_code.{k}[{i}]", f"no such file or folder: {path}")
        for i, d in enumerate(self.dirs):
            _require(Path(d).is_dir(), f"dirs[{i}]", f"no such folder: {d}")
        if self.steps is not None:
            ok = len(self.steps) == 2 and 0 <= self.steps[0] <= self.steps[1]
            _require(ok, "steps", f"expected [first, last], got {list(self.steps)}")


@dataclass(frozen=True)
class AnalystConfig(_Checked):
    """The profiler-analysis actor: each island's new bests (up to `max_per_island` of them)
    are profiled on the fitness worker's device (torch.profiler; Nsight Compute where `ncu`
    runs, unless `ncu` is false) and get one recommendation, which steers their lineage's
    next mutations. `llm`: the recommendation's words come from the run's first model
    (else from the rules). Off in deterministic mode: profiles differ from run to run."""

    enabled: bool = True
    ncu: bool | None = None
    max_per_island: int = 3
    llm: bool = False

    def _check(self) -> None:
        _at_least("max_per_island", self.max_per_island, 0)


@dataclass(frozen=True)
class GuardrailsConfig(_Checked):
    """What a candidate may call besides its own kernels. `allow_library_gemm`: cuBLAS GEMMs
    (torch.mm and the like, or Inductor's `extern_kernels.mm` in a compiler seed) pass the
    judge's guardrails; every other PyTorch or library call stays a rejection."""

    allow_library_gemm: bool = False

    def _check(self) -> None:
        pass


SEED_KERNELS = ("builtin", "inductor")


@dataclass(frozen=True)
class RunConfig(_Checked):
    """One experiment: workloads × backends, each pair evolved on `population.islands` islands.

    `run_dir` None is runs/<date>_<time>-<name>; `address` None starts an embedded local Ray.
    """

    name: str = "quickstart"
    workloads: tuple[str, ...] = ()
    kernelbench: KernelBenchConfig | None = None
    backends: tuple[str, ...] = ("triton",)
    population: PopulationConfig = field(default_factory=PopulationConfig)
    selection: SelectionConfig = field(default_factory=SelectionConfig)
    migration: MigrationConfig = field(default_factory=MigrationConfig)
    fitness: FitnessConfig = field(default_factory=FitnessConfig)
    budgets: BudgetConfig = field(default_factory=BudgetConfig)
    llm: LLMConfig = field(default_factory=LLMConfig)
    operators: OperatorsConfig = field(default_factory=OperatorsConfig)
    prompts: tuple[PromptsConfig, ...] = ()
    analyst: AnalystConfig = field(default_factory=AnalystConfig)
    guardrails: GuardrailsConfig = field(default_factory=GuardrailsConfig)
    # Where the islands' first members come from: the builtin workloads' seed kernels, or
    # also torch.compile's own Triton (GPU only). `seed: inductor` is read as this key.
    seed_kernels: str = "builtin"
    seed: int = 0
    deterministic: bool = False  # a fixed order of proposals and verdicts, so a seed repeats
    checkpoint_seconds: float = 60.0
    run_dir: str | None = None
    address: str | None = None

    def _check(self) -> None:
        ok = _NAME.fullmatch(self.name) is not None
        _require(ok, "name", f"{self.name!r} is not a folder name (letters, digits, . _ -)")
        for i, name in enumerate(self.workloads):
            _check_workload(f"workloads[{i}]", name)
        _unique("workloads", self.workloads)
        _require(bool(self.backends), "backends", "needs at least one backend")
        for i, backend in enumerate(self.backends):
            _choose(f"backends[{i}]", backend, tuple(BACKENDS))
        _unique("backends", self.backends)
        rate, cap = self.migration.rate, self.population.cap
        _require(rate <= cap, "migration.rate", f"{rate} exceeds population.cap ({cap})")
        _at_least("seed", self.seed, 0)
        _choose("seed_kernels", self.seed_kernels, SEED_KERNELS)
        _positive("checkpoint_seconds", self.checkpoint_seconds)
        if not self.llm.active:
            _require(
                not self.migration.cross_backend,
                "migration.cross_backend",
                "islands trade across backends through the translate operator, which needs a "
                "model (llm.spec or llm.models)",
            )
            _require(not self.analyst.llm, "analyst.llm", "needs a model (llm.spec or llm.models)")

    def to_dict(self) -> dict:
        """Plain dicts, lists and scalars; `load_config_dict` reads it back to an equal config."""
        return _plain(self)


def _check_workload(key: str, name: str) -> None:
    if name.startswith("builtin:"):
        short = name.removeprefix("builtin:")
        names = builtin_names()
        if short not in names:
            close = difflib.get_close_matches(short, names, n=1)
            hint = f"did you mean 'builtin:{close[0]}'?" if close else f"have: {', '.join(names)}"
            raise _invalid(key, f"no builtin workload {short!r} ({hint})")
    elif name.startswith("kernelbench:"):
        ref = name.removeprefix("kernelbench:").removesuffix(".py")
        _require(bool(_KB_PROBLEM.fullmatch(ref)), key, f"{name!r} is not kernelbench:levelN/ID")
    else:
        _require(
            name.endswith(".py"),
            key,
            f"{name!r} is neither builtin:NAME, kernelbench:levelN/ID nor a path to a .py file",
        )


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


# -- building from plain data


def _unknown_key(cls: type, prefix: str, key: Any) -> ConfigError:
    known = list(_hints(cls))
    path = f"{prefix}{key}"
    close = difflib.get_close_matches(str(key), known, n=1)
    hint = f"did you mean '{prefix}{close[0]}'?" if close else f"known keys: {', '.join(known)}"
    return ConfigError(f"unknown key '{path}' ({hint})", path, None)


def _build(cls: type, data: dict | None, prefix: str = "") -> Any:
    """Section `cls` from a mapping (None: the defaults); `prefix` is its key path plus "."."""
    data = data or {}
    for key in data:
        if key not in _hints(cls):
            raise _unknown_key(cls, prefix, key)
    try:
        return cls(**data)
    except ConfigError as e:
        if not prefix or e.detail is None:
            raise
        raise _invalid(f"{prefix}{e.key}", e.detail) from None


def _from_dict(data: Any) -> RunConfig:
    if not isinstance(data, dict):
        raise ConfigError(f"expected a mapping of keys, got {type(data).__name__}")
    if data.get("seed") in SEED_KERNELS:  # `seed: inductor` names the seed kernels (an
        # explicit seed_kernels, such as `--seed builtin`, wins); the random seed stays 0
        data = {**data, "seed": 0, "seed_kernels": data.get("seed_kernels") or data["seed"]}
    cfg = _build(RunConfig, data)
    kb = cfg.kernelbench
    if not cfg.workloads and not (kb and (kb.levels or kb.problems)):
        raise _invalid(
            "workloads", "none given (list workloads, or kernelbench levels or problems)"
        )
    return cfg


def _with_source(e: ConfigError, source: str) -> ConfigError:
    return ConfigError(f"{source}: {e}", e.key, e.detail)


def load_config_dict(data: dict, source: str = "<dict>") -> RunConfig:
    """A validated RunConfig from plain data (a parsed YAML file); `source` prefixes errors."""
    try:
        return _from_dict(data)
    except ConfigError as e:
        raise _with_source(e, source) from None


def _check_override_key(dotted: Any) -> None:
    """Raise if `dotted` names no config key."""
    if not isinstance(dotted, str):
        raise ConfigError(f"override: key {_show(dotted)} is not a dotted string")
    cls, parts = RunConfig, dotted.split(".")
    for i, part in enumerate(parts):
        prefix = "".join(f"{p}." for p in parts[:i])
        if part not in _hints(cls):
            raise _with_source(_unknown_key(cls, prefix, part), "override")
        if i < len(parts) - 1:
            section, _ = _optional(_hints(cls)[part])
            if not dataclasses.is_dataclass(section):
                detail = f"unknown key '{dotted}' ('{prefix}{part}' has no sub-keys)"
                raise ConfigError(f"override: {detail}", dotted)
            cls = section


def _apply_overrides(data: dict, overrides: dict) -> None:
    for dotted, value in overrides.items():
        *sections, last = dotted.split(".")
        node = data
        for i, part in enumerate(sections):
            if node.get(part) is None:
                node[part] = {}
            if not isinstance(node[part], dict):
                key = ".".join(sections[: i + 1])
                raise _invalid(key, f"expected a mapping, got {_show(node[part])}")
            node = node[part]
        node[last] = value


class _Loader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate keys and reads 1e-3 as a number, not a string."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen = []
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r}", key_node.start_mark
                )
            seen.append(key)
        return super().construct_mapping(node, deep)


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"[-+]?(\d[\d_]*(\.[\d_]*)?|\.\d[\d_]*)[eE][-+]?\d+$"),
    list("-+0123456789."),
)


def _read_text(path: Path) -> str:
    if not path.is_file():
        raise ConfigError(f"config file not found: {path}")
    try:
        return path.read_text()
    except OSError as e:
        raise ConfigError(f"cannot read config file {path}: {e.strerror}") from None


def _parse_yaml(text: str, source: str) -> Any:
    try:
        return yaml.load(text, Loader=_Loader)
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        line = f":{mark.line + 1}" if mark else ""
        raise ConfigError(f"{source}{line}: invalid YAML: {e.problem or e.context}") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"{source}: invalid YAML: {e}") from None


def load_config(path: str | Path | None, overrides: dict | None = None) -> RunConfig:
    """The config in `path` (None: experiments/quickstart.yaml), then `overrides` applied.

    `overrides` maps dotted keys to values ({"budgets.max_evals": 20}); each replaces that key
    of the file and is validated like it. An error an override caused names "override".
    """
    path = Path(path) if path is not None else DEFAULT_CONFIG
    return load_config_text(_read_text(path), str(path), overrides)


def load_config_text(text: str, source: str, overrides: dict | None = None) -> RunConfig:
    """`load_config` of YAML text read from anywhere (a run directory on an object store);
    `source` names it in errors."""
    data = _parse_yaml(text, source)
    data = {} if data is None else data
    overrides = overrides or {}
    for dotted in overrides:
        _check_override_key(dotted)
    try:
        if isinstance(data, dict):
            _apply_overrides(data, overrides)
        return _from_dict(data)
    except ConfigError as e:
        key = e.key or ""
        from_override = any(key == k or key.startswith((f"{k}.", f"{k}[")) for k in overrides)
        raise _with_source(e, "override" if from_override else source) from None


def with_absolute_paths(cfg: RunConfig) -> RunConfig:
    """`cfg` with its file paths (workload files, the KernelBench root, prompt templates, aux
    code and template folders) made absolute, as a run directory's config.yaml keeps them: a
    resume may start from another directory."""

    def ab(path: str) -> str:
        return str(Path(path).resolve())

    workloads = tuple(
        ab(w) if not w.startswith(("builtin:", "kernelbench:")) else w for w in cfg.workloads
    )
    kb = cfg.kernelbench
    if kb is not None and kb.root:
        kb = dataclasses.replace(kb, root=ab(kb.root))
    prompts = tuple(
        dataclasses.replace(
            p,
            replace={k: ab(v) for k, v in p.replace.items()},
            aux_code={k: tuple(ab(x) for x in v) for k, v in p.aux_code.items()},
            dirs=tuple(ab(d) for d in p.dirs),
        )
        for p in cfg.prompts
    )
    return dataclasses.replace(cfg, workloads=workloads, kernelbench=kb, prompts=prompts)


def config_yaml(cfg: RunConfig) -> str:
    """`cfg` as YAML (the resolved config, as run); `load_config_text` reads it back equal."""
    text = yaml.safe_dump(cfg.to_dict(), sort_keys=False, default_flow_style=None)
    return f"# Resolved config of run '{cfg.name}', as run.\n" + text


def dump_config(cfg: RunConfig, path: str | Path) -> None:
    Path(path).write_text(config_yaml(cfg))


def default_run_dir(cfg: RunConfig, now: datetime | None = None) -> str:
    """runs/<YYYY-MM-DD_HHMMSS>-<name>, relative to where the run starts (see
    `reserve_run_dir` for the suffix when two runs start in the same second)."""
    return f"runs/{(now or datetime.now()).strftime('%Y-%m-%d_%H%M%S')}-{cfg.name}"


def reserve_run_dir(cfg: RunConfig, now: datetime | None = None) -> str:
    """A default run directory that no other run holds: created here, atomically, with `-2`,
    `-3`, ... after the name when another run took it in the same second."""
    import os

    base = default_run_dir(cfg, now)
    os.makedirs(os.path.dirname(base), exist_ok=True)
    for k in range(1, 1000):
        path = base if k == 1 else f"{base}-{k}"
        try:
            os.mkdir(path)
            return path
        except FileExistsError:
            continue
    raise EvoError(f"{base}: a thousand runs started in the same second; pass --run-dir")
