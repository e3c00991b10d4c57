"""The LLM operators: the island's material in a prompt, one model call, a child's source.

The five kinds of DESIGN.md (initial, mutate, repair, crossover, translate) differ only in
their template (operators/prompts) and in what the context must carry: a parent, two
parents, an error, another backend's kernel. Every outcome is a `Draft`: the child's source,
or the reason it is a `generation_failure` (the call failed, the budget refused it, the reply
had no code, an edit did not apply). The client records the call's `llm_calls` row.

Not here: which parents, how many repair attempts a lineage gets, and when to call: those
are the island's and the driver's (issue 4's engine wiring).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from operators.edits import EditError, child_source
from operators.llm import LLMClient, choose
from operators.prompting import PromptContext, PromptOverrides, render

OPERATORS = ("initial", "mutate", "repair", "crossover", "translate")


@dataclass(frozen=True)
class Draft:
    """One proposal's outcome: `source` set, or `reason` (a generation_failure's)."""

    operator: str
    model: str
    source: str | None
    reason: str
    llm_call_id: str
    prompt_hash: str
    templates: tuple[str, ...]
    cost_usd: float = 0.0
    input_tokens: int = 0
    output_tokens: int = 0

    @property
    def ok(self) -> bool:
        return self.source is not None


class LLMOperator:
    """Proposes children through one of `clients`, drawn by weight (an ensemble).

    `overrides` are the experiment's prompt overrides, appends and auxiliary code.
    """

    def __init__(
        self,
        clients: Sequence[LLMClient],
        overrides: PromptOverrides | Sequence[PromptOverrides] | None = None,
    ):
        if not clients:
            raise ValueError("an LLM operator needs at least one model")
        self.clients = list(clients)
        self.overrides = overrides

    def propose(self, operator: str, backend: str, ctx: PromptContext, rng: random.Random) -> Draft:
        """A child of `ctx.parent` (none for initial) by `operator`, written for `backend`.

        A malformed context (an unknown operator, a missing part) raises PromptError: that is
        the caller's bug, not the model's failure.
        """
        if operator not in OPERATORS:
            raise ValueError(f"unknown operator {operator!r} (choose from {', '.join(OPERATORS)})")
        prompt = render(operator, backend, ctx, self.overrides)
        client = choose(self.clients, rng)
        res = client.complete(prompt.user, operator=operator, system=prompt.system)

        def draft(source: str | None, reason: str) -> Draft:
            return Draft(
                operator=operator,
                model=client.model,
                source=source,
                reason=reason,
                llm_call_id=res.llm_call_id,
                prompt_hash=res.prompt_hash,
                templates=prompt.template_names,
                cost_usd=res.cost_usd,
                input_tokens=res.input_tokens,
                output_tokens=res.output_tokens,
            )

        if not res.ok:  # a budget refusal's error already says "budget: ..."
            return draft(None, res.error if res.error_kind == "budget" else f"LLM: {res.error}")
        parent = ctx.parent.source if ctx.parent is not None else None
        # Asked for diff blocks, a model may still answer with the whole file: take either.
        mode = "auto" if prompt.edit_format == "diff" else "rewrite"
        try:
            child = child_source(res.text, parent, mode)
        except EditError as e:
            return draft(None, f"reply unusable: {e}")
        return draft(child, "")
