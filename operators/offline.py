"""The offline parameter operator: launch and tiling parameters mutated without an LLM.

A Triton candidate's tunables are the integer literals bound to names such as `BLOCK_M`,
`BLOCK_SIZE`, `GROUP_M`, `num_warps` or `num_stages`. They are found with the `ast` module in
three places: keyword arguments of calls (`kernel[grid](..., BLOCK_M=128, num_warps=8)`,
`dict(BLOCK_M=128)`, `triton.Config({...}, num_stages=3)`), dict literals with string keys
(`{"BLOCK_M": 128}`) and simple assignments (`BLOCK_SIZE = 1024`, also `BLOCK_M, BLOCK_N =
64, 64`), at any level. Mutation moves a few of them one step within their valid set;
crossover copies whole parameter sets (a call's, a dict's or a function's tunables) from
another candidate.

A branch taken only under the Triton interpreter (`if os.environ.get("TRITON_INTERPRET") ==
"1": ...`, its `else`, and what follows an interpreter branch that returns) binds the tunables
of one target only. On a GPU run the operator leaves the interpreter's tunables alone, and on
an interpreter run the GPU's: a change there would re-time the parent under a new name.

Left out on purpose: values computed at run time (`triton.next_power_of_2(n_cols)`,
`block // 256`), kernel argument defaults and tunables named otherwise. A candidate whose
tunables are all computed has nothing to mutate here: the operator returns None for it.
"""

from __future__ import annotations

import ast
import random
import re
from collections.abc import Iterable
from dataclasses import dataclass

_BLOCK_NAME = re.compile(r"BLOCK(_\w+)?|BLOCK_SIZE\w*|TILE_\w+")
_INDUCTOR_BLOCK = re.compile(r"[XYZ]BLOCK|R\d*_BLOCK|RBLOCK")  # Inductor's (compiler seeds)
_GROUP_NAME = re.compile(r"GROUP(_SIZE)?_\w*|GROUP_M")
_WARPS_NAMES = frozenset({"num_warps", "NUM_WARPS"})
_STAGES_NAMES = frozenset({"num_stages", "NUM_STAGES"})
_DOT_DIM = re.compile(r"_[MNK]$")  # tiles that feed tl.dot, which needs every dim >= 16
_NEWLINE = re.compile(r"\r\n|\r|\n")  # the line breaks Python's tokenizer counts

WARPS = (1, 2, 4, 8, 16)
STAGES = (1, 2, 3, 4, 5)
GROUPS = (1, 2, 4, 8, 16)
DOT_BLOCKS = tuple(2**i for i in range(4, 9))  # 16 .. 256
FLAT_BLOCKS = tuple(2**i for i in range(5, 14))  # 32 .. 8192
INDUCTOR_BLOCKS = tuple(2**i for i in range(0, 14))  # 1 .. 8192
# Inductor drops a kernel's masks where numel is a multiple of its largest block for that
# dimension (TRITON_MAX_BLOCK: X 4096, Y and Z 1024): a block above it would run past the end.
INDUCTOR_MAX_BLOCK = {"X": 4096, "Y": 1024, "Z": 1024}


@dataclass(frozen=True)
class Param:
    """One tunable integer literal of a source and where it sits.

    `scope` numbers the call, dict literal or function (module) body that binds it: params
    with the same name and scope move together in a mutation, and a crossover takes a
    scope's params as one set.
    """

    name: str
    value: int
    start: int
    end: int
    kind: str  # "block" | "warps" | "stages" | "group"
    scope: int = 0
    target: str | None = None  # "gpu" | "interpreter" when only that target runs it


def param_kind(name: str) -> str | None:
    """The kind of a tunable name, or None when the name is not tunable."""
    if name in _WARPS_NAMES:
        return "warps"
    if name in _STAGES_NAMES:
        return "stages"
    if _GROUP_NAME.fullmatch(name):
        return "group"
    if _BLOCK_NAME.fullmatch(name) or _INDUCTOR_BLOCK.fullmatch(name):
        return "block"
    return None


def valid_values(param: Param) -> tuple[int, ...]:
    """The values `param` may take, ascending.

    Tiles named *_M, *_N or *_K feed tl.dot: powers of two in [16, 256]. Inductor's blocks
    (XBLOCK, R0_BLOCK, ...) are powers of two in [1, 8192] (XBLOCK at most 4096, YBLOCK and
    ZBLOCK 1024: Inductor's own limits, which its mask-free kernels rely on), other block
    sizes in [32, 8192], both never below an eighth of the value in the source.
    """
    if param.kind == "warps":
        return WARPS
    if param.kind == "stages":
        return STAGES
    if param.kind == "group":
        return GROUPS
    if _DOT_DIM.search(param.name):
        return DOT_BLOCKS
    floor = 1 << (max(param.value, 1).bit_length() - 1)  # the power of two at or below it
    if _INDUCTOR_BLOCK.fullmatch(param.name):  # a reduction's XBLOCK may be 1
        cap = INDUCTOR_MAX_BLOCK.get(param.name[0], INDUCTOR_BLOCKS[-1])
        return tuple(v for v in INDUCTOR_BLOCKS if floor // 8 <= v <= cap)
    return tuple(v for v in FLAT_BLOCKS if v >= floor // 8)


def neighbours(param: Param) -> tuple[int, ...]:
    """The values one step below and above `param.value` in its valid set (one or two)."""
    values = valid_values(param)
    below = [v for v in values if v < param.value]
    above = [v for v in values if v > param.value]
    return tuple(([below[-1]] if below else []) + ([above[0]] if above else []))


def find_params(source: str) -> list[Param]:
    """The tunable literals of `source` in textual order; [] when it does not parse."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    finder = _Finder(source)
    finder.regions = _target_regions(tree)
    finder.visit(tree)
    return sorted(finder.params, key=lambda p: p.start)


TARGETS = ("gpu", "interpreter")


def _interpreter_test(test: ast.expr) -> str | None:
    """The target whose branch is the `if` body, when `test` asks for TRITON_INTERPRET."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        inner = _interpreter_test(test.operand)
        return None if inner is None else TARGETS[TARGETS.index(inner) - 1]
    if "TRITON_INTERPRET" not in ast.unparse(test):
        return None
    if isinstance(test, ast.Compare) and len(test.ops) == 1:
        op = test.ops[0]
        if isinstance(op, ast.Eq | ast.Is | ast.In):
            return "interpreter"
        if isinstance(op, ast.NotEq | ast.IsNot | ast.NotIn):
            return "gpu"
        return None
    return "interpreter" if isinstance(test, ast.Call | ast.Subscript | ast.Name) else None


def _target_regions(tree: ast.AST) -> list[tuple[int, int, int, int, str]]:
    """(first line, col, last line, end col, target) of the code only one target runs."""
    regions = []

    def span(stmts: list[ast.stmt], target: str) -> None:
        if stmts:
            first, last = stmts[0], stmts[-1]
            end = (last.end_lineno or last.lineno, last.end_col_offset or 0)
            regions.append((first.lineno, first.col_offset, *end, target))

    for node in ast.walk(tree):
        for field in ("body", "orelse", "finalbody"):
            stmts = getattr(node, field, None)
            if not isinstance(stmts, list):
                continue
            for i, stmt in enumerate(stmts):
                if not isinstance(stmt, ast.If) or (body := _interpreter_test(stmt.test)) is None:
                    continue
                other = TARGETS[TARGETS.index(body) - 1]
                span(stmt.body, body)
                span(stmt.orelse, other)
                if not stmt.orelse and isinstance(stmt.body[-1], ast.Return | ast.Raise):
                    span(stmts[i + 1 :], other)
    return regions


class _Finder(ast.NodeVisitor):
    """Collects tunable literals, numbering the scope (call, dict, function) of each."""

    def __init__(self, source: str):
        self.source = source
        starts = [0] + [m.end() for m in _NEWLINE.finditer(source)]
        self.line_starts = starts
        self.params: list[Param] = []
        self.regions: list[tuple[int, int, int, int, str]] = []
        self.scopes = [0]
        self.n_scopes = 1

    def _new_scope(self) -> int:
        self.n_scopes += 1
        return self.n_scopes - 1

    def _offset(self, line: int, col: int) -> int:
        """A character offset from ast's (1-based line, UTF-8 byte column)."""
        start = self.line_starts[line - 1]
        end = self.line_starts[line] if line < len(self.line_starts) else len(self.source)
        return start + len(self.source[start:end].encode()[:col].decode(errors="ignore"))

    def _add(self, name: str | None, value: ast.expr, scope: int) -> None:
        kind = param_kind(name) if name else None
        if kind is None or not isinstance(value, ast.Constant):
            return
        if type(value.value) is not int or value.end_lineno is None:
            return
        start = self._offset(value.lineno, value.col_offset)
        end = self._offset(value.end_lineno, value.end_col_offset or 0)
        try:
            if ast.literal_eval(self.source[start:end]) != value.value:
                return
        except (ValueError, SyntaxError):
            return
        at = (value.lineno, value.col_offset)
        inside = [r for r in self.regions if (r[0], r[1]) <= at <= (r[2], r[3])]
        target = max(inside)[4] if inside else None  # the innermost region that holds it
        self.params.append(Param(name, value.value, start, end, kind, scope, target))

    def _visit_scope(self, node: ast.AST) -> None:
        self.scopes.append(self._new_scope())
        self.generic_visit(node)
        self.scopes.pop()

    visit_FunctionDef = visit_AsyncFunctionDef = visit_ClassDef = _visit_scope

    def visit_Call(self, node: ast.Call) -> None:
        scope = self._new_scope()
        for kw in node.keywords:
            self._add(kw.arg, kw.value, scope)
        self.generic_visit(node)

    def visit_Dict(self, node: ast.Dict) -> None:
        scope = self._new_scope()
        for key, value in zip(node.keys, node.values):
            if isinstance(key, ast.Constant) and isinstance(key.value, str):
                self._add(key.value, value, scope)
        self.generic_visit(node)

    def visit_Assign(self, node: ast.Assign) -> None:
        for target in node.targets:
            self._bind(target, node.value)
        self.generic_visit(node)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        if node.value is not None:
            self._bind(node.target, node.value)
        self.generic_visit(node)

    def _bind(self, target: ast.expr, value: ast.expr) -> None:
        if isinstance(target, ast.Name):
            self._add(target.id, value, self.scopes[-1])
        elif isinstance(target, ast.Tuple) and isinstance(value, ast.Tuple):
            if len(target.elts) == len(value.elts):
                for t, v in zip(target.elts, value.elts):
                    if isinstance(t, ast.Name):
                        self._add(t.id, v, self.scopes[-1])


def _occurrence_keys(params: Iterable[Param]) -> list[tuple[str, int]]:
    """(name, how many earlier params share the name) for each param, in order."""
    seen: dict[str, int] = {}
    keys = []
    for p in params:
        keys.append((p.name, seen.get(p.name, 0)))
        seen[p.name] = seen.get(p.name, 0) + 1
    return keys


def _rewrite(source: str, changes: dict[Param, int]) -> str | None:
    """`source` with the given literals replaced; None unless it parses and defines ModelNew."""
    out = source
    for p in sorted(changes, key=lambda p: p.start, reverse=True):
        out = out[: p.start] + str(changes[p]) + out[p.end :]
    try:
        tree = ast.parse(out)
    except SyntaxError:
        return None
    # fitness.guardrails.defines_model_new says the same, but importing it imports torch.
    if not any(isinstance(n, ast.ClassDef) and n.name == "ModelNew" for n in tree.body):
        return None
    return out


class ParamOperator:
    """Mutation and crossover of a candidate's tunable literals; no LLM involved.

    `max_changes` bounds how many parameter units one mutation moves. A unit is the params
    of one name within one call, dict or function; with `link_names`, every occurrence of a
    name in the source is one unit (all step in the same direction).
    """

    name = "offline"

    def __init__(self, max_changes: int = 2, link_names: bool = False, target: str | None = None):
        if max_changes < 1:
            raise ValueError(f"max_changes must be at least 1, got {max_changes}")
        if target is not None and target not in TARGETS:
            raise ValueError(f"target must be one of {TARGETS} or None, got {target!r}")
        self.max_changes = max_changes
        self.link_names = link_names
        self.target = target  # None: every tunable; else leave the other target's alone

    def _params(self, source: str) -> list[Param]:
        return [
            p for p in find_params(source) if self.target is None or p.target in (None, self.target)
        ]

    def _units(self, params: list[Param]) -> list[list[Param]]:
        units: dict[tuple, list[Param]] = {}
        for p in params:
            key = (p.name,) if self.link_names else (p.name, p.scope)
            units.setdefault(key, []).append(p)
        return list(units.values())

    def mutate(
        self, source: str, rng: random.Random, hint: dict[str, int] | None = None
    ) -> str | None:
        """`source` with 1..max_changes units moved one step; None if it has no tunables.

        `hint` (the analyst's `params_hint`: kind -> +1 larger / -1 smaller) biases the
        search: a unit of a hinted kind is picked first, and moves the hinted way where it
        can. Unhinted units still move, so a wrong hint cannot stall the search.
        """
        units = [u for u in self._units(self._params(source)) if neighbours(u[0])]
        if not units:
            return None
        k = rng.randint(1, min(self.max_changes, len(units)))
        changes: dict[Param, int] = {}
        for unit in self._pick(units, k, hint or {}, rng):
            lead = neighbours(unit[0])
            way = (hint or {}).get(unit[0].kind, 0)
            hinted = [v for v in lead if (v > unit[0].value) == (way > 0)] if way else []
            up = (hinted[0] if hinted else rng.choice(lead)) > unit[0].value
            for p in unit:
                steps = [v for v in neighbours(p) if (v > p.value) == up]
                if steps:
                    changes[p] = steps[0]
        return _rewrite(source, changes)

    @staticmethod
    def _pick(units: list, k: int, hint: dict[str, int], rng: random.Random) -> list:
        """k units; with a hint, one of a hinted kind first (when there is one)."""
        first = [u for u in units if hint.get(u[0].kind)]
        if not first:
            return rng.sample(units, k)
        lead = rng.choice(first)
        rest = [u for u in units if u is not lead]
        return [lead, *rng.sample(rest, k - 1)]

    def crossover(self, a: str, b: str, rng: random.Random) -> str | None:
        """`a` with some of its parameter sets taken from `b`.

        Params are matched by name and occurrence order; a scope of `a` is taken whole (each
        with probability 1/2, at least one), as far as `b`'s values are valid for `a`'s params.
        None when no shared param differs or the result equals `a`.
        """
        pa, pb = find_params(a), find_params(b)
        from_b = dict(zip(_occurrence_keys(pb), pb))
        mine = set(self._params(a))
        offers: dict[int, dict[Param, int]] = {}
        for key, p in zip(_occurrence_keys(pa), pa):
            q = from_b.get(key)
            if p in mine and q is not None and q.value != p.value and q.value in valid_values(p):
                offers.setdefault(p.scope, {})[p] = q.value
        if not offers:
            return None
        scopes = sorted(offers)
        taken = [s for s in scopes if rng.random() < 0.5] or [rng.choice(scopes)]
        changes = {p: v for s in taken for p, v in offers[s].items()}
        out = _rewrite(a, changes)
        return None if out is None or out == a else out

    def describe(self, before: str, after: str) -> str:
        """The changed params in one line, e.g. "BLOCK_M 128->64, num_warps 8->4"."""
        pa, pb = find_params(before), find_params(after)
        after_by_key = dict(zip(_occurrence_keys(pb), pb))
        parts = []
        for key, p in zip(_occurrence_keys(pa), pa):
            q = after_by_key.get(key)
            if q is not None and q.value != p.value:
                parts.append(f"{p.name} {p.value}->{q.value}")
        return ", ".join(parts) if parts else "no parameter changes"
