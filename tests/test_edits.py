"""Reply parsing: fenced code extraction and SEARCH/REPLACE diff blocks."""

from __future__ import annotations

import pytest

from operators.edits import Block, EditError, apply_diff, child_source, extract_code, parse_diff

PARENT = """\
import torch
import triton


class ModelNew(torch.nn.Module):
    def forward(self, x):
        block = 256
        y = torch.empty_like(x)
        launch(x, y, block)
        return y

    def extra(self):
        block = 256
        return block
"""


def diff(*pairs: tuple[str, str]) -> str:
    """A reply holding one SEARCH/REPLACE block per (search, replace) pair, with prose."""
    body = "".join(f"<<<<<<< SEARCH\n{s}=======\n{r}>>>>>>> REPLACE\n" for s, r in pairs)
    return f"I raise the block size.\n\n```python\n{body}```\n"


# -- fenced code


def test_prefers_python_block_after_prose():
    reply = "Here is my kernel.\n\n```python\nimport torch\nclass ModelNew: pass\n```\nDone."
    assert extract_code(reply) == "import torch\nclass ModelNew: pass\n"


def test_several_blocks_pick_the_one_defining_model_new():
    reply = (
        "First the kernel:\n```python\n" + "x = 1\n" * 30 + "```\n"
        "Then the module:\n```py\nclass ModelNew:\n    pass\n```\n"
        "Output:\n```\n" + "log\n" * 50 + "```\n"
    )
    assert extract_code(reply) == "class ModelNew:\n    pass\n"


def test_several_blocks_without_model_new_pick_the_longest_python_one():
    reply = "```python\na = 1\n```\n```python\na = 1\nb = 2\n```\n```\n" + "z\n" * 9 + "```"
    assert extract_code(reply) == "a = 1\nb = 2\n"


def test_untagged_block_is_used_when_nothing_is_tagged_python():
    assert extract_code("```\nclass ModelNew: pass\n```") == "class ModelNew: pass\n"


def test_other_languages_alone_are_not_code():
    with pytest.raises(EditError, match=r"no Python code in the reply \(only cpp blocks\)"):
        extract_code("```cpp\n__global__ void k() {}\n```")


def test_unterminated_final_fence_runs_to_the_end():
    reply = "Sure.\n```python\nimport torch\n\nclass ModelNew:\n    pass\n"
    assert extract_code(reply) == "import torch\n\nclass ModelNew:\n    pass\n"


def test_tilde_fences_and_longer_fences():
    assert extract_code("~~~python\nclass ModelNew: pass\n~~~\n") == "class ModelNew: pass\n"
    inner = 'DOC = """\n```\nnot a fence end\n```\n"""\nclass ModelNew: pass\n'
    assert extract_code(f"````python\n{inner}````\n") == inner


def test_crlf_reply():
    reply = "Text\r\n```python\r\nclass ModelNew:\r\n    pass\r\n```\r\n"
    assert extract_code(reply) == "class ModelNew:\n    pass\n"


def test_fence_info_string_and_indented_fence():
    assert extract_code("```Python title=model.py\nclass ModelNew: pass\n```") == (
        "class ModelNew: pass\n"
    )
    reply = "1. The file:\n  ```python\n  class ModelNew:\n      pass\n  ```\n"
    assert extract_code(reply) == "class ModelNew:\n    pass\n"


def test_unfenced_code_defining_model_new_is_taken_from_its_first_line():
    reply = "# Solution\nHere it is:\nimport torch\n\nclass ModelNew:\n    pass\n"
    assert extract_code(reply) == "import torch\n\nclass ModelNew:\n    pass\n"


@pytest.mark.parametrize(
    "reply,needle",
    [
        ("I cannot do that.", "no code in the reply"),
        ("", "no code in the reply"),
        ("```python\n\n```", "no code in the reply"),
        ("import torch\nx = 1\n", "no code in the reply"),
    ],
)
def test_no_code(reply, needle):
    with pytest.raises(EditError, match=needle):
        extract_code(reply)


# -- SEARCH/REPLACE blocks


def test_exact_match():
    reply = diff(
        (
            "        block = 256\n        y = torch.empty_like(x)\n",
            "        block = 1024\n        y = torch.empty_like(x)\n",
        )
    )
    out = child_source(reply, PARENT, "diff")
    assert "block = 1024\n        y = torch.empty_like(x)" in out
    assert out.count("block = 256") == 1  # extra() untouched


def test_trailing_whitespace_is_tolerated():
    reply = diff(("        launch(x, y, block)   \n", "        launch(x, y, block, 4)\n"))
    assert "launch(x, y, block, 4)\n" in child_source(reply, PARENT, "diff")
    source = PARENT.replace("launch(x, y, block)", "launch(x, y, block)  \t")
    reply = diff(("        launch(x, y, block)\n", "        launch(x, y, block, 4)\n"))
    assert "launch(x, y, block, 4)\n" in child_source(reply, source, "diff")


def test_indentation_shift_reindents_the_replacement():
    search = "y = torch.empty_like(x)\nlaunch(x, y, block)\n"
    replace = "y = torch.empty_like(x)\nif block:\n    launch(x, y, block)\n"
    out = child_source(diff((search, replace)), PARENT, "diff")
    assert "        if block:\n            launch(x, y, block)\n        return y" in out
    deeper = "            " + "\n            ".join(search.splitlines()) + "\n"
    out = child_source(diff((deeper, "            launch(x, y, 2 * block)\n")), PARENT, "diff")
    assert "        launch(x, y, 2 * block)\n        return y" in out


def test_blank_lines_at_the_edges_of_a_search_are_tolerated():
    reply = diff(("\n        launch(x, y, block)\n\n", "        launch(x, y, block, 8)\n"))
    assert "launch(x, y, block, 8)" in child_source(reply, PARENT, "diff")


def test_crlf_in_reply_and_source():
    reply = diff(("        launch(x, y, block)\n", "        launch(x, y, 64)\n")).replace(
        "\n", "\r\n"
    )
    out = child_source(reply, PARENT.replace("\n", "\r\n"), "diff")
    assert "\r" not in out and "        launch(x, y, 64)\n" in out


def test_blocks_apply_in_order_each_to_the_previous_result():
    reply = diff(
        ("        launch(x, y, block)\n", "        launch(x, y, block)\n        sync()\n"),
        ("        sync()\n", "        sync(y)\n"),
        ("    def extra(self):\n        block = 256\n        return block\n", ""),
    )
    out = child_source(reply, PARENT, "diff")
    assert "launch(x, y, block)\n        sync(y)\n        return y" in out
    assert "def extra" not in out and out.endswith("\n")


def test_ambiguous_anchor_names_the_block():
    reply = diff(
        ("        launch(x, y, block)\n", "        go()\n"),
        ("        block = 256\n", "        block = 64\n"),
    )
    with pytest.raises(EditError, match=r"SEARCH block 2 of 2 \('block = 256'\) matches 2 places"):
        child_source(reply, PARENT, "diff")


def test_ambiguous_after_ignoring_indentation():
    source = "def f():\n    a = 1\n\ndef g():\n        a = 1\n"
    with pytest.raises(EditError, match=r"matches 2 places \(ignoring indentation\)"):
        apply_diff(source, [Block("  a = 1", "  a = 2")])


def test_missing_anchor_names_the_block():
    reply = diff(("        launch(x, y, block)\n", "        go()\n"), ("    def nope(self):\n", ""))
    with pytest.raises(
        EditError, match=r"SEARCH block 2 of 2 \('def nope\(self\):'\) matches nothing"
    ):
        child_source(reply, PARENT, "diff")


def test_empty_search_is_an_error():
    with pytest.raises(EditError, match="SEARCH block 1 of 1 is empty"):
        apply_diff(PARENT, [Block("\n", "x = 1")])


@pytest.mark.parametrize(
    "reply,needle",
    [
        (
            "<<<<<<< SEARCH\na = 1\n>>>>>>> REPLACE\n",
            r"SEARCH block 1 of 1 \('a = 1'\) has no ======= divider",
        ),
        (
            "<<<<<<< SEARCH\na = 1\n=======\nb = 2\n",
            r"block 1 of 1 \('a = 1'\) has no >>>>>>> REPLACE",
        ),
        ("<<<<<<< SEARCH\na = 1\n", "has no ======= divider"),
        (
            "<<<<<<< SEARCH\na\n=======\nb\n>>>>>>> REPLACE\n<<<<<<< SEARCH\nc\n=======\nd\n"
            "<<<<<<< SEARCH\ne\n=======\nf\n>>>>>>> REPLACE\n",
            r"SEARCH block 2 of 3 \('c'\) has no >>>>>>> REPLACE marker before <<<<<<< SEARCH",
        ),
        (
            "a = 1\n=======\nb = 2\n>>>>>>> REPLACE\n",
            "stray >>>>>>> REPLACE marker before any SEARCH",
        ),
    ],
)
def test_malformed_markers(reply, needle):
    with pytest.raises(EditError, match=needle):
        parse_diff(reply)


def test_parse_diff_reads_blocks_and_ignores_prose():
    reply = "Title\n=======\n\n" + diff(("a\n", "b\n"), ("c\nd\n", "")) + "\nThat is all."
    assert parse_diff(reply) == [Block("a", "b"), Block("c\nd", "")]


def test_marker_variants():
    reply = "<<<<<<<< search\na\n========\nb\n>>>>>>>> replace\n"
    assert parse_diff(reply) == [Block("a", "b")]


# -- child_source modes


def test_auto_mode_uses_diff_when_present_else_fenced_code():
    reply = diff(
        ("        block = 256\n        y = torch.empty_like(x)\n", "        block = 512\n")
    )
    assert "block = 512" in child_source(reply, PARENT)
    assert child_source("```python\nclass ModelNew: pass\n```", PARENT) == "class ModelNew: pass\n"


def test_rewrite_mode_ignores_diff_markers_outside_code():
    reply = "<<<<<<< SEARCH\na\n=======\nb\n>>>>>>> REPLACE\n```python\nclass ModelNew: pass\n```"
    assert child_source(reply, None, "rewrite") == "class ModelNew: pass\n"


def test_diff_mode_needs_blocks_and_a_parent():
    with pytest.raises(EditError, match="no SEARCH/REPLACE blocks"):
        child_source("```python\nclass ModelNew: pass\n```", PARENT, "diff")
    with pytest.raises(EditError, match="need a parent"):
        child_source(diff(("a\n", "b\n")), None, "diff")
    with pytest.raises(ValueError, match="unknown edit mode"):
        child_source("x", PARENT, "patch")
