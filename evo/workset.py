"""Which workloads a run evolves: the config's list plus its KernelBench sweep, each with its
seed kernels and the other shapes a geomean metric evaluates."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from evo.config import RunConfig
from fitness.errors import EvoError
from fitness.workloads import Workload, resolve_workload


@dataclass(frozen=True)
class RunWorkload:
    name: str
    # backend -> its seeds, [{"source", "description"}]; [] starts from the initial operator
    # (a model), or from compiler seeds the engine adds (seed_kernels: inductor)
    seeds: dict[str, list[dict]]
    extra_shapes: list[dict] = field(default_factory=list)
    has_shapes: bool = False  # the workload lists SHAPES (the judge checks them too)


def run_workloads(cfg: RunConfig) -> list[RunWorkload]:
    """Every workload of the run. A backend without a seed kernel starts from the initial
    operator (a model writes one from the reference); without a model that backend has no
    island, and a workload left with none is an error."""
    out = []
    kb_root = cfg.kernelbench.root if cfg.kernelbench else None
    for name in [*cfg.workloads, *kernelbench_names(cfg)]:
        w = resolve_workload(name, kb_root)
        seeds: dict[str, list[dict]] = {}
        compiled = cfg.seed_kernels == "inductor"
        for backend in cfg.backends:
            if backend == "triton" and w.seed_path is not None:
                seeds[backend] = [{"source": w.seed_path.read_text(), "description": "builtin"}]
            elif cfg.llm.active or (backend == "triton" and compiled):
                seeds[backend] = []
        if not seeds:
            raise EvoError(
                f"workload {name}: no seed kernel for {', '.join(cfg.backends)}; without a "
                "model (llm.spec) a run starts from one, and the offline operator cannot write "
                "one from the reference (seed_kernels: inductor seeds Triton islands from "
                "torch.compile on a GPU)"
            )
        out.append(RunWorkload(w.name, seeds, extra_shapes(cfg, w), bool(w.shapes)))
    return out


def extra_shapes(cfg: RunConfig, w: Workload) -> list[dict]:
    """The shapes a geomean metric also evaluates: `fitness.shapes` of SHAPES (all by
    default), less the default shape."""
    if not cfg.fitness.metric.startswith("geomean_"):
        return []
    picks = cfg.fitness.shapes
    for k in picks or ():
        if k >= len(w.shapes):
            raise EvoError(f"fitness.shapes: {w.name} has {len(w.shapes)} SHAPES, no index {k}")
    chosen = [w.shapes[k] for k in picks] if picks is not None else list(w.shapes)
    return [dict(s) for s in chosen if dict(s) != dict(w.overrides)]


def kernelbench_names(cfg: RunConfig) -> list[str]:
    """The sweep's KernelBench problems: the listed ones, else every problem of the levels."""
    kb = cfg.kernelbench
    if kb is None:
        return []
    if kb.problems:
        return [f"kernelbench:{p}" for p in kb.problems]
    from fitness.workloads import KernelBenchIndex

    root = kb.root or os.environ.get("KERNELBENCH_ROOT")
    if not root:
        raise EvoError("kernelbench.root: not set, and KERNELBENCH_ROOT is not set either")
    return [f"kernelbench:{p.key}" for p in KernelBenchIndex(root).problems(kb.levels)]
