"""Workloads: loading KernelBench-format problem files and resolving workload names.

A name is `builtin:NAME` (a file under experiments/workloads/), `kernelbench:levelN/ID` (a
problem under KERNELBENCH_ROOT or --kernelbench) or a path to a .py file. "Loading" imports
the file and calls `get_init_inputs()`; no model is built and no input is made until the
workload is evaluated.

Size constants may be overridden. An override is applied right after each top-level statement
that binds the name, so constants derived from it (`bias_shape = (out_features,)`) follow.
"""

from __future__ import annotations

import ast
import difflib
import importlib.util
import itertools
import os
import re
import sys
import types
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import experiments
from fitness.errors import EvoError

BUILTIN_DIR: Path = Path(experiments.__file__).parent / "workloads"
KERNELBENCH_ENV = "KERNELBENCH_ROOT"
REQUIRED_NAMES = ("Model", "get_inputs", "get_init_inputs")

_PLAIN_SCALARS = (int, float, bool, str)
_LEVEL_DIR = re.compile(r"level(\d+)")
_PROBLEM_FILE = re.compile(r"(\d+)_.*\.py")
_module_counter = itertools.count()


@dataclass(frozen=True)
class Workload:
    """A loaded workload file: its source, size constants (after overrides) and shape list."""

    name: str
    path: Path
    source: str
    constants: dict  # public top-level names with int/float/bool/str/tuple values, any case
    shapes: tuple
    overrides: dict
    init_inputs: tuple
    seed_path: Path | None
    level: int | None

    def __hash__(self) -> int:
        return hash((self.name, self.path, repr(sorted(self.overrides.items()))))

    @property
    def short_name(self) -> str:
        """The name without its `builtin:`/`kernelbench:` prefix; a plain file's stem."""
        for prefix in ("builtin:", "kernelbench:"):
            if self.name.startswith(prefix):
                return self.name[len(prefix) :]
        return self.path.stem

    def with_overrides(self, overrides: dict) -> Workload:
        """Reload the file with these overrides of the module defaults (they replace, not add to,
        `self.overrides`)."""
        return load_workload(self.path, name=self.name, overrides=overrides, level=self.level)


@dataclass(frozen=True)
class Problem:
    """One KernelBench problem file, e.g. level 2, number 76, name "76_Gemm_Add_ReLU"."""

    level: int
    number: int
    name: str
    path: Path

    @property
    def key(self) -> str:
        return f"level{self.level}/{self.name}"


def _is_plain(value: Any) -> bool:
    if isinstance(value, _PLAIN_SCALARS):
        return True
    return isinstance(value, tuple) and all(_is_plain(v) for v in value)


def _normalize_override(value: Any) -> Any:
    """Lists become tuples (YAML has no tuples; KernelBench sizes are tuples)."""
    if isinstance(value, list | tuple):
        return tuple(_normalize_override(v) for v in value)
    return value


def _bound_names(node: ast.AST) -> set[str]:
    """Names a top-level statement binds in the module namespace (assignments, loop targets)."""
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.Lambda):
        return set()
    names = set()
    if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
        names.add(node.id)
    for child in ast.iter_child_nodes(node):
        names |= _bound_names(child)
    return names


def _assigned_constant_names(tree: ast.Module) -> set[str]:
    """Public names bound by top-level statements other than imports, defs and classes."""
    names = set()
    for stmt in tree.body:
        if not isinstance(stmt, ast.Import | ast.ImportFrom):
            names |= _bound_names(stmt)
    return {n for n in names if not n.startswith("_")}


def _inject_overrides(tree: ast.Module, keys: Iterable[str]) -> ast.Module:
    """After each top-level statement binding an overridden name, rebind it to the override."""
    keys = set(keys)
    body: list[ast.stmt] = []
    for stmt in tree.body:
        body.append(stmt)
        if isinstance(stmt, ast.Import | ast.ImportFrom):
            continue
        for key in sorted(_bound_names(stmt) & keys):
            call = ast.Call(
                func=ast.Name("__evo_override__", ast.Load()),
                args=[ast.Constant(key), ast.Name(key, ast.Load())],
                keywords=[],
            )
            body.append(ast.copy_location(ast.Assign([ast.Name(key, ast.Store())], call), stmt))
    tree.body = body
    return ast.fix_missing_locations(tree)


def _missing_package_message(path: Path, exc: ModuleNotFoundError) -> str:
    package = (exc.name or "").split(".")[0]
    if not package:
        return f"importing {path} failed: {_one_line(exc)}"
    if package == "transformers":
        return (
            f"{path}: KernelBench level 4 needs the 'transformers' package "
            "(pip install transformers)"
        )
    return f"{path} imports '{package}', which is not installed (pip install {package})"


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")


def _parse(path: Path) -> tuple[str, ast.Module]:
    try:
        source = path.read_text()
    except OSError as exc:
        raise EvoError(f"cannot read workload file {path}: {exc.strerror or exc}") from exc
    try:
        return source, ast.parse(source, filename=str(path))
    except SyntaxError as exc:
        raise EvoError(f"{path}:{exc.lineno}: syntax error: {exc.msg}") from exc


def import_workload_module(
    path: Path, overrides: dict | None = None, module_name: str | None = None
) -> types.ModuleType:
    """Import a workload file under a module name of its own, with overrides of its constants.

    Checks that Model, get_inputs and get_init_inputs exist; builds nothing.
    """
    path = Path(path).resolve()
    return _import_parsed(path, *_parse(path), overrides or {}, module_name)


def _import_parsed(
    path: Path, source: str, tree: ast.Module, overrides: dict, module_name: str | None
) -> types.ModuleType:
    overrides = {k: _normalize_override(v) for k, v in overrides.items()}
    assigned = _assigned_constant_names(tree)
    for key in overrides:
        if key not in assigned:
            raise EvoError(f"override '{key}' is not a module-level constant of {path}")
    if overrides:
        tree = _inject_overrides(tree, overrides)
    code = compile(tree, str(path), "exec", dont_inherit=True)

    if module_name is None:
        stem = re.sub(r"\W", "_", path.stem)
        module_name = f"evo_workload_{stem}_{next(_module_counter)}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    defaults: dict[str, Any] = {}

    def record_override(key: str, default: Any) -> Any:
        defaults[key] = default
        return overrides[key]

    module.__dict__["__evo_override__"] = record_override
    sys.modules[module_name] = module
    try:
        exec(code, module.__dict__)
        for key, default in defaults.items():
            if not _is_plain(default):
                raise EvoError(
                    f"override '{key}' of {path}: its default, a {type(default).__name__}, "
                    "is not a constant (int, float, bool, str or tuple)"
                )
        for required in REQUIRED_NAMES:
            if not hasattr(module, required):
                raise EvoError(f"workload file {path} does not define {required}")
    except EvoError:
        sys.modules.pop(module_name, None)
        raise
    except ModuleNotFoundError as exc:
        sys.modules.pop(module_name, None)
        raise EvoError(_missing_package_message(path, exc)) from exc
    except Exception as exc:
        sys.modules.pop(module_name, None)
        raise EvoError(f"importing {path} failed: {_one_line(exc)}") from exc
    finally:
        module.__dict__.pop("__evo_override__", None)
    return module


def _module_constants(module: types.ModuleType, names: set[str]) -> dict:
    return {n: getattr(module, n) for n in sorted(names) if _is_plain(getattr(module, n, None))}


def _shapes(module: types.ModuleType, constants: dict, path: Path) -> tuple:
    shapes = getattr(module, "SHAPES", None)
    if shapes is None:
        return ()
    if not isinstance(shapes, list | tuple) or not all(isinstance(s, dict) for s in shapes):
        raise EvoError(f"SHAPES in {path} must be a list of dicts of constant overrides")
    for shape in shapes:
        for key in shape:
            if key not in constants:
                raise EvoError(f"SHAPES in {path} overrides '{key}', which is not a constant")
    return tuple(dict(s) for s in shapes)


def _summarize(value: Any) -> Any:
    """A value as it is if plain, else a short, deterministic description."""
    if value is None or _is_plain(value):
        return value
    if isinstance(value, list | tuple) and all(v is None or _is_plain(v) for v in value):
        return tuple(value)
    shape, dtype = getattr(value, "shape", None), getattr(value, "dtype", None)
    if shape is not None and dtype is not None:
        return f"{type(value).__name__}(shape={tuple(shape)}, dtype={dtype})"
    text = repr(value)
    if len(text) > 80 or "\n" in text or " at 0x" in text:
        return f"<{type(value).__name__}>"
    return text


def _init_inputs(module: types.ModuleType, path: Path) -> tuple:
    try:
        values = module.get_init_inputs()
    except Exception as exc:
        raise EvoError(f"get_init_inputs() of {path} failed: {_one_line(exc)}") from exc
    if not isinstance(values, list | tuple):
        values = [values]
    return tuple(_summarize(v) for v in values)


def load_workload(
    path: Path | str,
    name: str | None = None,
    overrides: dict | None = None,
    level: int | None = None,
) -> Workload:
    """Import a workload file and call get_init_inputs(); neither Model nor inputs are built."""
    path = Path(path).resolve()
    overrides = {k: _normalize_override(v) for k, v in (overrides or {}).items()}
    source, tree = _parse(path)
    module = _import_parsed(path, source, tree, overrides, None)
    try:
        constants = _module_constants(module, _assigned_constant_names(tree))
        shapes = _shapes(module, constants, path)
        init_inputs = _init_inputs(module, path)
    finally:
        sys.modules.pop(module.__name__, None)
    seed = BUILTIN_DIR / "seeds" / f"{path.stem}_triton.py"
    is_builtin = path.parent == BUILTIN_DIR.resolve()
    return Workload(
        name=name or str(path),
        path=path,
        source=source,
        constants=constants,
        shapes=shapes,
        overrides=overrides,
        init_inputs=init_inputs,
        seed_path=seed if is_builtin and seed.is_file() else None,
        level=level,
    )


def builtin_names() -> list[str]:
    """Names of the builtin workloads (files in experiments/workloads/), sorted."""
    if not BUILTIN_DIR.is_dir():
        return []
    return sorted(p.stem for p in BUILTIN_DIR.glob("*.py") if not p.name.startswith("_"))


class KernelBenchIndex:
    """The problem files of a KernelBench checkout, by level and number."""

    def __init__(self, root: str | Path):
        self.root = Path(root).expanduser().resolve()
        if not self.root.is_dir():
            raise EvoError(f"KernelBench root {self.root} is not a folder")
        inner = self.root / "KernelBench"
        if self._level_dirs(inner):
            self.problems_dir = inner
        elif self._level_dirs(self.root):
            self.problems_dir = self.root
        else:
            raise EvoError(
                f"KernelBench root {self.root} has no levelN folders "
                "(expected ROOT/KernelBench/level1 or ROOT/level1)"
            )
        self._problems = self._scan()

    @staticmethod
    def _level_dirs(folder: Path) -> dict[int, Path]:
        if not folder.is_dir():
            return {}
        found = {}
        for child in folder.iterdir():
            match = _LEVEL_DIR.fullmatch(child.name)
            if match and child.is_dir():
                found[int(match.group(1))] = child
        return found

    def _scan(self) -> list[Problem]:
        problems = []
        for level, folder in self._level_dirs(self.problems_dir).items():
            for file in folder.glob("*.py"):
                match = _PROBLEM_FILE.fullmatch(file.name)
                if match:
                    problems.append(Problem(level, int(match.group(1)), file.stem, file))
        return sorted(problems, key=lambda p: (p.level, p.number, p.name))

    def problems(self, levels: Iterable[int] | None = None) -> list[Problem]:
        """Problems sorted by level and number, optionally only those of the given levels."""
        if levels is None:
            return list(self._problems)
        wanted = set(levels)
        return [p for p in self._problems if p.level in wanted]

    def resolve(self, ref: str) -> Problem:
        """Find "level2/76", "level2/76_Gemm_Add_ReLU" or "level2/76_Gemm_Add_ReLU.py"."""
        ref = ref.removeprefix("kernelbench:").strip().removesuffix(".py")
        level_part, _, problem_part = ref.partition("/")
        match = _LEVEL_DIR.fullmatch(level_part)
        if not match or not problem_part:
            raise EvoError(
                f"KernelBench problem '{ref}' is not of the form levelN/ID or levelN/ID_Name"
            )
        candidates = self.problems([int(match.group(1))])
        if problem_part.isdigit():
            found = [p for p in candidates if p.number == int(problem_part)]
        else:
            found = [p for p in candidates if p.name == problem_part]
        if len(found) > 1:
            names = ", ".join(p.key for p in found)
            raise EvoError(f"KernelBench problem '{ref}' is ambiguous under {self.root}: {names}")
        if not found:
            close = difflib.get_close_matches(ref, [p.key for p in candidates], n=3)
            hint = f" (did you mean {', '.join(close)}?)" if close else ""
            raise EvoError(f"no KernelBench problem '{ref}' under {self.problems_dir}{hint}")
        return found[0]


def _kernelbench_root(kernelbench_root: str | Path | None) -> Path | None:
    if kernelbench_root:
        return Path(kernelbench_root)
    env = os.environ.get(KERNELBENCH_ENV)
    return Path(env) if env else None


def resolve_workload(
    name: str, kernelbench_root: str | Path | None = None, overrides: dict | None = None
) -> Workload:
    """Load a workload by name: builtin:NAME, kernelbench:levelN/ID[_Name][.py], or a path."""
    if name.startswith("builtin:"):
        short = name.removeprefix("builtin:").removesuffix(".py")
        names = builtin_names()
        if short not in names:
            available = ", ".join(names) or "none"
            raise EvoError(f"unknown builtin workload '{short}'; available: {available}")
        return load_workload(BUILTIN_DIR / f"{short}.py", f"builtin:{short}", overrides)
    if name.startswith("kernelbench:"):
        root = _kernelbench_root(kernelbench_root)
        if root is None:
            raise EvoError(
                f"workload '{name}' needs a KernelBench checkout: "
                f"set {KERNELBENCH_ENV} or pass --kernelbench PATH"
            )
        problem = KernelBenchIndex(root).resolve(name)
        return load_workload(problem.path, f"kernelbench:{problem.key}", overrides, problem.level)
    path = Path(name).expanduser()
    if path.suffix == ".py" and path.is_file():
        return load_workload(path, overrides=overrides)
    raise EvoError(
        f"workload '{name}' is neither builtin:NAME, kernelbench:levelN/ID nor an existing .py file"
    )


def list_workloads(kernelbench_root: str | Path | None = None) -> list[str]:
    """All workload names: builtin ones, plus KernelBench ones if a root is given or set."""
    names = [f"builtin:{n}" for n in builtin_names()]
    root = _kernelbench_root(kernelbench_root)
    if root is not None:
        names += [f"kernelbench:{p.key}" for p in KernelBenchIndex(root).problems()]
    return names
