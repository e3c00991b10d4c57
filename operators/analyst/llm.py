"""The LLM analyst: the recommendation's text from a model, its kind and hint from the rules.

The prompt is rendered from operators/prompts/analyst.j2 (or a template file given in its
place); the reply's first non-empty paragraph is the recommendation.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from fitness.profile import Profile
from operators.analyst.rules import Recommendation, RuleAnalyst

PROMPT_DIR = Path(__file__).resolve().parents[1] / "prompts"


def first_paragraph(reply: str) -> str:
    """The first non-empty paragraph of a reply, with its lines joined."""
    for block in reply.replace("\r\n", "\n").split("\n\n"):
        text = " ".join(line.strip() for line in block.splitlines() if line.strip())
        if text:
            return text
    return ""


class LLMAnalyst:
    """The recommendation's text from a model; kind and params_hint from the rules.

    `complete` takes a prompt and returns the reply text (the provider seam). When it raises or
    returns nothing, the rule's recommendation is returned with kind "fallback:<kind>".
    """

    name = "llm"

    def __init__(
        self,
        complete: Callable[[str], str],
        template: str | Path | None = None,
        rules: RuleAnalyst | None = None,
    ):
        self.complete = complete
        self.template_path = Path(template) if template else PROMPT_DIR / "analyst.j2"
        self.rules = rules or RuleAnalyst()

    def prompt(self, profile: Profile, rule: Recommendation) -> str:
        """The rendered prompt for `profile`, the rules' reading included."""
        import jinja2

        env = jinja2.Environment(
            loader=jinja2.FileSystemLoader(str(self.template_path.parent)),
            undefined=jinja2.StrictUndefined,
            trim_blocks=True,
            lstrip_blocks=True,
            keep_trailing_newline=True,
        )
        env.filters["num"] = lambda v, spec=".3g": "n/a" if v is None else format(v, spec)
        template = env.get_template(self.template_path.name)
        return template.render(profile=profile, rule=rule, kernels=profile.kernels[:8])

    def recommend(self, profile: Profile) -> Recommendation:
        rule = self.rules.recommend(profile)
        prompt = self.prompt(profile, rule)  # a broken template is an error, not a fallback
        try:
            text = first_paragraph(self.complete(prompt) or "")
            note = "" if text else "the model returned no text"
        except Exception as exc:  # any provider failure falls back to the rules
            text, note = "", f"LLM call failed: {type(exc).__name__}: {exc}"[:300]
        if not text:
            return Recommendation(rule.text, f"fallback:{rule.kind}", rule.params_hint, note)
        return Recommendation(text, f"llm:{rule.kind}", dict(rule.params_hint))
