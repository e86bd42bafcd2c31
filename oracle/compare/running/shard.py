"""Sharding a sweep over machines, and merging the shard reports.

`python -m oracle.compare ... --shard K/N` runs a deterministic 1/N of the selected jobs;
`python -m oracle.compare merge DIR... [--report-dir OUT]` (oracle.compare.cli.merge_main) combines the N shard reports into the
report a single run of the same command would have written (same rows in the same order, same
summary, known-findings verdict and exit status; only `created` and the timings differ).

Assignment: each job (target, case or scenario, seed) costs the seconds the committed cost table
(oracle.compare.running.costs, measured from real runs: the mean per target and kind) gives its target and kind (`case:<dtype>` for a
matrix case, `scenario:<name>` for a scenario); a target the table does not name costs the median
of its kind, an unknown kind 1 s. Jobs are dealt heaviest first to the least loaded shard (ties: the
job's name, then the lowest shard), so the split depends only on the selection and the table: every
machine computes the same split, run after run. A shard's report.json carries `shard`: its index,
the shard count, a digest of the whole selection and each row's position in it, which merge checks
and uses to restore the single-run order. Regenerate the table with
`python -m oracle.compare.running.shard costs REPORT.json... > oracle/compare/running/costs.py`.
"""
from __future__ import annotations

import ast
import hashlib
import json
import math
import os
import statistics
import sys
from collections import defaultdict

DEFAULT_COST = 1.0


class ShardError(ValueError):
    pass


MAX_SHARDS = 4096  # more shards than any sweep has jobs: a larger N is a typo (and would plan in vain)


def parse_shard(text: str) -> tuple[int, int]:
    """'K/N' -> (K, N), 1 <= K <= N."""
    try:
        k, n = (int(x) for x in text.split("/"))
    except ValueError:
        raise ShardError(f"--shard expects K/N (e.g. 2/4), got {text!r}") from None
    if not (n >= 1 and 1 <= k <= n):
        raise ShardError(f"--shard {text}: K must be between 1 and N, N at least 1")
    if n > MAX_SHARDS:
        raise ShardError(f"--shard {text}: N is at most {MAX_SHARDS}")
    return k, n


def job_kind(case) -> str:
    scenario = getattr(case, "scenario", None)
    return f"scenario:{scenario}" if scenario is not None else f"case:{case.dtype}"


def job_key(job) -> str:
    target, case, seed = job
    return f"{target.name}\t{case.name}\t{seed}"


def _table():
    from .costs import COSTS
    by_kind = defaultdict(list)
    for (_, kind), secs in COSTS.items():
        by_kind[kind].append(secs)
    return COSTS, {k: statistics.median(v) for k, v in by_kind.items()}


def job_cost(job, table=None) -> float:
    costs, kinds = table or _table()
    target, case, _ = job
    kind = job_kind(case)
    return costs.get((target.name, kind), kinds.get(kind, DEFAULT_COST))


def assign(work, n: int, table=None) -> list[int]:
    """The shard (0-based) of each job: heaviest first onto the least loaded shard."""
    table = table or _table()
    cost = [job_cost(job, table) for job in work]
    keys = [job_key(job) for job in work]
    loads = [0.0] * n
    out = [0] * len(work)
    for i in sorted(range(len(work)), key=lambda i: (-cost[i], keys[i], i)):
        s = min(range(n), key=lambda s: (loads[s], s))
        out[i] = s
        loads[s] += cost[i]
    return out


def selection_digest(work, skipped) -> str:
    h = hashlib.sha256()
    for job in work:
        h.update((job_key(job) + "\n").encode())
    for target, reason in skipped:
        h.update(f"skip\t{target.name}\t{reason}\n".encode())
    return h.hexdigest()[:16]


# --- argv of the recorded command -----------------------------------------------------------

def strip_option(argv: list, name: str) -> list:
    """argv without `name VALUE` / `name=VALUE`."""
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
            continue
        if a == name:
            skip = True
            continue
        if a.startswith(name + "="):
            continue
        out.append(a)
    return out


def set_option(argv: list, name: str, value: str) -> list:
    """argv with every `name VALUE` / `name=VALUE` replaced by `name value` (kept in place)."""
    out, skip, done = [], False, False
    for a in argv:
        if skip:
            skip = False
            continue
        if a == name or a.startswith(name + "="):
            skip = a == name
            if not done:
                out += [name, value]
                done = True
            continue
        out.append(a)
    return out


# --- merge ---------------------------------------------------------------------------------

def _float(x):
    return float(x) if isinstance(x, str) and x in ("inf", "-inf", "nan") else x


def _hparams(items) -> list:
    """report.json holds each group's hyperparameters as the str() of a dict; back to the dict."""
    out = []
    for hp in items:
        if isinstance(hp, str):
            try:
                hp = ast.literal_eval(hp)
            except (ValueError, SyntaxError):
                raise ShardError(f"cannot read back hyperparameters {hp!r}") from None
        out.append(hp)
    return out


def result_from_dict(row: dict):
    """A CaseResult back from its report.json form (round-trips through report.result_dict)."""
    from ..measuring.checks import CheckResult, Finding
    from ..checking.case_run import CaseResult
    checks = {}
    for name, c in row["checks"].items():
        findings = []
        for f in c["findings"]:
            f = dict(f)
            if isinstance(f.get("index"), list):
                f["index"] = tuple(f["index"])
            findings.append(Finding(**f))
        checks[name] = CheckResult(name, passed=c["passed"], compared=c["compared"],
                                   worst_ratio=_float(c["worst_ratio"]), worst_error=_float(c["worst_error_ulps"]),
                                   worst_bound=_float(c["worst_bound_ulps"]), power=_float(c["power"]),
                                   unbounded=c["unbounded"], findings=findings, note=c["note"],
                                   series=_series(c.get("series")), histogram=_histogram(c.get("histogram")))
    return CaseResult(row["target"], row["case"], row["optimizer"], row["dtype"], _hparams(row["hparams"]), row["seed"],
                      row["steps"], status=row["status"], reason=row["reason"], checks=checks,
                      seconds=row["seconds"], repro=row["repro"])


def _series(d) -> dict:
    """report.json's columnar per-step series back into CheckResult.series (step -> [ratio, error, bound])."""
    if not d:
        return {}
    return {k: [_float(r), _float(e), _float(b)]
            for k, r, e, b in zip(d["step"], d["ratio"], d["error_ulps"], d["bound_ulps"])}


def _histogram(d) -> dict:
    """report.json's non-empty bins back into CheckResult.histogram (step -> counts per HIST_EDGES bin)."""
    from ..measuring.checks import HIST_EDGES
    if not d:
        return {}
    counts = [0] * (len(HIST_EDGES) + 1)
    for low, high, n in d["bins"]:
        counts[0 if (low == 0 and high == 0) else HIST_EDGES.index(low) + 1] = n
    return {d["step"]: counts}


def load(path: str) -> dict:
    from ..reporting.schema import load as load_report
    from ..isolation.untrusted import DataFileError
    if os.path.isdir(path):
        path = os.path.join(path, "report.json")
    try:
        doc = load_report(path, "shard report")
    except DataFileError as exc:
        raise ShardError(str(exc)) from None
    if "shard" not in doc:
        raise ShardError(f"{path}: not a shard report (no 'shard' key: was it run with --shard K/N?)")
    _check_shard_doc(doc, path)
    doc["_path"] = path
    return doc


def _check_shard_doc(doc: dict, path: str) -> None:
    """The fields merge uses, by type and range, before any is used (a size is never believed)."""
    shard = doc["shard"]

    def need(cond, what):
        if not cond:
            raise ShardError(f"{path}: not a shard report of ours: {what}")
    need(isinstance(shard, dict), "`shard` must be an object")
    count, index = shard.get("count"), shard.get("index")
    need(type(count) is int and 1 <= count <= MAX_SHARDS, f"shard.count must be an integer 1..{MAX_SHARDS}")
    need(type(index) is int and 1 <= index <= count, "shard.index must be an integer 1..shard.count")
    need(isinstance(shard.get("rows"), list) and all(type(i) is int for i in shard["rows"]),
         "shard.rows must be a list of positions (integers; -1 for a row before every job)")
    need(isinstance(shard.get("selection"), str), "shard.selection must be a string")
    need(isinstance(shard.get("device"), str), "shard.device must be a string")
    need(isinstance(doc.get("results"), list) and all(isinstance(r, dict) for r in doc["results"]),
         "`results` must be a list of objects")
    need(isinstance(doc.get("argv"), list) and all(isinstance(a, str) for a in doc["argv"]),
         "`argv` must be a list of strings")
    need(isinstance(doc.get("versions"), dict), "`versions` must be an object")
    need(isinstance(doc.get("complete"), bool), "`complete` must be true or false")


def merge_docs(docs: list, report_dir: str | None):
    """(results in single-run order, argv, complete, {device, known}, seconds, versions) of the shards."""
    count = {d["shard"]["count"] for d in docs}
    if len(count) != 1:
        raise ShardError(f"the reports come from different shard counts: {sorted(count)}")
    (n,) = count
    seen = sorted(d["shard"]["index"] for d in docs)
    if seen != list(range(1, n + 1)):
        missing = sorted(set(range(1, n + 1)) - set(seen))
        dup = sorted({i for i in seen if seen.count(i) > 1})
        raise ShardError(f"need each of the {n} shards exactly once; "
                         + (f"missing {', '.join(map(str, missing))}" if missing else "")
                         + ("; " if missing and dup else "") + (f"repeated {', '.join(map(str, dup))}" if dup else ""))
    for key, what in (("selection", "selected jobs"),):
        vals = {d["shard"][key] for d in docs}
        if len(vals) != 1:
            raise ShardError(f"the shards ran different {what} (digests {', '.join(sorted(vals))}): "
                             "same command, same checkout and same installed libraries on every machine?")
    if len({json.dumps(d["versions"], sort_keys=True) for d in docs}) != 1:
        raise ShardError("the shards ran with different versions: "
                         + "; ".join(f"{d['_path']}: {d['versions']}" for d in docs))
    argvs = {json.dumps(strip_option(strip_option(d["argv"], "--shard"), "--report-dir")) for d in docs}
    if len(argvs) != 1:
        raise ShardError("the shards ran different commands: "
                         + "; ".join(f"{d['_path']}: {' '.join(d['argv'])}" for d in docs))
    docs = sorted(docs, key=lambda d: d["shard"]["index"])
    placed = []
    for d in docs:
        rows, where = d["results"], d["shard"]["rows"]
        if len(rows) != len(where):
            raise ShardError(f"{d['_path']}: {len(rows)} results but {len(where)} positions")
        placed += [(pos, d["shard"]["index"], k, row) for k, (pos, row) in enumerate(zip(where, rows))]
    placed.sort(key=lambda t: (t[0], t[1], t[2]))
    argv = strip_option(docs[0]["argv"], "--shard")
    if report_dir is not None and any(a == "--report-dir" or a.startswith("--report-dir=") for a in argv[3:]):
        argv = set_option(argv, "--report-dir", report_dir)
    try:
        results = [result_from_dict(row) for *_, row in placed]
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ShardError(f"a shard's results are not rows of ours ({type(exc).__name__}: {exc})") from None
    return (results, argv, all(d["complete"] for d in docs),
            {"device": docs[0]["shard"]["device"], "known": docs[0]["shard"].get("known")},
            max(d.get("seconds", 0.0) for d in docs), docs[0]["versions"])


# --- the cost table --------------------------------------------------------------------------

def measure(paths) -> dict:
    """(target, kind) -> seconds per job, the mean over these reports' rows (skipped cases count ~0 s)."""
    per = defaultdict(list)
    for path in paths:
        with open(os.path.join(path, "report.json") if os.path.isdir(path) else path) as fh:
            doc = json.load(fh)
        jobs = defaultdict(float)
        for r in doc["results"]:
            if r["status"] == "skip" and r["case"] == "(all cases)":
                continue
            if r["case"].startswith("scenario:"):
                kind = "scenario:" + r["case"].split(":", 1)[1].split("/")[0]
                jobs[(r["target"], kind, r["seed"])] += r["seconds"]  # a scenario job's rows add up
            else:
                per[(r["target"], f"case:{r['dtype']}")].append(r["seconds"])
        for (target, kind, _), secs in jobs.items():
            per[(target, kind)].append(secs)
    return {k: round(statistics.fmean(v), 3) for k, v in sorted(per.items()) if not math.isnan(statistics.fmean(v))}


def costs_module(table: dict, sources) -> str:
    lines = ['"""Measured seconds per job, by (target, kind): the cost model of --shard (oracle.compare.running.shard).',
             "", "Generated by `python -m oracle.compare.running.shard costs " + " ".join(sources) + "`;",
             "kind is case:<dtype> (a matrix case) or scenario:<name>. Regenerate after the engine's cost changes;",
             "every machine of one sharded sweep must use the same table (the same checkout).", '"""', "",
             "COSTS = {"]
    lines += [f"    ({t!r}, {k!r}): {v!r}," for (t, k), v in table.items()]
    lines += ["}", ""]
    return "\n".join(lines)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] != ["costs"] or len(argv) < 2:
        print("usage: python -m oracle.compare.running.shard costs REPORT.json... > oracle/compare/running/costs.py", file=sys.stderr)
        return 2
    sys.stdout.write(costs_module(measure(argv[1:]), argv[1:]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
