"""The profiler-analysis actor: one concrete recommendation from a candidate's profile.

The profile record (kernel table, Nsight Compute metrics, roofline) is fitness.profile, and
its capture fitness.profiling: the fitness service profiles on the GPU it owns, between two
evaluations. Here: `rules` the rule-based analyst; `llm` the LLM analyst (text from a model,
kind and hint from the rules); `actor` the Ray actor.
"""

from fitness.ncu import NCU_METRICS, parse_ncu_csv
from fitness.profile import (
    KernelRow,
    NcuKernel,
    Profile,
    Roofline,
    safe_id,
    save_profile,
)
from operators.analyst.actor import AnalystService, analyst_actor_class
from operators.analyst.llm import LLMAnalyst, first_paragraph
from operators.analyst.rules import TUNABLE_KINDS, Recommendation, RuleAnalyst

__all__ = [
    "NCU_METRICS",
    "TUNABLE_KINDS",
    "AnalystService",
    "KernelRow",
    "LLMAnalyst",
    "NcuKernel",
    "Profile",
    "Recommendation",
    "Roofline",
    "RuleAnalyst",
    "analyst_actor_class",
    "first_paragraph",
    "parse_ncu_csv",
    "safe_id",
    "save_profile",
]
