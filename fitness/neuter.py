"""The candidate with its own kernels neutered: the judge's test of who did the work.

A candidate whose outputs still match the reference when every kernel it defines does
nothing got them from somewhere else: PyTorch, another library, the host. The judge shows
this from outside the candidate's process: it rewrites the source itself and replays one
correctness round of the rewrite in a fresh process (fitness.judge). Nothing the candidate's
process reports takes part.

- Triton: the body of every @triton.jit function (kernels and device helpers, autotuned or
  not) becomes `return`.
- CUDA: the body of every `__global__` function in the source's C++ strings becomes empty.
"""

from __future__ import annotations

import ast
import re

_GLOBAL = re.compile(r"__global__\b")


def neuter(source: str, backend: str) -> str | None:
    """The source with its own kernels doing nothing; None when it defines none."""
    if backend == "cuda":
        return _neuter_cuda(source)
    return _neuter_triton(source)


def _is_jit(dec: ast.expr) -> bool:
    target = dec.func if isinstance(dec, ast.Call) else dec
    name = target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", "")
    return name == "jit"


def _neuter_triton(source: str) -> str | None:
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    hits = 0
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and any(_is_jit(d) for d in node.decorator_list):
            node.body = [ast.Return(value=None)]
            hits += 1
    return ast.unparse(ast.fix_missing_locations(tree)) if hits else None


def _neuter_cuda(source: str) -> str | None:
    out, pos, hits = [], 0, 0
    for m in _GLOBAL.finditer(source):
        if m.start() < pos:
            continue
        body = _body_span(source, m.end())
        if body is None:
            continue
        start, end = body
        out.append(source[pos : start + 1])
        out.append(" ")
        pos = end
        hits += 1
    if not hits:
        return None
    out.append(source[pos:])
    return "".join(out)


def _body_span(text: str, after: int) -> tuple[int, int] | None:
    """(index of the `{` that opens the function body after `after`, index of its `}`)."""
    paren = text.find("(", after)
    if paren < 0:
        return None
    depth, i = 0, paren
    while i < len(text):  # the parameter list, which may hold parentheses of its own
        depth += {"(": 1, ")": -1}.get(text[i], 0)
        if depth == 0:
            break
        i += 1
    brace = text.find("{", i)
    semi = text.find(";", i)
    if brace < 0 or (0 <= semi < brace):  # a declaration, not a definition
        return None
    depth, j = 0, brace
    while j < len(text):
        depth += {"{": 1, "}": -1}.get(text[j], 0)
        if depth == 0:
            return brace, j
        j += 1
    return None
