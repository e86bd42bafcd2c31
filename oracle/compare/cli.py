"""`python -m oracle.compare`: run implementations against the oracle and report.
`python -m oracle.compare diff OLD/report.json NEW/report.json`: what changed (oracle.compare.diff).
`python -m oracle.compare render DIR`: rebuild report.md and report.html from DIR/report.json.
The console script `oracle-compare` is the same command.

Exit status: 0 every failure is a known defect (reports/known.toml, oracle.compare.known) and every
applicable known entry still reproduces; 1 a new mismatch or crashed target, or a known entry that
no longer reproduces; 2 usage error. With --known none: 0 all checks pass, 1 any failure.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

from .driver import SCENARIO_PREFIX

EXIT_OK, EXIT_MISMATCH, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
DEFAULT_OPTIMIZER = "adamw"


class UsageError(Exception):
    pass


def parser() -> argparse.ArgumentParser:
    from .optimizers import records
    p = argparse.ArgumentParser(
        prog=prog(),
        description="Compare optimizer implementations with the float64 oracle and write mismatch reports "
                    "(report.json, report.md, report.html). Subcommands: diff OLD NEW; render DIR.")
    p.add_argument("--version", action="version", version=version_text())
    p.add_argument("--optimizer", action="append", metavar="NAME",
                   help=f"{', '.join(records())} or all (repeatable; default {DEFAULT_OPTIMIZER})")
    p.add_argument("--impl", action="append", default=[], metavar="MODULE:NAME",
                   help="a user optimizer: a torch.optim.Optimizer subclass (or factory) with torch's constructor "
                        "signature; repeatable. When given, only these implementations run (plus --target ones)")
    p.add_argument("--target", action="append", default=[], metavar="PATTERN",
                   help="built-in targets to run, by name or glob (e.g. 'torch.adamw.fused', 'fused.*'); "
                        "default: every available target for the chosen optimizers")
    p.add_argument("--dtype", action="append", choices=("float32", "bfloat16", "float16", "fp32", "bf16", "fp16"),
                   help="param dtypes (repeatable; default all three)")
    p.add_argument("--device", default="cpu", help="cpu or cuda (default cpu)")
    p.add_argument("--steps", type=int, default=20, help="steps per case (default 20)")
    p.add_argument("--seed", type=int, action="append", help="input seed (repeatable; default 0)")
    p.add_argument("--case", metavar="PATTERN", help="only cases whose name matches this glob or substring")
    p.add_argument("--scenario", action="append", metavar="NAME",
                   help="scenarios to run (repeatable): rank_skew, construction, checkpoint, grad_scaling, "
                        "irregular, long_horizon, inputs_unchanged, all, or none. Default: all of them after the "
                        "case matrix; naming scenarios runs only those (add --case to keep matrix cases)")
    p.add_argument("--list", action="store_true", help="list the selected targets and cases, run nothing")
    p.add_argument("--report-dir", default=os.path.join("reports", "latest"),
                   help="where report.json, report.md and report.html go, written as one unit with a manifest "
                        "(default reports/latest); one run at a time per folder")
    p.add_argument("--wait", action="store_true",
                   help="if another run is writing into --report-dir, wait for it instead of refusing")
    p.add_argument("--junit-xml", metavar="FILE", help="also write the run as JUnit XML (one testcase per case)")
    p.add_argument("-q", "--quiet", dest="verbosity", action="store_const", const=-1, default=0,
                   help="no progress and no summary table: the verdict, the counts and the failure lines only")
    p.add_argument("-v", "--verbose", dest="verbosity", action="store_const", const=1,
                   help="a plain line per result row with every check's worst error and bound, skip reasons, "
                        "and every failure line at the end")
    p.add_argument("--timeout", type=float, default=300.0,
                   help="seconds one case may run before its worker is killed and an error row recorded "
                        "(default 300)")
    p.add_argument("--no-isolate", dest="isolate", action="store_false",
                   help="run cases in this process (faster start; a crashing target then ends the sweep)")
    p.add_argument("--known", metavar="FILE|none",
                   help="known-findings file judging the run (default reports/known.toml); 'none': every failure "
                        "fails the run")
    return p


def prog() -> str:
    name = os.path.basename(sys.argv[0] or "")
    return name if name == "oracle-compare" else "python -m oracle.compare"


def version_text() -> str:
    from importlib import metadata
    try:
        mine = metadata.version("optimizer-oracle")
    except metadata.PackageNotFoundError:
        mine = "unknown (not installed)"
    from .report import SCHEMA
    return f"optimizer-oracle {mine} (report schema {SCHEMA})"


def select_targets(args, optimizers, explicit_optimizer: bool):
    from . import registry as T
    chosen = []
    for spec in args.impl:
        try:
            chosen.append(T.load_impl(spec, optimizer=optimizers[0] if explicit_optimizer and len(optimizers) == 1
                                      else None))
        except ValueError as exc:
            raise UsageError(str(exc)) from exc
    if args.target or not args.impl:
        picked = T.select(args.target or ["*"], optimizers, explicit=bool(args.target))
        if args.target and not picked:
            raise UsageError(f"no target matches {args.target}; known: "
                             f"{', '.join(t.name for t in T.every_target())}")
        chosen += picked
    return chosen


def parse(argv):
    import oracle
    from .optimizers import records
    args = parser().parse_args(argv)
    known = list(records())
    opts = args.optimizer or [DEFAULT_OPTIMIZER]
    optimizers = known if "all" in opts else list(dict.fromkeys(opts))
    bad = [o for o in optimizers if o not in known]
    if bad:
        raise UsageError(f"unknown optimizer {bad[0]!r}; choose from {', '.join(known)} or all"
                         + (" (the oracle specifies it, but it has no comparison record)" if bad[0] in oracle.SPECS
                            else ""))
    if args.timeout <= 0:
        raise UsageError("--timeout must be positive")
    if args.steps < 1:
        raise UsageError("--steps must be at least 1")
    if args.device not in ("cpu", "cuda") and not args.device.startswith("cuda:"):
        raise UsageError(f"--device must be cpu or cuda, got {args.device!r}")
    args.explicit_optimizer = bool(args.optimizer) and "all" not in args.optimizer
    return args, optimizers


def scenario_names(args) -> tuple[list[str], bool]:
    """(scenarios to run, whether the case matrix runs too). Naming scenarios
    runs only those; --case then selects among their rows (and matrix cases)."""
    from .scenarios import SCENARIOS
    chosen = args.scenario or ["all"]
    if chosen == ["none"]:
        return [], True
    if "all" in chosen:
        return list(SCENARIOS), True
    unknown = [n for n in chosen if n not in SCENARIOS]
    if unknown:
        raise UsageError(f"unknown scenario {unknown[0]!r}; choose from {', '.join(SCENARIOS)}, all or none")
    return chosen, bool(args.case) and not args.case.startswith(SCENARIO_PREFIX)


def plan(args, optimizers):
    from oracle.storage import canonical
    from . import cases as C
    from .driver import jobs_for
    dtypes = tuple(canonical(d) for d in args.dtype) if args.dtype else C.DTYPES
    targets = select_targets(args, optimizers, args.explicit_optimizer)
    scenarios, matrix = scenario_names(args)
    work, skipped = [], []
    for target in targets:
        reason = target.unavailable(args.device)
        if reason is not None:  # one row for the whole target, not one per case
            skipped.append((target, reason))
            continue
        work += jobs_for(target, dtypes, args.steps, args.seed or [0], args.case, scenarios, matrix)
    if args.case and not work and not skipped:
        raise UsageError(f"no case matches {args.case!r}")
    return work, skipped


def skipped_target(target, reason: str, args):
    from .run import CaseResult
    return CaseResult(target.name, "(all cases)", target.optimizer, "", [], (args.seed or [0])[0], args.steps,
                      status="skip", reason=reason)


def execute(work, args):
    """CaseResults for the work list, in order; in a worker process unless --no-isolate."""
    if args.isolate:
        from .isolate import run_isolated
        return run_isolated(work, args.device, args.timeout)
    from .driver import run_job
    return (run_job(target, case.name, seed, case.steps, args.device, getattr(case, "pattern", None))
            for target, case, seed in work)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "diff":
        from .diff import main as diff_main
        return diff_main(argv[1:])
    if argv and argv[0] == "render":
        from .rerender import main as render_main
        return render_main(argv[1:])
    from .known import Judge, KnownFileError
    try:
        args, optimizers = parse(argv)
        work, skipped = plan(args, optimizers)
        judge = Judge.from_option(args.known, args.device)
    except (UsageError, KnownFileError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if not work and not args.list:
        # everything selected is unavailable (e.g. --device cuda without a GPU): a run that
        # checked nothing must not look like a pass
        print("error: nothing to run; every selected target is unavailable:", file=sys.stderr)
        for target, reason in skipped:
            print(f"  {target.name}: {reason}", file=sys.stderr)
        return EXIT_USAGE
    if args.list:
        for target, case, seed in work:
            print(f"{target.name}\t{case.name}\tseed={seed}")
        for target, reason in skipped:
            print(f"{target.name}\t(skipped: {reason})")
        return EXIT_OK
    from . import report
    from .console import Progress, job_label, outcome
    from .driver import rows
    from .publish import ReportDirError, ReportLock
    command = ["python", "-m", "oracle.compare", *argv]
    try:  # one run per report folder, for the whole run (released when the process ends)
        lock = ReportLock(args.report_dir, command, wait=args.wait,
                          on_wait=lambda msg: print(msg, file=sys.stderr, flush=True)).acquire()
    except ReportDirError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    print("\n".join(judge.header(sorted({t.name for t, _, _ in work}))), flush=True)
    results, complete, t0 = [skipped_target(t, r, args) for t, r in skipped], True, time.perf_counter()
    progress = Progress(len(work), sys.stderr, args.verbosity)
    judge.export_env()
    try:
        progress.start(job_label(work[0]))
        for n, (job, out) in enumerate(zip(work, execute(work, args)), 1):
            got = rows(out)
            results += got
            progress.advance(got, job_label(job), job_label(work[n]) if n < len(work) else "")
    except KeyboardInterrupt:
        complete = False
        progress.close()
        print("interrupted: writing the cases finished so far (report marked incomplete)", file=sys.stderr)
    finally:
        progress.close()
        judge.restore_env()
    known = judge.judge(results)
    try:
        doc = report.write(args.report_dir, results, command, complete, args.device,
                           {"seconds": round(time.perf_counter() - t0, 2), "known": known}, lock=False)
        if args.junit_xml:
            from .junit import write as write_junit
            write_junit(args.junit_xml, doc)
    except KeyboardInterrupt:  # held while the report was published; it is whole
        complete = False
    finally:
        lock.release()
    print("\n".join(outcome(results, judge, args, progress.done, len(work), time.perf_counter() - t0)))
    if not complete:
        return EXIT_INTERRUPTED
    return EXIT_OK if judge.exit_ok(results) else EXIT_MISMATCH
