"""`python -m oracle.compare`: run implementations against the oracle and report.
`python -m oracle.compare diff OLD/report.json NEW/report.json`: what changed (oracle.compare.reporting.diff).
`python -m oracle.compare render DIR`: rebuild report.md and report.html from DIR/report.json.
`python -m oracle.compare merge DIR...`: combine --shard K/N reports into one (oracle.compare.running.shard).
The console script `oracle-compare` is the same command.

Exit status: 0 every failure is a known defect (reports/known.toml, oracle.compare.checking.known) and every
applicable known entry still reproduces; 1 a new mismatch or crashed target, or a known entry that
no longer reproduces; 2 usage error. With --known none: 0 all checks pass, 1 any failure.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

from .measuring import phases
from .measuring.phases import phase
from .running.driver import SCENARIO_PREFIX

EXIT_OK, EXIT_MISMATCH, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
MAX_TIMEOUT = 7 * 24 * 3600.0
DEFAULT_OPTIMIZER = "adamw"


class UsageError(Exception):
    pass


def parser() -> argparse.ArgumentParser:
    from .optimizers import records
    p = argparse.ArgumentParser(
        prog=prog(),
        description="Compare optimizer implementations with the float64 oracle and write mismatch reports "
                    "(report.json, report.md, report.html). Subcommands: diff OLD NEW; render DIR; merge DIR... (shards of a --shard K/N sweep).")
    p.add_argument("--version", action="version", version=version_text())
    p.add_argument("--optimizer", action="append", metavar="NAME",
                   help=f"{', '.join(records())} or all (repeatable; default {DEFAULT_OPTIMIZER})")
    p.add_argument("--impl", action="append", default=[], metavar="MODULE:NAME",
                   help="a user optimizer: a torch.optim.Optimizer subclass (or factory) with torch's constructor "
                        "signature; repeatable. When given, only these implementations run (plus --target ones)")
    p.add_argument("--no-infer", dest="infer", action="store_false",
                   help="judge an --impl by its declarations and the spec's defaults only; by default what it does "
                        "not declare is inferred first (oracle.compare.inference.infer) and the report prints the declaration")
    p.add_argument("--inferred-from", metavar="REPORT_JSON",
                   help="judge each --impl as the run that wrote this report.json inferred it (its \"inferred\" "
                        "record) instead of inferring again; repro commands of --impl rows pass it")
    p.add_argument("--target", action="append", default=[], metavar="PATTERN",
                   help="built-in targets to run, by name or glob (e.g. 'torch.adamw.fused', 'fused.*'); "
                        "default: every available target for the chosen optimizers")
    p.add_argument("--dtype", action="append",
                   choices=("float32", "bfloat16", "float16", "fp32", "bf16", "fp16", "complex64", "complex128"),
                   help="param dtypes (repeatable; default float32, bfloat16, float16 and complex64, the last for "
                        "optimizers with a complex form)")
    p.add_argument("--device", default="cpu", help="cpu or cuda (default cpu)")
    p.add_argument("--steps", type=int, default=20, help="steps per case (default 20)")
    p.add_argument("--seed", type=int, action="append", help="input seed (repeatable; default 0)")
    p.add_argument("--case", metavar="PATTERN", help="only cases whose name matches this glob or substring")
    p.add_argument("--scenario", action="append", metavar="NAME",
                   help="scenarios to run (repeatable): rank_skew, construction, checkpoint, grad_scaling, "
                        "irregular, long_horizon, inputs_unchanged, lr_schedule, ddp_bucket_view, zero_redundancy, "
                        "fsdp2, fsdp2_layers, fsdp2_bf16, dcp_reshard, all, or none. Default: all but the multi-process "
                        "wrappers (ddp_bucket_view .. dcp_reshard: name them, or all) after the case matrix; naming "
                        "scenarios runs only those (add --case to keep matrix cases)")
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
    p.add_argument("--jobs", type=int, metavar="N",
                   help="worker processes running cases side by side, each single-threaded (default: the number "
                        "of cores). Output, report and exit status are the same for any N")
    p.add_argument("--profile", action="store_true",
                   help="end with where the run's time went: wall and CPU seconds per phase (plan, worker start-up, "
                        "each scenario kind, the target's steps, the oracle and its error model, reading state "
                        "back, comparing, teach, the report), summed over every process of the run")
    p.add_argument("--memory-limit", type=float, metavar="MB",
                   help="kill a worker whose resident memory (with its children) exceeds MB megabytes; its case "
                        "becomes an error row (default: no limit)")
    p.add_argument("--shard", metavar="K/N",
                   help="run the K-th of N deterministic parts of the selected cases (balanced by measured cost, "
                        "the same split on every machine); combine with `python -m oracle.compare merge DIR...`")
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
    from .reporting.report import SCHEMA
    return f"optimizer-oracle {mine} (report schema {SCHEMA})"


def probe_imports(specs: list, timeout: float) -> list:
    """T.probe_import of each --impl at once, each in its own interpreter as before: a probe is mostly
    waiting for its interpreter to import torch, and five in a row cost 6 s before any work."""
    from concurrent.futures import ThreadPoolExecutor

    from . import registry as T
    if len(specs) < 2:
        return [T.probe_import(spec, timeout) for spec in specs]
    with ThreadPoolExecutor(max_workers=min(len(specs), 8)) as pool:
        return list(pool.map(lambda spec: T.probe_import(spec, timeout), specs))


def select_targets(args, optimizers, explicit_optimizer: bool):
    from . import registry as T
    from .targets.declare import with_inferred
    chosen = []
    for spec, problem in zip(args.impl, probe_imports(args.impl, min(args.timeout, IMPORT_TIMEOUT))):
        if problem:
            raise UsageError(problem)
        try:
            chosen.append(T.load_impl(spec, optimizer=optimizers[0] if explicit_optimizer and len(optimizers) == 1
                                      else None, inferred=False))
        except ValueError as exc:
            raise UsageError(str(exc)) from exc
    if args.target or not args.impl:
        picked = T.select(args.target or ["*"], optimizers, explicit=bool(args.target))
        if args.target and not picked:
            raise UsageError(f"no target matches {args.target}; known: "
                             f"{', '.join(t.name for t in T.every_target())}")
        chosen += picked
    args.inferred = []
    recorded = recorded_inferences(args.inferred_from) if getattr(args, "inferred_from", None) else None
    if getattr(args, "infer", True):
        for target in chosen:
            if target.infer and target.unavailable(args.device) is None:
                found = infer_target(target, args) if recorded is None else reused_inference(target, recorded, args)
                if found is not None:
                    args.inferred.append(found)
    return [with_inferred(t) for t in chosen]


def recorded_inferences(path: str) -> dict:
    """target name -> inference, from a report.json's "inferred" record (data we do not trust: each
    candidate must rebuild, or the run stops before any work)."""
    from .inference.infer import lines
    from .reporting.schema import load
    from .targets.declare import Candidate
    from .isolation.untrusted import DataFileError
    try:
        doc = load(path)
    except DataFileError as exc:
        raise UsageError(f"--inferred-from {exc}") from None
    found = doc.get("inferred")
    if not isinstance(found, list):
        raise UsageError(f"--inferred-from {path}: no \"inferred\" record (that run inferred nothing)")
    out = {}
    for d in found:
        try:
            if d.get("candidate"):
                Candidate.from_json(d["candidate"])
            lines(d)  # what is printed of it must print
            out[str(d["target"])] = d
        except (AttributeError, KeyError, TypeError, ValueError) as exc:
            raise UsageError(f"--inferred-from {path}: an unusable inference record ({type(exc).__name__}: "
                             f"{exc})") from None
    return out


def reused_inference(target, recorded: dict, args) -> dict | None:
    """The recorded inference of `target`, exported to the workers as a fresh one would be."""
    from .inference.infer import lines
    from .targets.declare import ENV, export
    if target.name not in recorded:
        raise UsageError(f"--inferred-from {args.inferred_from}: no inference of {target.name} there (it has "
                         f"{', '.join(sorted(recorded)) or 'none'}); drop the flag to infer it again")
    found = recorded[target.name]
    if found.get("candidate"):
        export({**json.loads(os.environ.get(ENV) or "{}"), target.name: found["candidate"]})
    print(f"the conventions of {target.name} as {args.inferred_from} recorded them:", file=sys.stderr)
    print("\n".join(lines(found)), file=sys.stderr, flush=True)
    return found


INFER_TIMEOUT = 600.0  # fingerprinting a target: a few hundred short probe runs (capped by --timeout x 10)


def infer_target(target, args) -> dict | None:
    """Fingerprint a target that does not declare its conventions, in its own interpreter (a crash or
    hang there costs the inference, not the run): the inference as report.json records it, also
    exported to the worker processes; None when it could not run (said on stderr; the target is then
    judged by what it declares)."""
    from .inference.infer import lines
    from .isolation.processes import MemoryLimitExceeded, run_child
    from .targets.declare import ENV, export
    name = target.name[len("impl:"):] if target.name.startswith("impl:") else target.name
    # each probe is one short case: --timeout bounds it (a hang costs one case's time, not the budget),
    # and --memory-limit bounds the whole inference as it bounds one worker
    cmd = [sys.executable, "-m", "oracle.compare.inference.infer", name, "--optimizer", target.optimizer, "--device",
           args.device, "--seed", str((args.seed or [0])[0]), "--json", "--probe-timeout", str(args.timeout)]
    print(f"inferring the conventions of {target.name} (--no-infer to skip) ...", file=sys.stderr, flush=True)
    try:
        # (the inference drops any exported inference from its own environment itself)
        with phase("inference (--impl, its own process)"):
            out = run_child(cmd, min(INFER_TIMEOUT, 10 * args.timeout), {**os.environ, "OMP_NUM_THREADS": "1"},
                            memory_limit_mb=args.memory_limit)
        found = json.loads(out.stdout)
    except subprocess.TimeoutExpired:
        print(f"warning: inferring {target.name} did not finish in time; judging it by its declarations",
              file=sys.stderr)
        return None
    except MemoryLimitExceeded as exc:
        print(f"warning: inferring {target.name} {exc}; judging it by its declarations", file=sys.stderr)
        return None
    except ValueError:
        tail = " ".join(out.stderr.strip().splitlines()[-1:])
        print(f"warning: inferring {target.name} failed (status {out.returncode}: {tail}); judging it by its "
              f"declarations", file=sys.stderr)
        return None
    if found.get("candidate"):
        export({**json.loads(os.environ.get(ENV) or "{}"), target.name: found["candidate"]})
    print("\n".join(lines(found)), file=sys.stderr, flush=True)
    return found


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
    if not math.isfinite(args.timeout) or args.timeout <= 0:
        raise UsageError(f"--timeout must be a positive number of seconds, got {args.timeout:g}")
    if args.timeout > MAX_TIMEOUT:  # a larger one overflows the clocks it is added to, after the work
        raise UsageError(f"--timeout must be at most {MAX_TIMEOUT:g} s (a week) per case, got {args.timeout:g}")
    if args.steps < 1:
        raise UsageError("--steps must be at least 1")
    bad_seeds = [s for s in args.seed or [] if s < 0]
    if bad_seeds:
        raise UsageError(f"--seed must be a non-negative integer, got {bad_seeds[0]}")
    if args.jobs is not None and args.jobs < 1:
        raise UsageError(f"--jobs must be at least 1, got {args.jobs}")
    if args.memory_limit is not None and not (math.isfinite(args.memory_limit) and args.memory_limit > 0):
        raise UsageError(f"--memory-limit must be a positive number of megabytes, got {args.memory_limit:g}")
    if args.shard is not None:
        from .running.shard import ShardError, parse_shard
        try:
            args.shard = parse_shard(args.shard)
        except ShardError as exc:
            raise UsageError(str(exc)) from None
    if args.device not in ("cpu", "cuda") and not args.device.startswith("cuda:"):
        raise UsageError(f"--device must be cpu or cuda, got {args.device!r}")
    args.explicit_optimizer = bool(args.optimizer) and "all" not in args.optimizer
    return args, optimizers


def scenario_names(args) -> tuple[list[str], bool]:
    """(scenarios to run, whether the case matrix runs too). Naming scenarios
    runs only those; --case then selects among their rows (and matrix cases)."""
    from .scenarios import SCENARIOS
    if not args.scenario:  # the default: every scenario but the opt-in multi-process wrappers
        return [n for n, sc in SCENARIOS.items() if sc.in_default], True
    chosen = args.scenario
    if chosen == ["none"]:
        return [], True
    if "all" in chosen:
        return list(SCENARIOS), True
    unknown = [n for n in chosen if n not in SCENARIOS]
    if unknown:
        raise UsageError(f"unknown scenario {unknown[0]!r}; choose from {', '.join(SCENARIOS)}, all or none")
    return chosen, bool(args.case) and not args.case.startswith(SCENARIO_PREFIX)


def plan(args, optimizers, pool=None, judge=None):
    """(work, skipped): the run's (target, case, seed) jobs and the unusable targets with why. With a
    pool, the jobs of targets that need no check of their own start while the checks run (Pool.probe's
    early jobs, seeing the environment the run gives every job: `judge`'s known-findings file)."""
    from oracle.storage import canonical
    from .checking import cases as C
    from .running.driver import jobs_for
    from .targets.base import checked_in_worker
    dtypes = tuple(canonical(d) for d in args.dtype) if args.dtype else C.DTYPES
    targets = select_targets(args, optimizers, args.explicit_optimizer)
    scenarios, matrix = scenario_names(args)

    made: dict = {}

    def jobs(k):  # targets[k]'s jobs, made once (early ones are the same jobs as the work's)
        if k not in made:
            made[k] = jobs_for(targets[k], dtypes, args.steps, args.seed or [0], args.case, scenarios, matrix)
        return made[k]

    early = []
    if pool is not None and args.shard is None:  # a shard runs a part of the work, known only at the end
        early = [job for k, t in enumerate(targets)
                 if not checked_in_worker(t, args.device) and t.unavailable(args.device) is None for job in jobs(k)]
    if judge is not None and early:
        judge.export_env()
    try:
        reasons = availability(targets, args.device, pool, early)
    finally:
        if judge is not None and early:
            judge.restore_env()
    work, skipped = [], []
    for k, target in enumerate(targets):
        reason = reasons[target.name]
        if reason is not None:  # one row for the whole target, not one per case
            skipped.append((target, reason))
            continue
        work += jobs(k)
    if args.case and not work:
        check_case_pattern(args.case, optimizers, dtypes, args.steps, scenarios)
    return work, skipped


def availability(targets, device: str, pool=None, early=()) -> dict:
    """{target name: why it is not usable on `device`, or None}. A target whose check is its own (it imports
    its library: bitsandbytes, DeepSpeed, torchao) is asked in the pool's workers when there is a pool:
    the library never loads in this process, and a worker that loads it for the check keeps it for the
    jobs (the CLI imported bitsandbytes, and with it torch's compiler stack, for 2.7 s of a 3.4 s plan)."""
    from .targets.base import checked_in_worker
    if pool is None:
        return {t.name: t.unavailable(device) for t in targets}
    asked = [t for t in targets if checked_in_worker(t, device)]
    reasons = pool.probe(asked, device, early=early)
    return {t.name: reasons[t.name] if t.name in reasons else t.unavailable(device) for t in targets}


def check_case_pattern(pattern: str, optimizers, dtypes, steps: int, scenarios) -> None:
    """A --case that matches no case of the selected optimizers (in any target, available or not) is a
    usage error saying so, not "every target is unavailable"."""
    import fnmatch
    from .checking import cases as C
    if any(C.cases(o, dtypes, steps, pattern) for o in optimizers):
        return
    if any(fnmatch.fnmatch(f"scenario:{s}", pattern) or pattern in f"scenario:{s}" for s in scenarios or ()):
        return
    example = next((c.name for o in optimizers for c in C.cases(o, dtypes, steps)), "adamw/fp32/wd0.1/single/normal")
    raise UsageError(f"--case {pattern!r} matches no case of {', '.join(optimizers)} "
                     f"(case names look like {example}; --list prints them)")


def skipped_target(target, reason: str, args):
    from .checking.case_run import CaseResult
    return CaseResult(target.name, "(all cases)", target.optimizer, "", [], (args.seed or [0])[0], args.steps,
                      status="skip", reason=reason)


IMPORT_TIMEOUT = 120.0  # an --impl module's trial import (capped by --timeout)
REPORT_PROBE_BYTES = 1 << 20  # a report dir must take a write of this size before anything runs
REPORT_MIN_FREE = 64 << 20    # and its disk must have this much room left


def check_junit_path(path: str, report_dir: str) -> None:
    """Refuse a --junit-xml that would fail or do harm at the end: empty, not encodable, a folder, in a
    folder that does not exist or cannot be written, or one of the report folder's own files (it would
    replace the report with XML)."""
    from .reporting.publish import JOURNAL, LOCK, MANIFEST
    if not path:
        raise UsageError("--junit-xml is empty; name a file")
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        raise UsageError(f"--junit-xml {path!r} is not UTF-8 encodable") from None
    if os.path.isdir(path):
        raise UsageError(f"--junit-xml {path!r} is a folder; name a file")
    folder = os.path.dirname(os.path.abspath(path))
    ours = {"report.json", "report.md", "report.html", MANIFEST, JOURNAL, LOCK}
    if os.path.realpath(folder) == os.path.realpath(report_dir) and (
            os.path.basename(path) in ours or os.path.basename(path).startswith(".")):
        raise UsageError(f"--junit-xml {path!r} is one of the report's own files in --report-dir; name another")
    if not os.path.isdir(folder):
        raise UsageError(f"--junit-xml {path!r}: its folder {folder} does not exist")
    if not os.access(folder, os.W_OK):
        raise UsageError(f"--junit-xml {path!r}: its folder {folder} is not writable")


def check_report_dir(path: str) -> None:
    """Refuse a report dir the report could not be written to, before any case runs: a file, a place
    that cannot be created or written (read-only, no permission), a full disk. Nothing in it changes."""
    if not path:
        raise UsageError("--report-dir is empty; name a folder (default reports/latest)")
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        raise UsageError(f"--report-dir {path!r} cannot be written in a report (not UTF-8 encodable)") from None
    if os.path.exists(path) and not os.path.isdir(path):
        raise UsageError(f"--report-dir {path!r} exists and is not a folder")
    check_report_files(path)
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"--report-dir {path!r} cannot be created: {exc.strerror or exc}") from None
    try:
        fd, tmp = tempfile.mkstemp(dir=path, prefix=".write-probe-")
    except OSError as exc:
        raise UsageError(f"--report-dir {path!r} is not writable: {exc.strerror or exc}") from None
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(b"\0" * REPORT_PROBE_BYTES)
            fh.flush()
            os.fsync(fh.fileno())
    except OSError as exc:
        raise UsageError(f"--report-dir {path!r} is not writable: {exc.strerror or exc}") from None
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
    free = shutil.disk_usage(path).free
    if free < REPORT_MIN_FREE:
        raise UsageError(f"--report-dir {path!r}: its disk has {free / 2**20:.1f} MB free; a report needs up to "
                         f"{REPORT_MIN_FREE >> 20} MB")


def check_report_files(path: str) -> None:
    """What an earlier run (or someone else) left in the folder that would stop this run's report at the
    end: a published name that is a folder or a link, a journal that is not one of ours."""
    from .reporting.publish import JOURNAL, JOURNAL_LIMIT, MANIFEST, checked_journal
    from .reporting.report import FILES as REPORT_FILES
    from .isolation.untrusted import DataFileError, is_plain_file, read_json
    for name in (*REPORT_FILES, MANIFEST):
        where = os.path.join(path, name)
        if os.path.lexists(where) and not is_plain_file(where):
            raise UsageError(f"--report-dir {path!r}: {where} exists and is not a regular file (a folder or a "
                             f"link); remove it or choose another --report-dir")
    journal = os.path.join(path, JOURNAL)
    if os.path.lexists(journal):
        try:
            checked_journal(journal, read_json(journal, JOURNAL_LIMIT, "report journal"))
        except DataFileError as exc:
            raise UsageError(f"--report-dir {path!r}: {exc}; remove it to let the folder be written again") from None


def recorded_argv(argv) -> list:
    """The command as the report records it: without --jobs and --shard, which change neither the
    results nor their order (so reports of any --jobs, and merged shards, are the same bytes)."""
    from .running.shard import strip_option
    return ["python", "-m", "oracle.compare", *strip_option(strip_option(list(argv), "--jobs"), "--shard")]


def execute(work, args, pool=None):
    """CaseResults for the work list, in order; in worker processes unless --no-isolate."""
    if args.isolate:
        from .running.workers import run_isolated
        return run_isolated(work, args.device, args.timeout, pool=pool)
    return in_process(work, args.device)


def in_process(work, device: str):
    """--no-isolate: each job in this process, between the same integrity checks as in a worker
    (oracle.compare.isolation.tamper; code a target's module ran when it was imported, before the run, is not
    seen: isolation is what keeps a target out of the judging process)."""
    from .isolation import tamper
    from .running.driver import run_job, untampered
    clean = tamper.snapshot()
    for target, case, seed in work:
        tamper.settle(clean)
        result = run_job(target, case.name, seed, case.steps, device, getattr(case, "pattern", None))
        yield untampered(clean, result, target.name, target.optimizer, case.name, seed, case.steps)[0]


EXIT_TERMINATED = 128 + signal.SIGTERM


class Terminated(KeyboardInterrupt):
    """SIGTERM (what a CI runner sends when a job is cancelled): handled exactly as Ctrl-C, so the
    finished cases are written (report marked incomplete); the exit status is 143, not 130."""


_TERMINATED: list = []  # set by the SIGTERM handler of this process's current main() call


def _on_sigterm(signum, frame):
    _TERMINATED.append(signum)
    raise Terminated()


@contextlib.contextmanager
def sigterm_as_interrupt():
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _TERMINATED.clear()
    old = signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


@contextlib.contextmanager
def deferred_sigint():
    """Ctrl-C and SIGTERM are held back (and counted) while the report is written, so it is written whole."""
    hits: list = []
    if threading.current_thread() is not threading.main_thread():
        yield hits
        return

    def hold(signum, frame):
        hits.append(signum)
        if signum == signal.SIGTERM:
            _TERMINATED.append(signum)
    old = {s: signal.signal(s, hold) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield hits
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "diff":
        from .reporting.diff import main as diff_main
        return diff_main(argv[1:])
    if argv and argv[0] == "render":
        from .reporting.render import main as render_main
        return render_main(argv[1:])
    if argv and argv[0] == "merge":
        return merge_main(argv[1:])
    env, outer = None, None
    try:
        # Inferred conventions reach this run's workers through the environment; one
        # left by an earlier run in this process (tests, notebooks calling main) must
        # not judge this one, least of all under --no-infer. (Imported in here: it
        # imports torch, and a Ctrl-C during that import is handled below.)
        with sigterm_as_interrupt():
            from .targets.declare import ENV as env
            outer = os.environ.pop(env, None)
            code = _main(argv)
        return EXIT_TERMINATED if code == EXIT_INTERRUPTED and _TERMINATED else code
    except KeyboardInterrupt:  # before any case ran (importing torch, planning): nothing to keep
        print("interrupted before any case finished: no report written (the previous one is left as it was)",
              file=sys.stderr)
        return EXIT_TERMINATED if _TERMINATED else EXIT_INTERRUPTED
    finally:
        if env is not None:
            os.environ.pop(env, None)
            if outer is not None:
                os.environ[env] = outer


def _main(argv) -> int:
    started: list = []  # the worker pool, once started: closed on every way out
    try:
        return _run(argv, started)
    finally:
        for pool in started:
            pool.close()


def prestarted(args) -> int:
    """How many workers start before the plan. A sweep (no --target, --case or --impl) has work for all
    of them, and each one's imports overlap the plan and the other's (measured on 2 cores, default
    job: the availability checks done 0.6 s sooner in one timed run; side by side, medians of 5,
    17.9 s against 18.2 s, within this machine's noise). A narrow run (one case, a reproduce command) starts
    one: a second would compete with the first's imports for a job it may never get. An outside
    optimizer's inference runs in this process first: one worker, as before."""
    return 1 if (args.target or args.case or args.impl) else 2


def early_workers(argv) -> tuple[int, int | None]:
    """(workers to start before the arguments are parsed, --jobs if given): parsing needs the
    specification (NumPy and every optimizer module, a fifth of a second), during which a second core
    would idle; a worker started first imports torch meanwhile. 0 where the run may start none (--list,
    --no-isolate, help, version), or where argv does not read plainly (an abbreviated option: the full
    parse decides, as before). prestarted's count otherwise; parse's result corrects both (_run)."""
    pre = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    for flag in ("-h", "--help", "--version", "--list", "--no-isolate"):
        pre.add_argument(flag, action="store_true")
    for option in ("--target", "--case", "--impl"):
        pre.add_argument(option, action="append")
    pre.add_argument("--jobs", type=int)
    try:
        known, rest = pre.parse_known_args(argv)
    except (SystemExit, ValueError):  # argparse exits on a malformed value: the full parse reports it
        return 0, None
    if known.h or known.help or known.version or known.list or known.no_isolate:
        return 0, None
    if any(arg.startswith("--") and arg != "--" and "=" not in arg and
           any(full.startswith(arg) and full != arg for full in ("--help", "--version", "--list", "--no-isolate"))
           for arg in rest):
        return 0, None
    return prestarted(known), known.jobs


def _start_early(argv, started: list):
    """The pool, with early_workers' workers started (None: none), before parse."""
    count, jobs = early_workers(argv)
    if not count:
        return None
    from .running.workers import Pool, default_jobs
    pool = Pool(jobs or default_jobs()).prestart(count)
    started.append(pool)
    return pool


def _run(argv, started: list) -> int:
    from .checking.known import Judge, KnownFileError
    from .running.workers import WorkerStartError
    phases.take()  # this run's phases only (tests call main() many times in one process)
    t_start = time.perf_counter()
    pool = None
    try:
        pool = _start_early(argv, started)  # their imports (torch: seconds) overlap the parse and the plan
        args, optimizers = parse(argv)
        if pool is not None and (args.list or not args.isolate):
            started.remove(pool)
            pool.close()
            pool = None
        if not args.list:
            check_report_dir(args.report_dir)
            if args.junit_xml is not None:
                check_junit_path(args.junit_xml, args.report_dir)
            if args.isolate:  # workers start now, if not already: their imports overlap the plan
                from .running.workers import Pool, default_jobs
                if pool is None:
                    pool = Pool(args.jobs or default_jobs())
                    started.append(pool)
                pool.configure(args.jobs or default_jobs(), args.timeout, args.memory_limit)
                pool.prestart(prestarted(args))
        judge = Judge.from_option(args.known, args.device)
        with phase("plan: targets, availability, cases"):
            if pool is not None:  # the classes the targets wrap, as a worker read them: no torch here
                from .targets.classes import learn
                learn(pool.class_facts())
            work, skipped = plan(args, optimizers, pool, judge)
    except (UsageError, KnownFileError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except WorkerStartError as exc:  # no worker to ask whether a library's targets are usable here
        print(f"error: {exc}; stopped before any case ran: no report written", file=sys.stderr)
        return EXIT_INTERRUPTED
    if not work and not args.list:
        # everything selected is unavailable (e.g. --device cuda without a GPU): a run that
        # checked nothing must not look like a pass
        print("error: nothing to run; every selected target is unavailable:", file=sys.stderr)
        for target, reason in skipped:
            print(f"  {target.name}: {reason}", file=sys.stderr)
        return EXIT_USAGE
    shard_meta, positions = None, list(range(len(work)))
    if args.shard is not None:
        from .running.shard import assign, selection_digest
        k, n = args.shard
        shard_meta = {"index": k, "count": n, "selection": selection_digest(work, skipped), "jobs": len(work),
                      "device": args.device, "known": args.known}
        owner = assign(work, n)
        positions = [i for i in range(len(work)) if owner[i] == k - 1]
        work = [work[i] for i in positions]
        if k != 1:  # the rows of unavailable targets go with shard 1
            skipped = []
    if args.list:
        for target, case, seed in work:
            print(f"{target.name}\t{case.name}\tseed={seed}")
        for target, reason in skipped:
            print(f"{target.name}\t(skipped: {reason})")
        return EXIT_OK
    from .reporting.console import Progress, job_label
    from .running.driver import rows
    from .reporting.publish import ReportDirError, ReportLock
    try:  # one run per report folder, for the whole run (released when the process ends)
        lock = ReportLock(args.report_dir, ["python", "-m", "oracle.compare", *argv], wait=args.wait,
                          on_wait=lambda msg: print(msg, file=sys.stderr, flush=True)).acquire()
    except ReportDirError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    print("\n".join(judge.header(sorted({t.name for t, _, _ in work}))), flush=True)
    results, complete, t0 = [skipped_target(t, r, args) for t, r in skipped], True, time.perf_counter()
    where = [-1] * len(results)  # each row's job in the whole selection (skipped targets first)
    progress = Progress(len(work), sys.stderr, args.verbosity)
    finished = 0
    judge.export_env()
    try:
        progress.start(job_label(work[0]) if work else "")
        # (the phase ends before the pool is closed: the workers it reaps measured their own time)
        with phase("parent: handing out jobs, collecting rows", count_children=False):
            for n, (job, out) in enumerate(zip(work, execute(work, args, pool)), 1):
                finished = n
                got = rows(out)
                results += got
                where += [positions[n - 1]] * len(got)
                progress.advance(got, job_label(job), job_label(work[n]) if n < len(work) else "")
    except (KeyboardInterrupt, WorkerStartError) as exc:
        complete = False
        progress.close()
        if pool is not None:  # jobs that finished out of order on other workers
            for i in sorted(pool.results):
                got = rows(pool.results[i])
                results += got
                where += [positions[i]] * len(got)
                finished += 1
        stopped = ("terminated (SIGTERM)" if isinstance(exc, Terminated) else "interrupted"
                   if isinstance(exc, KeyboardInterrupt) else f"error: {exc}; stopped")
        if not finished:
            lock.release()
            print(f"{stopped} before any case finished: no report written (the previous one is left as it was)",
                  file=sys.stderr)
            return EXIT_INTERRUPTED
        print(f"{stopped}: writing the cases finished so far (report marked incomplete)", file=sys.stderr)
    finally:
        progress.close()
        if pool is not None:  # every worker's process group killed, its folder removed
            pool.close()
        judge.restore_env()
    with deferred_sigint() as interrupted:
        with phase("report: judging, writing, rendering"):
            code = _finish(args, argv, judge, results, where, complete, t0, shard_meta, interrupted, lock,
                           progress.done, len(work))
        if args.profile:
            totals = phases.merge(phases.take(), pool.stats["phases"] if pool is not None else None)
            print("\n".join(phases.table(totals, time.perf_counter() - t_start)), file=sys.stderr)
        return code


def _finish(args, argv, judge, results, row_jobs, complete, t0, shard_meta, interrupted, lock, done,
            total) -> int:
    from .reporting import report
    from .reporting.console import outcome
    from .checking.runinfo import reproducing
    reproducing(results, args.device, os.path.join(os.path.abspath(args.report_dir), "report.json"),
                {d["target"] for d in getattr(args, "inferred", None) or () if d.get("candidate")})
    known = judge.judge(results)
    extra = {"seconds": round(time.perf_counter() - t0, 2), "known": known}
    if getattr(args, "inferred", None):
        extra["inferred"] = args.inferred
    if shard_meta is not None:
        extra["shard"] = {**shard_meta, "rows": row_jobs}
    try:
        doc = report.write(args.report_dir, results, recorded_argv(argv), complete, args.device, extra, lock=False)
        if args.junit_xml:
            from .reporting.junit import write as write_junit
            write_junit(args.junit_xml, doc)
    except report.ReportNotWritten as exc:
        return not_written(exc, args, results, judge, done, total, t0)
    except OSError as exc:  # the report is written; only the JUnit file failed
        print(f"error: --junit-xml {args.junit_xml} could not be written ({exc.strerror or exc}); the report "
              f"is in {args.report_dir}", file=sys.stderr)
        return EXIT_USAGE
    finally:
        lock.release()
    print("\n".join(outcome(results, doc, judge, args, done, total, time.perf_counter() - t0)))
    if interrupted:
        print("interrupted while the report was written: it was finished first", file=sys.stderr)
    if not complete or interrupted:
        return EXIT_INTERRUPTED
    return EXIT_OK if judge.exit_ok(results) else EXIT_MISMATCH


def not_written(exc, args, results, judge, done, total, t0) -> int:
    """The final write failed after the work (a disk that filled): the outcome as usual, then where the
    results went instead; exit 2, since the report the command promised is not there."""
    from .reporting.console import outcome
    print("\n".join(outcome(results, exc.doc, judge, args, done, total, time.perf_counter() - t0)))
    print(not_written_line(exc, "results"), file=sys.stderr)
    return EXIT_USAGE


def not_written_line(exc, what: str) -> str:
    """The error line of a ReportNotWritten: what failed, and where `what` went instead."""
    if exc.saved:
        return (f"error: {exc}; the {what} were saved to {exc.saved} (copy it into a folder as report.json and "
                f"run `python -m oracle.compare render FOLDER` for report.md and report.html)")
    return f"error: {exc}; no other place took the {what} either (the temporary and home folders failed too)"


def merge_main(argv) -> int:
    """`python -m oracle.compare merge DIR...`: the shard reports of one --shard K/N sweep, as one report
    (oracle.compare.running.shard), judged and written as the single run would have been; the same exit status."""
    from .reporting import report
    from .checking.known import Judge, KnownFileError
    from .running.shard import ShardError, load, merge_docs
    p = argparse.ArgumentParser(prog="python -m oracle.compare merge",
                                description="Combine the reports of a --shard K/N sweep into one report, as a "
                                            "single run of the same command would have written it.")
    p.add_argument("reports", nargs="+", metavar="DIR", help="shard report folders (or their report.json)")
    p.add_argument("--report-dir", default=os.path.join("reports", "latest"),
                   help="where the merged report.md and report.json go (default reports/latest)")
    p.add_argument("--known", metavar="FILE|none",
                   help="known-findings file judging the merged run (default reports/known.toml); never one named "
                        "inside a shard report, which is data")
    args = p.parse_args(argv)
    try:
        docs = [load(path) for path in args.reports]  # read first: bad data leaves no folder behind
        check_report_dir(args.report_dir)
        results, run_argv, complete, run, seconds, versions = merge_docs(docs, args.report_dir)
        judge = Judge.from_option(args.known, run["device"])
    except (ShardError, UsageError, KnownFileError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    judge.versions = {**judge.versions, **versions}  # judged as on the machines that ran it
    with deferred_sigint() as interrupted:
        known = judge.judge(results)
        # the versions are the shards' (checked equal), not this machine's
        extra = {"versions": versions, "seconds": seconds, "known": known}
        inferred = next((d["inferred"] for d in docs if d.get("inferred")), None)
        if inferred:  # every shard infers the same (same seed, same probes): the first one's
            extra["inferred"] = inferred
        try:
            doc = report.write(args.report_dir, results, run_argv, complete, run["device"], extra)
        except report.ReportNotWritten as exc:
            print(not_written_line(exc, "merged results"), file=sys.stderr)
            return EXIT_USAGE
    print("\n".join(judge.lines()))
    print(report.summary_table(report.summarize(results)))
    print(f"\nmerged {len(args.reports)} shards -> {report.counts_text(doc['counts'])}; "
          f"report: {os.path.join(args.report_dir, 'report.md')}")
    if not complete or interrupted:
        return EXIT_INTERRUPTED
    return EXIT_OK if judge.exit_ok(results) else EXIT_MISMATCH
