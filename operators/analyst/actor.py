"""The profiler-analysis actor: capture a candidate's profile, recommend, store the profile.

`AnalystService` is a plain class (usable without Ray); `analyst_actor_class()` wraps it as a
CPU Ray actor. Nothing crossing the actor boundary is more than JSON-able data.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fitness.profile import Profile, save_profile
from operators.analyst.llm import LLMAnalyst
from operators.analyst.rules import RuleAnalyst


class AnalystService:
    """What the profiler-analysis actor does; a plain class so it can be used without Ray.

    `recommend` reads a stored profile; `analyse` captures one (fitness.profiling), reads it
    and, given `run_dir` and `candidate_id`, saves it under RUN/artifacts/profiles/.
    """

    def __init__(
        self,
        complete: Callable[[str], str] | None = None,
        ncu: bool | None = None,
        timeout_s: float = 300.0,
    ):
        self.analyst = LLMAnalyst(complete) if complete is not None else RuleAnalyst()
        self.ncu = ncu
        self.timeout_s = timeout_s

    def recommend(self, profile_json: str) -> dict[str, Any]:
        return self.analyst.recommend(Profile.from_json(profile_json)).to_dict()

    def analyse(
        self,
        source: str,
        workload_name: str,
        device: str,
        *,
        overrides: dict | None = None,
        result: dict | None = None,
        run_dir: str | None = None,
        candidate_id: str | None = None,
    ) -> dict[str, Any]:
        """Capture, recommend and optionally save; a failed capture is reported, not raised.

        Returns {"recommendation": dict | None, "profile_path": str | None, "error": str}.
        """
        from fitness.errors import EvoError
        from fitness.profiling import ProfileError, capture_profile  # imports this package
        from fitness.results import EvalResult
        from fitness.workloads import resolve_workload

        try:
            workload = resolve_workload(workload_name, overrides=overrides)
            profile = capture_profile(
                source,
                workload,
                device,
                self.ncu,
                result=EvalResult.from_dict(result) if result else None,
                timeout_s=self.timeout_s,
            )
        except (ProfileError, EvoError) as exc:
            return {"recommendation": None, "profile_path": None, "error": str(exc)}
        path = None
        if run_dir is not None and candidate_id is not None:
            path = str(save_profile(run_dir, candidate_id, profile))
        rec = self.analyst.recommend(profile).to_dict()
        return {"recommendation": rec, "profile_path": path, "error": ""}


def analyst_actor_class(num_cpus: float = 0.25) -> Any:
    """The Ray actor class of AnalystService (built on call: importing this needs no Ray)."""
    import ray

    return ray.remote(num_cpus=num_cpus)(AnalystService)
