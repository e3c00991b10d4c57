"""Prompts for the LLM operators, rendered from the Jinja2 files in `operators/prompts/`.

`render(operator, backend, ctx)` turns a `PromptContext` (the reference, parents, verdicts,
errors, device facts, guardrails, ...) into a system and a user prompt. Prose lives in the
templates; this module checks that the parts an operator needs are present, shapes the data
for the templates (truncated error logs, guardrails in force, auxiliary files) and applies an
experiment's `PromptOverrides`: template replacements, appended text and auxiliary code, for
every operator or some, optionally only at some steps.

Templates render with `StrictUndefined`, so a misspelt variable fails loudly instead of
leaving a hole in the prompt.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Container, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import jinja2

from backends import BACKENDS, Backend
from fitness.errors import EvoError

PROMPTS_DIR = Path(__file__).parent / "prompts"
OPERATORS = ("initial", "mutate", "repair", "crossover", "translate")
EDIT_FORMATS = ("rewrite", "diff")
SYSTEM = "system"  # the override key of the system prompt
ALL = "*"  # the override key meaning every operator

# What each operator cannot do without (attribute of PromptContext, what it is for).
_REQUIRED: dict[str, tuple[tuple[str, str], ...]] = {
    "initial": (("reference", "the PyTorch reference"),),
    "mutate": (("reference", "the PyTorch reference"), ("parent", "the kernel to improve")),
    "repair": (
        ("reference", "the PyTorch reference"),
        ("parent", "the failed candidate"),
        ("error", "the failed candidate's error output"),
    ),
    "crossover": (
        ("reference", "the PyTorch reference"),
        ("parent", "the first parent"),
        ("second_parent", "the second parent"),
    ),
    "translate": (
        ("reference", "the PyTorch reference"),
        ("parent", "the kernel to port"),
        ("source_backend", "the backend the kernel is written in"),
    ),
}
# Operators with no parent to diff against always ask for a full file.
_REWRITE_ONLY = frozenset({"initial", "translate"})
GUARDRAIL_KEYS = ("enabled", "required", "banned", "allow_torch_ops", "allow_library_gemm")
_AUX_LANG = {
    ".py": "python",
    ".cu": "cuda",
    ".cuh": "cuda",
    ".cpp": "cpp",
    ".h": "cpp",
    ".hpp": "cpp",
}
_AUX_SUFFIXES = (".py", ".cu", ".cuh", ".cpp", ".h", ".hpp", ".md", ".txt")
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


class PromptError(EvoError):
    """A prompt that cannot be built: a missing part, an unknown operator, a bad override."""


@dataclass(frozen=True)
class Verdict:
    """The parts of an `EvalResult` a prompt shows about a candidate."""

    status: str
    reason: str = ""
    runtime_ms: float | None = None
    speedup_vs_eager: float | None = None
    speedup_vs_compile: float | None = None
    sol_fraction: float | None = None
    precision: str = ""

    @classmethod
    def of(cls, value: Any) -> Verdict:
        """A Verdict from an EvalResult, a verdict dict (`evo eval --json`) or a Verdict."""
        if isinstance(value, Verdict):
            return value
        get = value.get if isinstance(value, Mapping) else lambda k, d=None: getattr(value, k, d)
        if get("status") is None:
            raise PromptError(f"a verdict needs a status, got {value!r}")
        kwargs = {f.name: get(f.name) for f in dataclasses.fields(cls)}
        kwargs["status"] = str(kwargs["status"])
        kwargs["reason"] = str(kwargs["reason"] or "")
        kwargs["precision"] = str(kwargs["precision"] or "")
        return cls(**kwargs)


@dataclass(frozen=True)
class CodeSample:
    """A candidate shown in a prompt: its source, its verdict and a short label."""

    source: str
    verdict: Verdict | None = None
    label: str = ""

    def __post_init__(self) -> None:
        if self.verdict is not None and not isinstance(self.verdict, Verdict):
            object.__setattr__(self, "verdict", Verdict.of(self.verdict))


@dataclass(frozen=True)
class DeviceFacts:
    """What a kernel author wants to know about the GPU; units are SI (bytes, FLOP/s)."""

    name: str
    compute_capability: str = ""
    sm_count: int | None = None
    l2_bytes: int | None = None
    peak_flops: float | None = None  # for the precision policy in force
    peak_bandwidth: float | None = None  # DRAM bytes/s


@dataclass
class PromptContext:
    """Everything an operator's prompt may show; parts left empty do not appear.

    `parent` is the kernel to change (mutate, the failed one for repair, the first of two for
    crossover, the one to port for translate). `guardrails` is a GuardrailConfig or its dict;
    None means the strict default. `error` is cut to `max_error_lines` lines.
    """

    reference: str
    workload: str = ""
    step: int | None = None
    precision: str = "fp32"
    parent: CodeSample | None = None
    second_parent: CodeSample | None = None
    inspirations: Sequence[CodeSample] = ()
    error: str = ""
    recommendation: str = ""
    device: DeviceFacts | None = None
    guardrails: Any = None
    edit_format: str = "rewrite"
    source_backend: str = ""
    aux_code: Sequence[tuple[str, str]] = ()
    max_error_lines: int = 60

    def __post_init__(self) -> None:
        for name in ("parent", "second_parent"):
            value = getattr(self, name)
            if isinstance(value, str):
                setattr(self, name, CodeSample(value))
        self.inspirations = tuple(
            CodeSample(s) if isinstance(s, str) else s for s in self.inspirations
        )
        if isinstance(self.device, Mapping):
            self.device = DeviceFacts(**self.device)
        self.aux_code = tuple((str(p), t) for p, t in self.aux_code)


@dataclass(frozen=True)
class PromptOverrides:
    """An experiment's changes to the prompts.

    `replace` maps an operator (or "system") to a template that takes the place of the
    built-in one: template text, or a path to a `.j2` file (a `Path`, or a one-line string
    ending in `.j2`). `append` maps an operator, "system" or "*" (every operator's user
    prompt) to plain text added at the end. `aux_code` maps an operator or "*" to (path,
    text) pairs shown as auxiliary code. `steps` limits the whole set to the steps it
    contains (a range, a set...); a context without a step then gets none of it. `dirs` are
    folders searched for templates before the built-in ones.
    """

    replace: Mapping[str, str | Path] = field(default_factory=dict)
    append: Mapping[str, str] = field(default_factory=dict)
    aux_code: Mapping[str, Sequence[tuple[str, str]]] = field(default_factory=dict)
    steps: Container[int] | None = None
    dirs: Sequence[str | Path] = ()

    def __post_init__(self) -> None:
        keys = {
            "replace": (set(self.replace), {*OPERATORS, SYSTEM}),
            "append": (set(self.append), {*OPERATORS, SYSTEM, ALL}),
            "aux_code": (set(self.aux_code), {*OPERATORS, ALL}),
        }
        for what, (given, allowed) in keys.items():
            for key in sorted(given - allowed):
                choices = ", ".join(sorted(allowed))
                raise PromptError(f"prompt overrides: unknown {what} key {key!r} ({choices})")

    def applies(self, step: int | None) -> bool:
        """Whether this set is in force at `step`."""
        return self.steps is None or (step is not None and step in self.steps)


@dataclass(frozen=True)
class RenderedPrompt:
    """A rendered prompt; `template_names` says what it was built from (for the lineage)."""

    system: str
    user: str
    template_names: tuple[str, ...]
    edit_format: str = "rewrite"


def render(
    operator: str,
    backend: str,
    ctx: PromptContext,
    overrides: PromptOverrides | Sequence[PromptOverrides] | None = None,
) -> RenderedPrompt:
    """The system and user prompt of `operator` for a `backend` candidate.

    Raises PromptError when the operator, backend or edit format is unknown, or a part the
    operator needs (a parent for mutate, an error for repair, ...) is missing.
    """
    target = _check(operator, backend, ctx)
    edit_format = "rewrite" if operator in _REWRITE_ONLY else ctx.edit_format
    active = _active(overrides, ctx.step)
    dirs = tuple(str(Path(d)) for o in active for d in o.dirs)
    env = _environment(dirs)
    source_backend = BACKENDS[ctx.source_backend] if operator == "translate" else None
    variables = {
        "ctx": ctx,
        "operator": operator,
        "backend": target,
        "source_backend": source_backend,
        "edit_format": edit_format,
        "guard": guardrails_in_force(ctx.guardrails, ctx.precision, target),
        "error": truncate_log(ctx.error, ctx.max_error_lines),
        "aux_code": _aux_items(ctx, operator, active),
    }
    names = []
    texts = []
    for part, default in ((SYSTEM, "system.j2"), (operator, f"{operator}.j2")):
        template, name = _template(env, part, default, active)
        names.append(name)
        try:
            text = template.render(variables)
        except jinja2.TemplateError as e:
            raise PromptError(f"template {name}: {e}") from None
        for key in (ALL, part) if part != SYSTEM else (SYSTEM,):
            for o in active:
                if key in o.append and o.append[key].strip():
                    text = text.rstrip("\n") + "\n\n" + o.append[key].strip("\n") + "\n"
                    names.append(f"append:{key}")
        texts.append(text.strip("\n") + "\n")
    return RenderedPrompt(texts[0], texts[1], tuple(names), edit_format)


def guardrails_in_force(config: Any, precision: str, backend: Backend) -> dict[str, Any]:
    """The guardrails a candidate faces, as plain data for the templates to put in words.

    `config` is a GuardrailConfig, a dict of its fields, or None (the strict default).
    """
    if config is None:
        values: dict[str, Any] = {}
    elif isinstance(config, Mapping):
        values = dict(config)
    elif dataclasses.is_dataclass(config):
        values = {k: getattr(config, k) for k in GUARDRAIL_KEYS if hasattr(config, k)}
    else:
        raise PromptError(f"guardrails: expected a GuardrailConfig or a dict, got {config!r}")
    unknown = sorted(set(values) - set(GUARDRAIL_KEYS))
    if unknown:
        raise PromptError(f"guardrails: unknown key {unknown[0]!r} ({', '.join(GUARDRAIL_KEYS)})")
    return {
        "enabled": bool(values.get("enabled", True)),
        "required": tuple(values.get("required", ())),
        "banned": tuple(values.get("banned", ())),
        "allow_torch_ops": bool(values.get("allow_torch_ops", False)),
        "precision": precision,
        "backend_required": tuple(what for _, what in backend.required),
    }


def truncate_log(text: str, max_lines: int = 60, head: int = 10, width: int = 300) -> str:
    """An error log cut to at most `max_lines` lines: the first `head` (where compilers put
    the first error) and the last ones (where tracebacks end), with a marker between."""
    lines = [_clip(line, width) for line in _ANSI.sub("", text).strip("\n").splitlines()]
    if len(lines) <= max_lines:
        return "\n".join(lines)
    head = min(head, max_lines // 2)
    tail = max_lines - head - 1
    cut = len(lines) - head - tail
    return "\n".join([*lines[:head], f"[... {cut} lines cut ...]", *lines[-tail:]])


def load_aux_code(paths: Iterable[str | Path]) -> list[tuple[str, str]]:
    """(path, text) of each named file, and of the source files under each named folder."""
    out = []
    for p in map(Path, paths):
        if p.is_dir():
            files = sorted(
                f
                for f in p.rglob("*")
                if f.is_file()
                and f.suffix in _AUX_SUFFIXES
                and not any(part.startswith(".") or part == "__pycache__" for part in f.parts)
            )
        elif p.is_file():
            files = [p]
        else:
            raise PromptError(f"auxiliary code: no such file or folder {str(p)!r}")
        out += [(str(f), f.read_text(encoding="utf-8", errors="replace")) for f in files]
    return out


def fence(text: str, lang: str = "") -> str:
    """`text` in a fenced block whose fence is longer than any backtick run inside it."""
    longest = max((len(m) for m in re.findall(r"`{3,}", text)), default=0)
    ticks = "`" * max(3, longest + 1)
    return f"{ticks}{lang}\n{text.strip(chr(10))}\n{ticks}"


def _check(operator: str, backend: str, ctx: PromptContext) -> Backend:
    if operator not in _REQUIRED:
        raise PromptError(f"unknown operator {operator!r} (choose from {', '.join(OPERATORS)})")
    if backend not in BACKENDS:
        raise PromptError(f"unknown backend {backend!r} (choose from {', '.join(BACKENDS)})")
    if ctx.edit_format not in EDIT_FORMATS:
        choices = ", ".join(EDIT_FORMATS)
        raise PromptError(f"unknown edit format {ctx.edit_format!r} (choose from {choices})")
    for name, what in _REQUIRED[operator]:
        value = getattr(ctx, name)
        if value is None or (isinstance(value, str) and not value.strip()):
            raise PromptError(f"{operator} needs ctx.{name} ({what}), which is empty")
    if operator == "translate":
        if ctx.source_backend not in BACKENDS:
            raise PromptError(f"translate: unknown source backend {ctx.source_backend!r}")
        if ctx.source_backend == backend:
            raise PromptError(f"translate: source and target backend are both {backend!r}")
    return BACKENDS[backend]


def _active(
    overrides: PromptOverrides | Sequence[PromptOverrides] | None, step: int | None
) -> list[PromptOverrides]:
    if overrides is None:
        return []
    if isinstance(overrides, PromptOverrides):
        overrides = [overrides]
    return [o for o in overrides if o.applies(step)]


@lru_cache(maxsize=32)
def _environment(dirs: tuple[str, ...]) -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader([*dirs, str(PROMPTS_DIR)]),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,
    )
    env.filters["fence"] = fence
    env.filters["si"] = _si
    env.filters["sections"] = _sections
    return env


def _template(
    env: jinja2.Environment, part: str, default: str, active: list[PromptOverrides]
) -> tuple[jinja2.Template, str]:
    """The template for `part`: the last active replacement, else the built-in file."""
    chosen: str | Path | None = None
    for o in active:
        chosen = o.replace.get(part, chosen)
    try:
        if chosen is None:
            return env.get_template(default), default
        if isinstance(chosen, Path) or ("\n" not in chosen and chosen.endswith(".j2")):
            path = Path(chosen)
            if not path.is_file():
                raise PromptError(f"prompt override for {part!r}: no such file {str(path)!r}")
            return env.from_string(path.read_text(encoding="utf-8")), str(path)
        return env.from_string(chosen), f"override:{part}"
    except jinja2.TemplateError as e:
        raise PromptError(f"prompt template for {part!r}: {e}") from None


def _aux_items(
    ctx: PromptContext, operator: str, active: list[PromptOverrides]
) -> list[dict[str, str]]:
    pairs = list(ctx.aux_code)
    for o in active:
        for key in (ALL, operator):
            pairs += [(str(p), t) for p, t in o.aux_code.get(key, ())]
    return [
        {"path": p, "text": t, "lang": _AUX_LANG.get(Path(p).suffix, "")}
        for p, t in pairs
        if t.strip()
    ]


def _sections(parts: Iterable[str]) -> str:
    """The non-empty parts, trimmed, one blank line apart (templates stay free of spacing)."""
    return "\n\n".join(p.strip() for p in parts if p.strip())


def _clip(line: str, width: int) -> str:
    line = line.rstrip()
    return line if len(line) <= width else line[:width] + " [...]"


def _si(value: float, unit: str = "") -> str:
    """67e12, "FLOP/s" -> "67 TFLOP/s"; 52428800, "B" (binary for bytes) -> "50 MiB"."""
    if unit == "B":
        steps, base = ("B", "KiB", "MiB", "GiB", "TiB"), 1024.0
    else:
        steps, base = tuple(p + unit for p in ("", "k", "M", "G", "T", "P")), 1000.0
    i = 0
    while abs(value) >= base and i < len(steps) - 1:
        value /= base
        i += 1
    return f"{value:.3g} {steps[i]}"
