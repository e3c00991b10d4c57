"""User fitness functions for the engine tests (named in configs by dotted path)."""


def shorter_is_fitter(verdict: dict, artifacts: dict) -> tuple[float, dict]:
    """Deterministic on any device: a correct candidate's fitness from its source length, and
    one extra metric, as a user's measurement hook would return."""
    n = len(artifacts["source"])
    return 1e4 / n, {"source_lines": float(artifacts["source"].count("\n"))}
