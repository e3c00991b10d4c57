"""The `evo` command line. `python -m evo` is the same program.

Errors a user can cause print one line naming the problem and exit 2, without a traceback.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from fitness.errors import EvoError


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="evo", description="Evolutionary search for fast GPU kernels.")
    sub = p.add_subparsers(dest="command", required=True)

    e = sub.add_parser("eval", help="evaluate one candidate kernel against a workload")
    e.add_argument("candidate", help="a Python file that defines ModelNew")
    e.add_argument(
        "--workload", required=True, help="builtin:NAME, kernelbench:levelN/ID or a path"
    )
    e.add_argument("--kernelbench", help="KernelBench checkout (default: $KERNELBENCH_ROOT)")
    e.add_argument("--backend", choices=["triton", "cuda"], default="triton")
    e.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    e.add_argument("--precision", choices=["fp32", "tf32", "bf16", "fp16"], default="fp32")
    e.add_argument("--timeout", type=float, default=180.0, help="seconds per phase (default 180)")
    e.add_argument("--json", action="store_true", help="print exactly one JSON object")

    w = sub.add_parser("workloads", help="list or screen workloads")
    wsub = w.add_subparsers(dest="workloads_command", required=True)
    wl = wsub.add_parser("list", help="list builtin and KernelBench workloads")
    wl.add_argument("--kernelbench", help="KernelBench checkout (default: $KERNELBENCH_ROOT)")
    wc = wsub.add_parser("check", help="run the null candidates; flag a degenerate workload")
    wc.add_argument("workload")
    wc.add_argument("--kernelbench")
    wc.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    wc.add_argument("--json", action="store_true")

    for name, what in (
        ("run", "evolve kernels for a config's workloads"),
        ("sweep", "evolve many workloads on a Ray cluster"),
    ):
        r = sub.add_parser(name, help=what)
        r.add_argument(
            "config",
            nargs="?" if name == "run" else None,
            help="experiment YAML (default: experiments/quickstart.yaml)",
        )
        r.add_argument(
            "--run-dir", help="local path or URI (default: runs/<date>_<time>-<name>/, unique)"
        )
        r.add_argument("--from", dest="from_run", help="seed the islands from this run's best")
        r.add_argument("--max-evals", type=int, help="evaluation budget of the whole run")
        r.add_argument(
            "--seed",
            dest="seed_kernels",
            choices=["builtin", "inductor"],
            help="where islands start: builtin seed kernels, or also torch.compile's Triton",
        )
        r.add_argument(
            "--llm", help="offline | openai:MODEL | anthropic:MODEL | command:CMD | replay:RUN_DIR"
        )
        r.add_argument("--address", help="join this Ray cluster (default: an embedded one)")
        r.add_argument("--quiet", action="store_true", help="no live view")
    rs = sub.add_parser("resume", help="continue a stopped run from its run directory")
    rs.add_argument("run_dir")
    rs.add_argument("--max-evals", type=int, help="a new evaluation budget for the whole run")
    rs.add_argument("--quiet", action="store_true")

    rb = sub.add_parser("best", help="write each workload's best kernel and its verdict")
    rb.add_argument("run_dir", metavar="RUN_DIR", help="a run directory or URI")
    rb.add_argument("--out", help="folder for the files (default: RUN_DIR/best/)")

    rp = sub.add_parser("report", help="write an HTML report of one or more runs")
    rp.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="run directories or URIs")
    rp.add_argument("--out", default="report.html", help="HTML file (default: report.html)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "eval":
            return _eval(args)
        if args.command == "workloads":
            return _workloads(args)
        if args.command in ("run", "sweep", "resume"):
            return _run(args)
        if args.command == "report":
            return _report(args)
        if args.command == "best":
            return _best(args)
    except EvoError as e:
        print(f"evo: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("evo: interrupted", file=sys.stderr)
        return 130
    return 2


def _resolve(name: str, kernelbench: str | None, device: str):
    """The workload at the shape this device evaluates: SHAPES[0] on the CPU interpreter."""
    from fitness.judge import workload_for_device
    from fitness.workloads import resolve_workload

    return workload_for_device(resolve_workload(name, kernelbench), device)


def _eval(args) -> int:
    from fitness.guardrails import defines_model_new
    from fitness.judge import EvalOptions, evaluate, resolve_device
    from fitness.precision import parse_precision

    path = Path(args.candidate)
    if not path.is_file():
        raise EvoError(f"candidate file {str(path)!r} does not exist")
    source = path.read_text()
    if not defines_model_new(source):
        raise EvoError(
            f"candidate file {str(path)!r} defines no class ModelNew (or does not parse)"
        )
    if args.timeout <= 0:
        raise EvoError("--timeout must be a positive number of seconds")
    device = resolve_device(args.device)
    workload = _resolve(args.workload, args.kernelbench, device)
    opts = EvalOptions(
        backend=args.backend,
        device=device,
        precision=parse_precision(args.precision),
        timeout=args.timeout,
        progress=None if args.json else _progress_printer(),
    )
    if not args.json:
        print(f"evaluating {path} on {workload.name} ({device}, {args.precision})", file=sys.stderr)
    result = evaluate(source, workload, opts)
    if args.json:
        print(result.to_json())
    else:
        _print_result(result)
    return 0


def _progress_printer():
    """Prints each phase of a long evaluation to stderr, with the seconds since the start."""
    import time

    start = time.monotonic()

    def show(phase: str) -> None:
        print(f"  [{time.monotonic() - start:6.1f} s] {phase}", file=sys.stderr, flush=True)

    return show


def _print_result(r) -> None:
    def ms(v):
        return "-" if v is None else f"{v:.4g} ms"

    def x(v):
        return "-" if v is None else f"{v:.3g}x"

    print(f"status     {r.status.value}: {r.reason}")
    print(f"runtime    {ms(r.runtime_ms)} (IQR {ms(r.runtime_iqr_ms)})")
    print(f"eager      {ms(r.baseline_eager_ms)}   speedup {x(r.speedup_vs_eager)}")
    print(f"compile    {ms(r.baseline_compile_ms)}   speedup {x(r.speedup_vs_compile)}")
    if r.sol_ms is not None:
        print(f"SOL floor  {ms(r.sol_ms)}   fraction {r.sol_fraction:.3f}")
    print(f"device     {r.device}   comparable={r.comparable}   precision={r.precision}")
    if r.error_fraction is not None:
        print(f"error      {r.error_fraction:.3g} of the allowed bound")
    walls = ", ".join(r.isolation) if r.isolation else "none (see README: Isolation)"
    print(f"isolation  {walls}")
    if r.audit:
        print("audit      speedup above the audit bound: check this kernel by hand")
    if r.log and r.status.value != "correct":
        print("log:\n" + r.log[-2000:])


def _workloads(args) -> int:
    from fitness.workloads import list_workloads

    if args.workloads_command == "list":
        for name in list_workloads(args.kernelbench):
            print(name)
        return 0
    from fitness.judge import EvalOptions, resolve_device
    from fitness.screening import screen

    device = resolve_device(args.device)
    workload = _resolve(args.workload, args.kernelbench, device)
    if not args.json:
        print(f"screening {workload.name} with null candidates on {device}", file=sys.stderr)
    report = screen(workload, EvalOptions(device=device))
    if args.json:
        print(json.dumps(report.to_json_dict()))
    else:
        for name, r in report.results.items():
            print(f"{name:14s} {r.status.value:18s} {r.reason}")
        verdict = "DEGENERATE" if report.degenerate else "ok (every null candidate fails)"
        print(f"{workload.name}: {verdict}")
    return 0


def _best(args) -> int:
    """`evo best`: each workload's best kernel, from the lineage (Parquet only)."""
    from analysis.best import write_best
    from analysis.load import AnalysisError

    try:
        written = write_best(args.run_dir, args.out)
    except AnalysisError as e:
        raise EvoError(str(e)) from None
    for path in written:
        print(path)
    return 0


def _report(args) -> int:
    """`evo report` and `evo best`: the only places the engine's CLI imports `analysis`."""
    from analysis.load import AnalysisError
    from analysis.report import write_report

    try:
        out = write_report(args.run_dirs, args.out)
    except AnalysisError as e:
        raise EvoError(str(e)) from None
    print(f"evo: report written to {out}", file=sys.stderr)
    return 0


def _run(args) -> int:
    import os

    import torch

    if not torch.cuda.is_available():  # the interpreter path: set before any kernel exists
        os.environ.setdefault("TRITON_INTERPRET", "1")
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    from evo import engine
    from evo.config import load_config, reserve_run_dir

    if args.command == "resume":
        res = engine.resume(args.run_dir, args.max_evals, args.quiet)
    else:
        over = {}
        if args.max_evals is not None:
            over["budgets.max_evals"] = args.max_evals
        if args.llm:  # one model in place of the config's (and of its registry)
            over["llm.spec"] = args.llm
            over["llm.models"] = []
        if args.seed_kernels:
            over["seed_kernels"] = args.seed_kernels
        if args.address:
            over["address"] = args.address
        if args.run_dir:
            over["run_dir"] = args.run_dir
        cfg = load_config(args.config, over)
        if not cfg.llm.active:
            print(
                "evo: no LLM configured: the offline parameter operator mutates launch and "
                "tiling parameters only",
                file=sys.stderr,
            )
        else:
            names = ", ".join(m.spec for m in cfg.llm.registry())
            print(f"evo: the LLM operators call {names}", file=sys.stderr)
        run_dir = cfg.run_dir or reserve_run_dir(cfg)
        res = engine.run_config(cfg, run_dir, args.from_run, args.quiet)
    print(json.dumps(res, default=str))
    # A script must tell a run stopped by Ctrl-C or SIGTERM from one that finished.
    return 130 if res.get("stop") == "signal" else 0


if __name__ == "__main__":
    raise SystemExit(main())
