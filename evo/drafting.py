"""Drafting: the driver's LLM stage between an island's request and the fitness service.

An island in LLM mode proposes a request (the operator, its parents, inspirations); the
drafter renders the prompt, calls the model on a thread (the calls are I/O-bound, and one
process makes the per-model limit global), and hands back a source or a generation_failure
reason. Costs are reserved in the driver's own budget before each call, so concurrent calls
cannot overshoot it, and every call is a row in `llm_calls/`.

A deterministic run's prompts show verdicts without measured numbers (times, speedups, error
sizes): two runs of the same candidate measure differently, and a replay (`replay:RUN_DIR`,
keyed by the prompt's text) must ask the same question to get the recorded answer.
"""

from __future__ import annotations

import random
import re
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from evo.budget import Budget
from evo.config import RunConfig
from evo.lineage import LineageWriter, recorded_llm_calls
from fitness.workloads import resolve_workload
from operators.llm import LLMClient, ModelEntry, make_provider
from operators.llm_operator import Draft, LLMOperator
from operators.prompting import CodeSample, PromptContext, PromptOverrides, load_aux_code


class Drafter:
    """Drafts requested children through the configured model; `done()` returns the finished
    ones as (workload, proposal, Draft)."""

    def __init__(self, cfg: RunConfig, run_dir: str, run_id: str, budget: Budget):
        self.calls = LineageWriter(run_dir, "llm_calls", "driver")
        self.clients = []
        for m in cfg.llm.registry():  # an ensemble: each child's model is drawn by weight
            entry = ModelEntry(
                m.spec,
                weight=m.weight,
                temperature=m.temperature,
                max_tokens=m.max_tokens,
                max_concurrency=m.max_concurrency,
                base_url=m.base_url,
                price_in=m.price_in,
                price_out=m.price_out,
            )
            provider = make_provider(m.spec, m.base_url, recorded=recorded_llm_calls)
            self.clients.append(
                LLMClient(provider, entry, budget=budget, record=self.calls.append, run_id=run_id)
            )
        self.operator = LLMOperator(self.clients, prompt_overrides(cfg))
        self.kb_root = cfg.kernelbench.root if cfg.kernelbench else None
        self.precision = cfg.fitness.precision
        self.seed = cfg.seed
        self.deterministic = cfg.deterministic
        workers = sum(m.max_concurrency for m in cfg.llm.registry()) + 1  # +1: the analyst
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="llm")
        self._futures: list[tuple[str, dict, Future]] = []
        self._references: dict[str, str] = {}
        self.device: dict | None = None  # the fitness workers' GPU (set by the engine)

    @property
    def busy(self) -> int:
        return len(self._futures)

    def submit(self, workload: str, prop: dict) -> None:
        ctx = self._context(workload, prop)
        # The model draws from the proposal's own generator (its island and step, not its id,
        # which holds the run's): a deterministic run, and its replay, ask the same model for
        # the same child, whichever call finishes first.
        rng = random.Random(f"{self.seed}/{prop['island']}/{prop['step']}")
        kind = prop["extra"]["request"]["kind"]
        fut = self._pool.submit(self.operator.propose, kind, prop["backend"], ctx, rng)
        self._futures.append((workload, prop, fut))

    def advise(self, profile_json: str) -> Future:
        """The LLM analyst's recommendation (a dict) for a profile, from the run's first model
        on the drafting threads (the per-model limit and the budget hold for it too); the
        rules' advice where the call fails."""
        from fitness.profile import Profile
        from operators.analyst import LLMAnalyst

        client = self.clients[0]

        def complete(prompt: str) -> str:
            res = client.complete(prompt, operator="analyst")
            if not res.ok:
                raise RuntimeError(res.error or "the call failed")
            return res.text

        analyst = LLMAnalyst(complete)
        return self._pool.submit(
            lambda: analyst.recommend(Profile.from_json(profile_json)).to_dict()
        )

    def done(self) -> list[tuple[str, dict, Draft]]:
        out, left = [], []
        for item in self._futures:
            (out if item[2].done() else left).append(item)
        self._futures = left
        self.calls.maybe_flush()
        return [(w, p, _outcome(p, f)) for w, p, f in out]

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        self.calls.close()

    def _context(self, workload: str, prop: dict) -> PromptContext:
        req = prop["extra"]["request"]
        if workload not in self._references:
            self._references[workload] = resolve_workload(workload, self.kb_root).source
        samples = [*req["parents"], *req["inspirations"]]
        if self.deterministic:  # the same question in a replay: no measured numbers
            samples = [_stable(d) for d in samples]
        n = len(req["parents"])
        req = {**req, "parents": samples[:n], "inspirations": samples[n:]}
        parents = [_code(d) for d in req["parents"]]
        first = parents[0] if parents else None
        return PromptContext(
            reference=self._references[workload],
            workload=workload,
            step=prop["step"],
            precision=self.precision,
            parent=first,
            second_parent=parents[1] if len(parents) > 1 else None,
            inspirations=[_code(d) for d in req["inspirations"]],
            error=(req["parents"][0].get("reason") or "") if req["kind"] == "repair" else "",
            recommendation=(req["parents"][0].get("recommendation") or "") if parents else "",
            edit_format="diff" if req["kind"] in ("mutate", "repair") else "rewrite",
            source_backend=req.get("source_backend", ""),
            device=self.device,
        )


def prompt_overrides(cfg: RunConfig) -> list[PromptOverrides]:
    """The config's `prompts` sets as operators.prompting overrides (aux code read now)."""
    out = []
    for p in cfg.prompts:
        aux = {op: load_aux_code(paths) for op, paths in p.aux_code.items()}
        steps = range(p.steps[0], p.steps[1] + 1) if p.steps else None
        replace = {op: Path(path) for op, path in p.replace.items()}
        out.append(PromptOverrides(replace, dict(p.append), aux, steps, tuple(p.dirs)))
    return out


_FLOAT = re.compile(r"\d+\.\d+(?:e[-+]?\d+)?")
MEASURED = ("runtime_ms", "speedup_vs_eager", "speedup_vs_compile", "sol_fraction")


def _stable(d: dict) -> dict:
    """A verdict without what differs between two runs of the same candidate: times,
    speedups, and the measured figures in a reason (a correct one's reason is dropped)."""
    out = {k: v for k, v in d.items() if k not in MEASURED}
    reason = out.get("reason") or ""
    out["reason"] = "" if out.get("status") == "correct" else _FLOAT.sub("…", reason)
    return out


def _outcome(prop: dict, fut: Future) -> Draft:
    """The draft, or a generation_failure naming what went wrong before any call (a prompt
    that cannot be built): one bad request must not stop the run."""
    try:
        return fut.result()
    except Exception as e:  # noqa: BLE001 - recorded as the child's failure
        kind = prop["extra"]["request"]["kind"]
        reason = f"operator error: {type(e).__name__}: {e}".splitlines()[0]
        return Draft(kind, "", None, reason, "", "", ())


def _code(d: dict) -> CodeSample:
    return CodeSample(d["source"], {k: v for k, v in d.items() if k != "source"}, d["label"])
