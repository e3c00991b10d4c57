"""The profiler-analysis actor: one concrete recommendation from a candidate's profile.

`profile` holds the record (kernel table, Nsight Compute metrics, roofline) and its JSON
storage; `ncu` what is asked of Nsight Compute and how its CSV is read; `rules` the rule-based
analyst; `llm` the LLM analyst (text from a model, kind and hint from the rules); `actor` the
Ray actor. Capture itself is operators.profiling.
"""

from operators.analyst.actor import AnalystService, analyst_actor_class
from operators.analyst.llm import LLMAnalyst, first_paragraph
from operators.analyst.ncu import NCU_METRICS, parse_ncu_csv
from operators.analyst.profile import (
    KernelRow,
    NcuKernel,
    Profile,
    Roofline,
    safe_id,
    save_profile,
)
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
