"""The mutation gate: run the whole suite against every mutant (oracle.mutants.catalog,
oracle.mutants.wrappers) and every correct control, and print a kill matrix.

`python -m oracle.mutants` (see main()). Every entry runs the same suite:

  the case matrix   every PLAN row of its optimizer (oracle.compare.checking.cases) in fp32 and bf16,
                    and its complex rows (cases.complex_plan) in complex64 where it takes them,
                    with all five checks of oracle.compare.checking.case_run (lockstep, trajectory,
                    counters, schema, roundtrip);
  the scenarios     every scenario of oracle.compare.scenarios except rank_skew,
                    ddp_bucket_view, zero_redundancy, fsdp2, fsdp2_layers, fsdp2_bf16
                    and dcp_reshard (real multi-process runs, 30-300 s per target on
                    2 cores; rank_skew's in-process counterpart is the "rank_skew"
                    layout of the matrix), which `--scenarios all` adds.

Wrapper mutants run the construction scenario with the mutant plugged in as the
wrapper, around their correct INNER optimizer; the correct wrapper around the
same INNER runs in that control's construction scenario.

Verdicts: a mutant is "killed" when any check fails (a crash counts, and is shown
as "error"); "SURVIVED" otherwise: the suite has a blind spot to fix (a new input,
a new check, a tighter bound), never the mutant. A control or a torch reference
"passes" or has a "FALSE POSITIVE"; a failure that reports/known.toml lists for the
installed torch (a real defect of torch itself) is shown as "known defect". GPU-only
mutants are listed, and run only with --device cuda.

Exit status: 0 every CPU mutant killed and no false positive, 1 otherwise, 2 usage.
"""
from __future__ import annotations

import argparse
import fnmatch
import json
import math
import os
import sys
import time
from dataclasses import dataclass, field, replace

CHECK_ORDER = ("lockstep", "quantized", "rounding", "finite", "bounds", "trajectory", "counters", "schema", "roundtrip", "error")
MATRIX_DTYPES = ("float32", "bfloat16", "complex64")
# float16 only for the library-defaults rows: where eps = 1e-8 rounds to 0 (the finite check's inputs)
DEFAULTS_DTYPES = ("float16",)
DEFAULT_SKIP_SCENARIOS = ("rank_skew", "ddp_bucket_view", "zero_redundancy", "fsdp2", "fsdp2_layers", "fsdp2_bf16",
                          "dcp_reshard")


def torch_references() -> list[str]:
    """torch's own implementations the gate must pass (no false positive): the forloop path of every
    optimizer torch has (its comparison record names a torch class), and the fused path of the CLI's
    default optimizer, the one most users run."""
    from oracle.compare.cli import DEFAULT_OPTIMIZER
    from oracle.compare.optimizers import records
    with_torch = [name for name, rec in records().items() if rec.torch_class]
    return [f"torch.{name}.forloop" for name in with_torch] + [f"torch.{DEFAULT_OPTIMIZER}.fused"]


@dataclass
class Entry:
    name: str
    kind: str            # mutant | wrapper-mutant | control | reference
    optimizer: str
    provenance: str = ""
    description: str = ""
    expect: tuple = ()   # (check, tensor substring, step or None)
    gpu_only: bool = False
    cls: object = None   # optimizer class (mutants, controls)
    wrapper: object = None  # wrapper class (wrapper mutants); cls is then the INNER optimizer
    builtin: str = ""    # a oracle.compare.targets builtin name (references)
    undeclared_only: bool = False  # judged only with inference on (oracle.mutants.deviations)

    def target(self):
        if self.builtin:
            from oracle.compare.registry import builtin_targets
            return next(t for t in builtin_targets() if t.name == self.builtin)
        from oracle.mutants import target_for
        return target_for(self.cls)


@dataclass
class Row:
    entry: Entry
    verdict: str = ""
    caught: dict = field(default_factory=dict)     # check -> number of failing cases
    known: dict = field(default_factory=dict)      # check -> KNOWN text (references)
    first_case: str = ""
    first: dict = field(default_factory=dict)      # the first finding, as a dict
    findings: dict = field(default_factory=dict)   # check -> [first finding of each failing case]
    cases: int = 0
    seconds: float = 0.0
    repro: str = ""
    inferred: str = ""   # --undeclared: the convention inference chose (or "nearest: ...")


def entries() -> list[Entry]:
    from oracle.mutants import controls, mutants
    from oracle.mutants.deviations import DEVIATION_MUTANTS
    from oracle.mutants.wrappers import WRAPPER_MUTANTS
    out = []
    for cls in mutants():
        out.append(Entry(cls.__name__, "mutant", cls.ORACLE_OPTIMIZER, cls.PROVENANCE, cls.DESCRIPTION,
                         tuple(cls.EXPECT), cls.GPU_ONLY, cls=cls))
    for cls in DEVIATION_MUTANTS:
        option, value = cls.DEVIATION
        out.append(Entry(cls.__name__, "deviation-mutant", cls.ORACLE_OPTIMIZER,
                         f"oracle.forms: {cls.ORACLE_OPTIMIZER} {option}={value!r}", cls.__doc__.split(": ", 1)[1],
                         ("deviation", "", None, ""), cls=cls, undeclared_only=True))
    for w in WRAPPER_MUTANTS:
        out.append(Entry(w.__name__, "wrapper-mutant", w.INNER.ORACLE_OPTIMIZER, w.PROVENANCE, w.DESCRIPTION,
                         tuple(w.EXPECT), w.GPU_ONLY, cls=w.INNER, wrapper=w))
    for cls in controls():
        out.append(Entry(cls.__name__, "control", cls.ORACLE_OPTIMIZER,
                         description=(cls.__doc__ or "").strip().split("\n")[0], cls=cls))
    for name in torch_references():
        out.append(Entry(name, "reference", name.split(".")[1], description="torch's own implementation",
                         builtin=name))
    return out


def _scenarios():
    """oracle.compare.scenarios, imported lazily (it imports the distributed machinery)."""
    try:
        from oracle.compare import scenarios
    except ImportError:
        return None
    return scenarios


def _known(target: str, check: str, case: str | None = None):
    from oracle.compare.scenarios.common import known
    return known(target, check, case)


def _finding_dict(f, case: str) -> dict:
    from oracle.compare.reporting.report import _num
    return {"case": case, "check": f.check, "step": f.step, "tensor": f.tensor, "index": _num(f.index),
            "expected": _num(f.expected), "got": _num(f.got), "error_ulps": _num(f.error_ulps),
            "bound_ulps": _num(f.bound_ulps), "detail": f.detail}


def undeclared_target(entry: Entry, device: str, seed: int):
    """The entry's target with its conventions not declared but inferred (oracle.compare.inference.infer), as an
    outside optimizer that declares nothing is judged: (target, what inference chose)."""
    from oracle.compare.inference.infer import infer
    from oracle.compare.targets.declare import apply
    target = entry.target()
    inf = infer(target, device, seed)
    if inf.used is None:
        return target, "no candidate"
    return apply(target, inf.used), (inf.used.label() if inf.chosen else f"nearest: {inf.used.label()}")


def _results(entry: Entry, device: str, seed: int, scenario_names, steps: int, target=None, expected_first=False):
    """(check prefix, CaseResult) for every case and scenario of the suite, planned and
    run by the CLI's own driver (oracle.compare.running.driver). expected_first: the jobs that can
    show the entry's expected finding (expects_in) go first, the rest in their order."""
    from oracle.compare.running.driver import jobs_for, rows, run_job
    target = target or entry.target()
    if entry.wrapper is not None:
        yield "construction.", _scenarios().run_construction(target, device, seed, wrapper=entry.wrapper)
        return
    jobs = [job for _, job, _ in jobs_for(target, MATRIX_DTYPES, steps, [seed], None, scenario_names, matrix=True)]
    jobs += [job for _, job, _ in jobs_for(target, DEFAULTS_DTYPES, steps, [seed], "*/defaults/*", (), matrix=True)]
    if expected_first:
        jobs.sort(key=lambda job: not expects_in(entry, job))  # stable: the order within each part is kept
    for job in jobs:
        prefix = f"{job.scenario}." if hasattr(job, "scenario") else ""
        for r in rows(run_job(target, job.name, seed, steps, device, teach=False)):
            yield prefix, r


def expects_in(entry: Entry, job) -> bool:
    """Whether a job (a matrix case or a ScenarioJob) can show the entry's expected finding: its
    scenario for a scenario check ("irregular.bounds"), else a matrix case naming the expected case."""
    check, _, _, case = entry.expect
    if "." in check:
        return getattr(job, "scenario", None) == check.split(".")[0]
    return not hasattr(job, "scenario") and case in job.name


def finding_matches(finding: dict, tensor: str, step, case: str) -> bool:
    """A finding (as a Row keeps it) at the tensor, step and case a catalog entry expects."""
    return (tensor in (finding.get("tensor") or "") and (step is None or finding.get("step") == step)
            and case in finding.get("case", ""))


def shows_expected(row: Row) -> bool:
    """The row's mutant is killed by the check its catalog entry expects, at the tensor, step and case it names."""
    check, tensor, step, case = row.entry.expect
    return check in row.caught and any(finding_matches(f, tensor, step, case) for f in row.findings.get(check, ()))


# run_entry's `stop` for a mutant: "never" runs every case (the kill matrix's counts); "expected" runs the
# cases that can show the expected finding first and stops once it is shown; "killed" runs them first too
# and stops at the first failing check (a verdict only: which check kills it first is not asked, and the
# order of the cases cannot change whether one fails). A control or reference always runs every case: a
# false positive can be anywhere.
STOPS = ("never", "expected", "killed")


def judged_alike(a, b) -> bool:
    """Whether two targets of one implementation are judged by the same specification: alike in all
    that a declaration or inference sets (oracle.compare.targets.declare.JUDGED)."""
    from oracle.compare.targets.declare import JUDGED
    return all(getattr(a, name) == getattr(b, name) for name in JUDGED)


def run_entry(entry: Entry, device: str = "cpu", seed: int = 0, scenario_names=None, steps: int = 20,
              undeclared: bool = False, declared_row: Row | None = None, stop: str = "never") -> Row:
    """`declared_row`: with `undeclared`, this entry's row from a declared run of the same device,
    seed, scenarios and steps; when inference settles on what the entry declares, the cases would
    run exactly as they did there, so that row is reused (with what inference chose) instead; so is
    it where nothing is inferred (an entry without a class of its own, or a wrapper's).
    `stop`: see STOPS (a mutant's verdict is the same under each; its counts are complete only under "never")."""
    if stop not in STOPS:
        raise ValueError(f"stop must be one of {STOPS}, not {stop!r}")
    mutant = entry.kind.endswith("mutant")
    stop = stop if mutant else "never"
    from oracle.compare.reporting.report import repro_command
    row = Row(entry)
    if entry.gpu_only and not device.startswith("cuda"):
        row.verdict = "gpu-only"
        return row
    sc = _scenarios()
    if scenario_names is None:
        scenario_names = [n for n in (sc.SCENARIOS if sc else ()) if n not in DEFAULT_SKIP_SCENARIOS]
    t0 = time.perf_counter()
    first_rank = None
    target = None
    if undeclared and entry.cls is not None and entry.wrapper is None:
        target, row.inferred = undeclared_target(entry, device, seed)
        if declared_row is not None and judged_alike(target, entry.target()):
            return replace(declared_row, inferred=row.inferred, seconds=time.perf_counter() - t0)
    elif declared_row is not None:
        # nothing to infer (a library's own target, a wrapper): the cases are the declared run's
        return replace(declared_row, seconds=time.perf_counter() - t0)
    for prefix, r in _results(entry, device, seed, scenario_names, steps, target, expected_first=stop != "never"):
        row.cases += 1
        for name, c in r.checks.items():
            if c.passed:
                continue
            check = prefix + name
            # a torch reference's failure that reports/known.toml lists (matrix rows included: the fp16
            # defaults rows meet torch's default-eps defect) is a known torch defect, not a false positive
            text = _known(entry.name, name, r.case) if (sc and entry.kind == "reference") else None
            if text:
                row.known[check] = text
                continue
            row.caught[check] = row.caught.get(check, 0) + 1
            kept = row.findings.setdefault(check, [])
            if len(kept) < 12:
                kept.extend([_finding_dict(f, r.case) for f in c.findings[:2]] or
                            [{"case": r.case, "check": check, "detail": (r.reason or c.note)[:300]}])
            if first_rank is None:
                # the first failing case; within it, the earliest step, then the check order
                # (roundtrip's "step" is the reload point, not a step: it ranks after the others)
                cands = [(n == "roundtrip", f.step if f.step is not None else math.inf,
                          CHECK_ORDER.index(n) if n in CHECK_ORDER else len(CHECK_ORDER), prefix + n, f)
                         for n, cc in r.checks.items() if not cc.passed for f in cc.findings[:1]]
                if cands:
                    *_, chk, f = min(cands, key=lambda x: x[:3])
                    row.first = {**_finding_dict(f, r.case), "check": chk}
                else:
                    row.first = {"case": r.case, "check": check, "detail": (r.reason or c.note)[:300]}
                row.first_case = r.case
                row.repro = repro_command(r, device) if not prefix else ""
                first_rank = True
        if (stop == "killed" and row.caught) or (stop == "expected" and shows_expected(row)):
            break  # the generator is left before it runs the next job
    row.seconds = time.perf_counter() - t0
    if mutant:
        # a defect only against the library's declared intent (LEGITIMATE_UNDECLARED on the mutant):
        # undeclared, its behaviour is a legitimate configuration, and passing it is the right verdict
        legit = undeclared and bool(getattr(entry.cls, "LEGITIMATE_UNDECLARED", ""))
        row.verdict = ("killed" if row.caught else "legitimate undeclared" if legit else "SURVIVED")
    else:
        row.verdict = ("FALSE POSITIVE" if row.caught else "known defect" if row.known else "pass")
    return row


def _run_named(args):
    import torch
    name, device, seed, scenario_names, steps, undeclared, declared_row, stop = args
    torch.set_num_threads(1)  # one entry per core
    entry = next(e for e in entries() if e.name == name)
    return run_entry(entry, device, seed, scenario_names, steps, undeclared, declared_row, stop)


def run_all(selected: list[Entry], device="cpu", seed=0, scenario_names=None, steps=20, jobs=2, progress=None,
            undeclared: bool = False, declared: dict | None = None, stop: str = "never"):
    """`declared`: entry name -> Row of a declared run with the same device, seed, scenarios and steps,
    reused by an undeclared run where inference settles on the declared conventions (run_entry).
    `stop`: how far a mutant runs (STOPS). Rows come back in the order of `selected`."""
    declared = declared or {}
    # the entries that run every case first, the ones that may stop early last: fewer processes idle at the end
    ordered = sorted(selected, key=lambda e: stop != "never" and e.kind.endswith("mutant"))
    work = [(e.name, device, seed, scenario_names, steps, undeclared, declared.get(e.name), stop) for e in ordered]
    if jobs <= 1:
        rows = []
        for w in work:
            rows.append(_run_named(w))
            if progress:
                progress(rows[-1])
        return rows
    import multiprocessing
    ctx = multiprocessing.get_context("fork")
    rows = {}
    with ctx.Pool(jobs) as pool:
        for row in pool.imap_unordered(_run_named, work):
            rows[row.entry.name] = row
            if progress:
                progress(row)
    return [rows[e.name] for e in selected]


# --- the report ------------------------------------------------------------

def _family(check: str) -> str:
    """Matrix checks keep their name; scenario checks group under the scenario."""
    return check.split(".")[0] if "." in check else check


COLUMNS = ("lockstep", "quantized", "rounding", "trajectory", "counters", "schema", "roundtrip", "construction", "checkpoint",
           "grad_scaling", "irregular", "long_horizon", "inputs_unchanged", "error")


def _where(first: dict) -> str:
    if not first:
        return ""
    step = first.get("step")
    return f"{first.get('check', '')} · step {step} · {first.get('tensor', '')}".replace(" · step None", "") \
        if first.get("tensor") else f"{first.get('check', '')}: {first.get('detail', '')[:60]}"


def _err(first: dict) -> str:
    e, b = first.get("error_ulps"), first.get("bound_ulps")
    if isinstance(e, (int, float)) and isinstance(b, (int, float)):
        return f"{e:.3g} / {b:.3g}"
    if first.get("expected") is not None or first.get("got") is not None:
        return f"got {first.get('got')!s:.24} want {first.get('expected')!s:.24}"
    return ""


def table(rows: list[Row], fmt="simple") -> str:
    from tabulate import tabulate
    head = ["entry", "kind", "verdict", *COLUMNS, "first failing case", "first finding (check · step · tensor)",
            "error / bound (ULP)"]
    body = []
    for r in rows:
        fam = {}
        for check, n in r.caught.items():
            fam[_family(check)] = fam.get(_family(check), 0) + n
        for check in r.known:
            fam.setdefault(_family(check), "known")
        body.append([r.entry.name, r.entry.kind, r.verdict, *[fam.get(c, "") for c in COLUMNS], r.first_case,
                     _where(r.first), _err(r.first)])
    return tabulate(body, head, tablefmt=fmt)


def catalog_table(rows: list[Row], fmt="github") -> str:
    from tabulate import tabulate
    body = [[r.entry.name, r.entry.optimizer, r.entry.provenance, r.entry.description,
             "gpu-only" if r.entry.gpu_only else "cpu", " / ".join(str(x) for x in r.entry.expect if x not in (None, ""))]
            for r in rows if r.entry.kind.endswith("mutant")]
    return tabulate(body, ["mutant", "optimizer", "provenance", "defect", "runs on", "expected catch"], tablefmt=fmt)


def summary(rows: list[Row]) -> dict:
    mutants = [r for r in rows if r.entry.kind.endswith("mutant")]
    ran = [r for r in mutants if r.verdict != "gpu-only"]
    return {"mutants": len(mutants), "run": len(ran), "killed": sum(r.verdict == "killed" for r in ran),
            "survived": [r.entry.name for r in ran if r.verdict == "SURVIVED"],
            "legitimate_undeclared": [r.entry.name for r in ran if r.verdict == "legitimate undeclared"],
            "gpu_only_not_run": [r.entry.name for r in mutants if r.verdict == "gpu-only"],
            "controls": sum(not r.entry.kind.endswith("mutant") for r in rows),
            "false_positives": [r.entry.name for r in rows if r.verdict == "FALSE POSITIVE"],
            "known_defects": {r.entry.name: r.known for r in rows if r.known}}


def ok(rows: list[Row]) -> bool:
    s = summary(rows)
    return not s["survived"] and not s["false_positives"]


def to_json(rows, meta) -> dict:
    return {**meta, "summary": summary(rows), "rows": [{
        "entry": r.entry.name, "kind": r.entry.kind, "optimizer": r.entry.optimizer,
        "provenance": r.entry.provenance, "description": r.entry.description, "expect": list(r.entry.expect),
        "gpu_only": r.entry.gpu_only, "verdict": r.verdict, "caught": r.caught, "known": r.known,
        "first_case": r.first_case, "first": r.first, "findings": r.findings, "cases": r.cases,
        "seconds": round(r.seconds, 2), "repro": r.repro, "inferred": r.inferred} for r in rows]}


def markdown(rows, meta) -> str:
    s = summary(rows)
    out = ["# Mutation kill matrix", "",
           f"- created: {meta['created']}", f"- command: `{meta['command']}`", f"- device: {meta['device']}, "
           f"seed {meta['seed']}, {meta['steps']} steps; matrix dtypes {', '.join(MATRIX_DTYPES)}; "
           f"scenarios: {', '.join(meta['scenarios'])}", f"- versions: {meta['versions']}",
           f"- wall time: {meta['seconds']} s", "",
           f"**{s['killed']} of {s['run']} mutants killed** on {meta['device']} "
           f"({len(s['gpu_only_not_run'])} GPU-only not run: {', '.join(s['gpu_only_not_run']) or 'none'}); "
           f"survivors: {', '.join(s['survived']) or 'none'}; "
           f"false positives on {s['controls']} controls/references: {', '.join(s['false_positives']) or 'none'}.",
           "",
           "Cells count the failing cases (matrix) or scenario checks per check family. The first finding is the "
           "earliest step of the first failing case; errors are ULPs of the storage dtype at the operand "
           "magnitude, against the derived bound.", "",
           "## Kill matrix", "", table(rows, "github"), "", "## Catalog", "", catalog_table(rows), ""]
    if s["known_defects"]:
        out += ["## Known defects of the references (reports/known.toml)", ""]
        for name, known in s["known_defects"].items():
            for check, text in known.items():
                out.append(f"- {name} `{check}`: {text}")
        out.append("")
    out += ["## Reproduce", "", "Matrix findings reproduce with the repro command of oracle.compare.reporting.report "
            "(`python -m oracle.compare --impl oracle.mutants.catalog:NAME --case CASE ...`).", ""]
    for r in rows:
        if r.repro:
            out.append(f"- {r.entry.name}: `{r.repro}`")
    return "\n".join(out) + "\n"


# --- the command -----------------------------------------------------------

def parser():
    p = argparse.ArgumentParser(prog="python -m oracle.mutants",
                                description="Run the suite against every mutant and control; print the kill matrix.")
    p.add_argument("--only", action="append", metavar="GLOB", help="entries whose name matches (repeatable)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--scenarios", default="default",
                   help="'default' (all but rank_skew), 'all', 'none', or a comma-separated list")
    p.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1))
    p.add_argument("--report-dir", default=None,
                   help="where kill_matrix.{md,json} go; default: the committed reports/mutants (or "
                        "reports/mutants/undeclared with --undeclared) for the whole gate only, nowhere for a "
                        "selection (--only, --scenarios, --seed, --steps, --device)")
    p.add_argument("--no-report", action="store_true", help="print only; write no files")
    p.add_argument("--list", action="store_true", help="list the catalog and exit")
    p.add_argument("--undeclared", action="store_true",
                   help="judge every mutant and control as an optimizer that declares no convention: inferred "
                        "first (oracle.compare.inference.infer), as --impl does; a mutant inference explains is SURVIVED")
    p.add_argument("--stop", choices=STOPS, default="never",
                   help="how far a mutant runs: 'never' (default) runs every case (the kill matrix's counts), 'expected' "
                        "runs the cases that can show its expected finding first and stops once shown, 'killed' runs them "
                        "first too and stops at its first failing check; a control or reference always runs every case")
    p.add_argument("--quiet", action="store_true")
    return p


def default_report_dir(args) -> str | None:
    """The committed kill matrix's folder when this run is the whole gate, None for a selection: a
    selection never rewrites a committed report."""
    whole = (not args.only and args.scenarios == "default" and args.device == "cpu" and args.seed == 0
             and args.steps == 20 and args.stop == "never")
    if not whole:
        return None
    return os.path.join("reports", "mutants", *(["undeclared"] if args.undeclared else []))


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parser().parse_args(argv)
    every = [e for e in entries() if args.undeclared or not e.undeclared_only]
    selected = [e for e in every if not args.only or any(fnmatch.fnmatch(e.name, g) for g in args.only)]
    if not selected:
        print(f"error: nothing matches {args.only}", file=sys.stderr)
        return 2
    if args.list:
        print(catalog_table([Row(e) for e in selected], "simple"))
        return 0
    sc = _scenarios()
    known = list(sc.SCENARIOS) if sc else []
    if args.scenarios == "default":
        names = [n for n in known if n not in DEFAULT_SKIP_SCENARIOS]
    elif args.scenarios == "all":
        names = known
    elif args.scenarios == "none":
        names = []
    else:
        names = [n.strip() for n in args.scenarios.split(",") if n.strip()]
        bad = [n for n in names if n not in known]
        if bad:
            print(f"error: unknown scenario {bad[0]!r}; known: {', '.join(known)}", file=sys.stderr)
            return 2
    t0 = time.perf_counter()

    def progress(row):
        if not args.quiet:
            print(f"  {row.verdict:14s} {row.entry.name} ({row.seconds:.1f}s)"
                  + (f" inferred: {row.inferred}" if row.inferred else ""), file=sys.stderr, flush=True)

    rows = run_all(selected, args.device, args.seed, names, args.steps, args.jobs, progress, args.undeclared,
                   stop=args.stop)
    from oracle.compare.reporting.report import atomic_write, versions
    meta = {"schema": "optimizer-oracle-killmatrix/1", "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "command": " ".join(["python -m oracle.mutants", *argv]), "device": args.device, "seed": args.seed,
            "steps": args.steps, "scenarios": names, "undeclared": args.undeclared, "stop": args.stop,
            "versions": ", ".join(f"{k} {v}" for k, v in versions().items()),
            "seconds": round(time.perf_counter() - t0, 1)}
    print(table(rows))
    s = summary(rows)
    print(f"\n{s['killed']}/{s['run']} mutants killed ({len(s['gpu_only_not_run'])} gpu-only not run); "
          f"survived: {', '.join(s['survived']) or 'none'}; "
          f"{''.join(f'legitimate when undeclared: {n}; ' for n in s['legitimate_undeclared'])}false positives: {', '.join(s['false_positives']) or 'none'}; "
          f"{meta['seconds']} s")
    report_dir = args.report_dir or default_report_dir(args)
    if args.no_report or report_dir is None:
        if not args.no_report:
            print("a selection: no files written (the committed kill matrix is the whole gate's); "
                  "--report-dir DIR keeps them")
    else:
        args.report_dir = report_dir
        atomic_write(os.path.join(args.report_dir, "kill_matrix.json"),
                     json.dumps(to_json(rows, meta), indent=1, default=str))
        atomic_write(os.path.join(args.report_dir, "kill_matrix.md"), markdown(rows, meta))
        print(f"report: {os.path.join(args.report_dir, 'kill_matrix.md')}")
    return 0 if ok(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
