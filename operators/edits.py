"""Reading an LLM's reply: the fenced code of a full rewrite, or SEARCH/REPLACE diff blocks.

A reply that cannot be read raises `EditError`; its message is the one-line reason that the
candidate's `generation_failure` verdict carries, so it names the problem and the block.

Diff blocks use the common format

    <<<<<<< SEARCH
    lines of the current code
    =======
    the lines that take their place
    >>>>>>> REPLACE

and apply in order, each to the result of the ones before. A SEARCH part matches whole lines:
exactly first, then ignoring trailing whitespace, then tolerating blank lines at its edges
and a uniform indentation shift (the replacement is re-indented by the same shift). At every
level it must match exactly one place. Line endings are normalised to LF throughout.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

_FENCE = re.compile(r"^( {0,3})(`{3,}|~{3,})[ \t]*([^\s`]*)[^`]*$")
_SEARCH = re.compile(r"^\s*<{5,9}\s*SEARCH\s*$", re.IGNORECASE)
_DIVIDER = re.compile(r"^\s*={5,9}\s*$")
_REPLACE = re.compile(r"^\s*>{5,9}\s*REPLACE\s*$", re.IGNORECASE)
_MODEL_NEW = re.compile(r"^class\s+ModelNew\b", re.MULTILINE)
_PYTHON_TAGS = frozenset({"python", "py", "python3"})
_CODE_START = re.compile(r'^(import |from |@|class |def |"""|#)')
MODES = ("rewrite", "diff", "auto")


class EditError(Exception):
    """A reply that yields no child: no code, or diff blocks that are malformed or do not apply."""


@dataclass(frozen=True)
class Block:
    """One SEARCH/REPLACE block: the lines to find and the lines that take their place."""

    search: str
    replace: str

    @property
    def first_line(self) -> str:
        """The first non-blank SEARCH line, for error messages."""
        return next((s.strip() for s in self.search.split("\n") if s.strip()), "")


@dataclass(frozen=True)
class _Fenced:
    lang: str
    text: str


def extract_code(reply: str) -> str:
    """The Python file in a reply: its fenced block, chosen when there are several.

    Preference: a block defining `class ModelNew` (a Python-tagged one first, then the
    longest), else the longest Python-tagged block, else the longest untagged one. An
    unterminated last fence runs to the end of the reply. A reply with no fence at all is
    taken from its first line of code when that defines ModelNew.
    """
    text = _normalise(reply)
    blocks = [b for b in _fenced_blocks(text) if b.text.strip()]
    if not blocks:
        bare = _bare_code(text)
        if bare is None:
            raise EditError("no code in the reply (no fenced code block)")
        return bare
    python = [b for b in blocks if b.lang in _PYTHON_TAGS]
    untagged = [b for b in blocks if not b.lang]
    with_model = [b for b in python + untagged if _MODEL_NEW.search(b.text)]
    for group in (with_model, python, untagged):
        if group:
            best = max(group, key=lambda b: len(b.text))
            return best.text.strip("\n") + "\n"
    langs = ", ".join(sorted({b.lang for b in blocks}))
    raise EditError(f"no Python code in the reply (only {langs} blocks)")


def parse_diff(reply: str) -> list[Block]:
    """The SEARCH/REPLACE blocks of a reply, in order; text around them is ignored.

    Raises EditError naming the block when a block lacks its ======= divider or its
    >>>>>>> REPLACE marker, or when a divider or REPLACE marker stands outside any block.
    """
    lines = _normalise(reply).split("\n")
    total = sum(1 for line in lines if _SEARCH.match(line))
    blocks: list[Block] = []
    state = "outside"
    search: list[str] = []
    replace: list[str] = []

    def name() -> str:
        first = next((s.strip() for s in search if s.strip()), "")
        return f"SEARCH block {len(blocks) + 1} of {total}" + (f" ({first!r})" if first else "")

    for line in lines:
        if state == "outside":
            if _SEARCH.match(line):
                state, search, replace = "search", [], []
            elif _REPLACE.match(line):  # a stray divider may be prose (a heading underline)
                where = f"after SEARCH block {len(blocks)}" if blocks else "before any SEARCH"
                raise EditError(f"stray {line.strip()} marker {where}")
        elif state == "search":
            if _DIVIDER.match(line):
                state = "replace"
            elif _SEARCH.match(line) or _REPLACE.match(line):
                raise EditError(f"{name()} has no ======= divider before {line.strip()}")
            else:
                search.append(line)
        else:
            if _REPLACE.match(line):
                blocks.append(Block("\n".join(search), "\n".join(replace)))
                state = "outside"
            elif _SEARCH.match(line) or _DIVIDER.match(line):
                raise EditError(f"{name()} has no >>>>>>> REPLACE marker before {line.strip()}")
            else:
                replace.append(line)
    if state == "search":
        raise EditError(f"{name()} has no ======= divider (the reply ends inside it)")
    if state == "replace":
        raise EditError(f"{name()} has no >>>>>>> REPLACE marker (the reply ends inside it)")
    return blocks


def apply_diff(source: str, blocks: list[Block]) -> str:
    """`source` with each block applied in turn; EditError names a block that does not apply."""
    lines = _normalise(source).split("\n")
    for i, block in enumerate(blocks, 1):
        label = f"SEARCH block {i} of {len(blocks)}"
        if block.first_line:
            label += f" ({block.first_line!r})"
        if not block.first_line:
            raise EditError(f"{label} is empty (it must quote lines of the current code)")
        search = _normalise(block.search).split("\n")
        replace = _normalise(block.replace).split("\n") if block.replace else []
        lines = _apply_one(lines, search, replace, label)
    return "\n".join(lines)


def child_source(reply: str, parent_source: str | None, mode: str = "auto") -> str:
    """The child's source from a reply: a full rewrite, diff blocks applied to the parent, or
    (mode "auto") diff blocks when the reply has any, else its fenced code."""
    if mode not in MODES:
        raise ValueError(f"unknown edit mode {mode!r} (choose from {', '.join(MODES)})")
    has_diff = any(_SEARCH.match(line) for line in _normalise(reply).split("\n"))
    if mode == "rewrite" or (mode == "auto" and not has_diff):
        return extract_code(reply)
    if parent_source is None:
        raise EditError("diff blocks need a parent to apply to, and there is none")
    blocks = parse_diff(reply)
    if not blocks:
        raise EditError("no SEARCH/REPLACE blocks in the reply")
    child = apply_diff(parent_source, blocks)
    return child if child.endswith("\n") else child + "\n"


def _normalise(text: str) -> str:
    return text.replace("\r\n", "\n").replace("\r", "\n")


def _fenced_blocks(text: str) -> list[_Fenced]:
    """Fenced blocks in order; a closing fence repeats the opening character at least as often.

    An indented fence (a list item) has its indentation removed from the lines it encloses.
    """
    out = []
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, fence = m.group(1), m.group(2)
        lang = re.split(r"[^\w+-]", m.group(3).lower(), maxsplit=1)[0]
        close = re.compile(rf"^ {{0,3}}{re.escape(fence[0])}{{{len(fence)},}}\s*$")
        j = i + 1
        while j < len(lines) and not close.match(lines[j]):
            j += 1
        body = [line.removeprefix(indent) for line in lines[i + 1 : j]]
        out.append(_Fenced(lang, "\n".join(body)))
        i = j + 1
    return out


def _bare_code(text: str) -> str | None:
    """Code given without fences: from the first line where a module defining ModelNew parses."""
    lines = text.split("\n")
    for k, line in enumerate(lines):
        if not _CODE_START.match(line):
            continue
        code = "\n".join(lines[k:]).strip("\n") + "\n"
        if not _MODEL_NEW.search(code):
            return None
        try:
            ast.parse(code)
        except SyntaxError:
            continue
        return code
    return None


def _apply_one(lines: list[str], search: list[str], replace: list[str], label: str) -> list[str]:
    """Replace the one place `search` matches, trying ever more tolerant comparisons."""
    attempts = [(search, replace)]
    trimmed = _trim_blank_edges(search)
    if trimmed != search:
        attempts.append((trimmed, _trim_blank_edges(replace)))
    for s, r in attempts:
        for key, how in ((_exact, ""), (_rstripped, " (ignoring trailing whitespace)")):
            hits = _find(lines, s, key)
            if len(hits) > 1:
                raise EditError(f"{label} matches {len(hits)} places{how}")
            if hits:
                return lines[: hits[0]] + r + lines[hits[0] + len(s) :]
        shifted = _find_shifted(lines, s)
        if len(shifted) > 1:
            raise EditError(f"{label} matches {len(shifted)} places (ignoring indentation)")
        if shifted:
            k, old, new = shifted[0]
            return lines[:k] + _reindent(r, old, new) + lines[k + len(s) :]
    raise EditError(f"{label} matches nothing in the current code")


def _exact(line: str) -> str:
    return line


def _rstripped(line: str) -> str:
    return line.rstrip()


def _find(lines: list[str], search: list[str], key) -> list[int]:
    n = len(search)
    want = [key(s) for s in search]
    have = [key(line) for line in lines]
    return [k for k in range(len(lines) - n + 1) if have[k : k + n] == want]


def _find_shifted(lines: list[str], search: list[str]) -> list[tuple[int, str, str]]:
    """Places where `search` matches after removing each side's common indentation:
    (start, the SEARCH's common indent, the source's common indent)."""
    want_indent = _common_indent(search)
    want = _dedent(search, want_indent)
    n = len(search)
    hits = []
    for k in range(len(lines) - n + 1):
        window = lines[k : k + n]
        indent = _common_indent(window)
        if _dedent(window, indent) == want:
            hits.append((k, want_indent, indent))
    return hits


def _common_indent(lines: list[str]) -> str:
    indents = [line[: len(line) - len(line.lstrip())] for line in lines if line.strip()]
    if not indents:
        return ""
    prefix = indents[0]
    for ind in indents[1:]:
        while not ind.startswith(prefix):
            prefix = prefix[:-1]
    return prefix


def _dedent(lines: list[str], indent: str) -> list[str]:
    return [line[len(indent) :].rstrip() if line.strip() else "" for line in lines]


def _reindent(lines: list[str], old: str, new: str) -> list[str]:
    """Shift `lines` from indentation `old` to `new`; lines indented less lose what they can."""
    out = []
    for line in lines:
        if not line.strip():
            out.append("")
        elif line.startswith(old):
            out.append(new + line[len(old) :])
        else:
            body = line.lstrip()
            width = len(line) - len(body) - len(old) + len(new)
            out.append((new[:1] or " ") * max(width, 0) + body)
    return out


def _trim_blank_edges(lines: list[str]) -> list[str]:
    start, end = 0, len(lines)
    while start < end and not lines[start].strip():
        start += 1
    while end > start and not lines[end - 1].strip():
        end -= 1
    return lines[start:end]
