"""Known findings: genuine defects of the libraries under test, kept in a TOML file
(default `reports/known.toml`) and judged with strict-xfail semantics.

    entries = load(path)                       # KnownFileError names the bad entry
    verdict = classify(results, entries, versions, device)

One entry per finding:

    [[known]]
    id = "torch-fused-cpu-noncontiguous"       # unique, used in reports
    target = "torch.*.fused"                   # glob over target names
    case = "scenario:irregular/*"              # glob over case names
    check = "noncontiguous"                    # glob over check names ("error": the case crashed)
                                               # (each of the three: one glob or a list, any of which matches)
    error = "KeyError: 'state1'"               # with check "error" (and only then): the crash it names,
                                               # a text its error message must contain
    summary = "one line"
    reference = "https://..."                  # upstream issue/PR/source line; "" where there is none
    library = "torch"                          # distribution whose version decides
    versions = ">=2.13,<2.14"                  # PEP 440 specifier set
    devices = ["cpu"]                          # optional; default: every device
    first_seen = 2026-11-29                    # TOML date
    repro = "known/torch_fused_cpu_noncontiguous.py"   # standalone script, relative to the TOML file

Each failing check of a run (a CaseResult check that did not pass; a failed or errored result without
one counts as its status) is *known* when an entry that applies here (library installed, version
inside `versions`, device listed) matches its (target, case, check), else *new*. An applicable entry
whose globs select a case that ran (status pass or fail, with a check its glob matches) but matched no
failure is *fixed* ("fixed upstream? update or drop the entry"); one whose cases did not run is *not
run*; entries for other versions, devices or absent libraries are *not applicable*. A run passes when
nothing is new and nothing is fixed.
"""
from __future__ import annotations

import datetime as _dt
import fnmatch
import functools
import os
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from ..measuring.checks import FAILING, RAN

REQUIRED = ("id", "target", "case", "check", "summary", "library", "versions", "first_seen", "repro")
OPTIONAL = ("reference", "devices", "intermittent", "error", "seeds")
FIXED_HINT = "fixed upstream? update or drop the entry"


class KnownFileError(ValueError):
    """The known-findings file cannot be used (a usage error: exit 2)."""


def default_path() -> Path:
    """reports/known.toml next to the package (the repository's reports/); in a wheel, which has no
    repository around it, the copy it carries (oracle/compare/checking/known_findings/, see setup.py)."""
    import oracle
    repo = Path(oracle.__file__).resolve().parents[1] / "reports" / "known.toml"
    return repo if repo.exists() else Path(__file__).resolve().with_name("known_findings") / "known.toml"


# --- version specifiers ----------------------------------------------------------------------

try:
    from packaging.specifiers import InvalidSpecifier, SpecifierSet
    from packaging.version import InvalidVersion, Version
except ImportError:  # pragma: no cover - packaging is nearly always there (pip, setuptools need it)
    SpecifierSet = None


def _release(v: str) -> tuple:
    m = re.match(r"\s*v?(\d+(?:\.\d+)*)", v)
    if not m:
        raise ValueError(f"cannot read version {v!r}")
    return tuple(int(x) for x in m.group(1).split("."))


def _tiny_contains(spec: str, version: str) -> bool:
    """Fallback for a specifier set without `packaging`: comparisons on the release numbers."""
    got = _release(version)
    for clause in filter(None, (c.strip() for c in spec.split(","))):
        m = re.fullmatch(r"(==|!=|>=|<=|>|<|~=)\s*([\d.]+)(\.\*)?", clause)
        if not m:
            raise ValueError(f"cannot read specifier {clause!r}")
        op, want, star = m.group(1), _release(m.group(2)), m.group(3)
        n = max(len(got), len(want))
        a, b = got + (0,) * (n - len(got)), want + (0,) * (n - len(want))
        if star:
            a, b = got[:len(want)], want
        ok = {"==": a == b, "!=": a != b, ">=": a >= b, "<=": a <= b, ">": a > b, "<": a < b,
              "~=": a >= b and got[:len(want) - 1] == want[:-1]}[op]
        if not ok:
            return False
    return True


def _check_spec(spec: str) -> None:
    if SpecifierSet is not None:
        try:
            SpecifierSet(spec)
        except InvalidSpecifier as exc:
            raise ValueError(str(exc)) from exc
    else:
        _tiny_contains(spec, "0")


def version_in(spec: str, version: str) -> bool:
    """Whether `version` (e.g. "2.13.0+cpu", a local build) lies inside the PEP 440 set `spec`."""
    if SpecifierSet is None:
        return _tiny_contains(spec, version)
    try:
        v = Version(version)
    except InvalidVersion:
        return _tiny_contains(spec, version)
    # a local build (+cpu, +cu128), a pre-release or a dev build (2.13.0a0+git..., 2.13.0.dev...) counts
    # as the release it leads to, so ">=2.13,<2.14" covers a source build of the 2.13 branch
    return SpecifierSet(spec).contains(Version(".".join(map(str, v.release))), prereleases=True)


# --- entries -----------------------------------------------------------------------------------

def _each(globs) -> tuple:
    """An entry's target, case or check (one glob, or a list of them) as a tuple of globs."""
    return (globs,) if isinstance(globs, str) else tuple(globs) if isinstance(globs, (list, tuple)) else ()


def any_glob(name: str, globs) -> bool:
    """Whether `name` matches an entry's target, case or check: one glob, or a list of them."""
    return any(isinstance(g, str) and fnmatch.fnmatchcase(name, g) for g in _each(globs))


def _globs(raw, k: str, where: str):
    """An entry's target/case/check as written: a non-empty glob, or a non-empty list of them (a tuple)."""
    v = raw[k]
    if isinstance(v, list) and v and all(isinstance(g, str) and g.strip() for g in v):
        return tuple(v)
    if isinstance(v, str) and v.strip():
        return v
    raise KnownFileError(f"{where}: {k} must be a non-empty glob or a non-empty list of them, got {v!r}")


@dataclass(frozen=True)
class Entry:
    id: str
    target: str
    case: str
    check: str
    summary: str
    library: str
    versions: str
    first_seen: str
    repro: str
    reference: str = ""
    devices: tuple = ()          # () = every device
    source: str = ""             # the file it came from
    # a defect that shows on some runs only (a read of uninitialized memory): not seeing it is
    # "not seen this run", never "fixed"; its repro script must still reproduce it
    intermittent: bool = False
    # a crash entry's message: an errored row matches only when its error contains it (another crash
    # of the same cases is new, not this defect)
    error: str = ""
    # a defect only some inputs show (a float16 overflow that one seed's draws reach): only rows of
    # these seeds match it or judge it, so a row of another seed is neither known nor "fixed"; () = all
    seeds: tuple = ()

    def matches(self, target: str, case: str, check: str, reason: str = "", seed: int | None = None) -> bool:
        return (self.covers(target, case, seed) and any_glob(check, self.check)
                and (check != "error" or self.error in (reason or "")))

    def covers(self, target: str, case: str, seed: int | None = None) -> bool:
        """A row of this target, case and seed is one this entry is about (whatever its checks)."""
        return (any_glob(target, self.target) and any_glob(case, self.case)
                and (not self.seeds or seed is None or seed in self.seeds))

    def repro_path(self) -> Path:
        base = Path(self.source).parent if self.source else default_path().parent
        return (base / self.repro).resolve()

    def label(self) -> str:
        return f"{self.library} {self.versions}"


def _entry(raw, n: int, source: str) -> Entry:
    where = f"{source}: entry {n}" + (f" ({raw.get('id')!r})" if isinstance(raw, dict) and raw.get("id") else "")
    if not isinstance(raw, dict):
        raise KnownFileError(f"{where}: expected a table ([[known]]), got {type(raw).__name__}")
    missing = [k for k in REQUIRED if k not in raw]
    if missing:
        raise KnownFileError(f"{where}: missing {', '.join(missing)}")
    unknown = sorted(set(raw) - set(REQUIRED) - set(OPTIONAL))
    if unknown:
        raise KnownFileError(f"{where}: unknown key(s) {', '.join(unknown)}; allowed: "
                             f"{', '.join(REQUIRED + OPTIONAL)}")
    globs = {k: _globs(raw, k, where) for k in ("target", "case", "check")}
    for k in REQUIRED + ("reference",):
        if k in raw and k not in ("first_seen", *globs) and not isinstance(raw[k], str):
            raise KnownFileError(f"{where}: {k} must be a string, got {raw[k]!r}")
    for k in ("id", "summary", "library", "versions", "repro"):
        if not raw[k].strip():
            raise KnownFileError(f"{where}: {k} is empty")
    if "\n" in raw["summary"]:
        raise KnownFileError(f"{where}: summary must be one line")
    seen = raw["first_seen"]
    if isinstance(seen, str):
        try:
            seen = _dt.date.fromisoformat(seen)
        except ValueError:
            raise KnownFileError(f"{where}: first_seen {raw['first_seen']!r} is not a date (YYYY-MM-DD)") from None
    if isinstance(seen, _dt.datetime) or not isinstance(seen, _dt.date):
        raise KnownFileError(f"{where}: first_seen must be a date (YYYY-MM-DD), got {raw['first_seen']!r}")
    try:
        _check_spec(raw["versions"])
    except ValueError as exc:
        raise KnownFileError(f"{where}: versions {raw['versions']!r} is not a PEP 440 specifier set: {exc}") from None
    if not isinstance(raw.get("intermittent", False), bool):
        raise KnownFileError(f"{where}: intermittent must be true or false")
    error = raw.get("error", "")
    crash = "error" in _each(globs["check"])
    if crash and (not isinstance(error, str) or not error.strip()):
        raise KnownFileError(f"{where}: an entry for a crash (check \"error\") names it: error = \"<text of its "
                             f"message>\", e.g. \"KeyError: 'state1'\"")
    if "error" in raw and not any_glob("error", globs["check"]):
        raise KnownFileError(f"{where}: error is for check \"error\" only (this entry's check is {raw['check']!r})")
    seeds = raw.get("seeds", [])
    if not isinstance(seeds, list) or not all(type(s) is int and s >= 0 for s in seeds):
        raise KnownFileError(f"{where}: seeds must be a list of non-negative integers such as [4]")
    devices = raw.get("devices", [])
    if isinstance(devices, str) or not isinstance(devices, list) or not all(isinstance(d, str) for d in devices):
        raise KnownFileError(f"{where}: devices must be a list of strings such as [\"cpu\"]")
    return Entry(id=raw["id"], **globs, summary=raw["summary"],
                 library=raw["library"], versions=raw["versions"], first_seen=seen.isoformat(), repro=raw["repro"],
                 reference=raw.get("reference", ""), devices=tuple(devices), source=source,
                 intermittent=raw.get("intermittent", False), error=error, seeds=tuple(seeds))


def load(path) -> list[Entry]:
    """The entries of a known-findings file; KnownFileError (naming the entry) when it is bad."""
    from ..isolation.untrusted import DataFileError, read_text
    path = Path(path)
    try:  # a regular file of at most 16 MiB (a FIFO would block, /dev/zero never ends)
        text = read_text(str(path), 16 << 20, "known-findings file")
    except DataFileError as exc:
        raise KnownFileError(str(exc)) from None
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise KnownFileError(f"{path}: not valid TOML: {exc}") from None
    extra = sorted(set(doc) - {"known"})
    if extra:
        raise KnownFileError(f"{path}: unexpected top-level key(s) {', '.join(extra)}; entries are [[known]] tables")
    raw = doc.get("known", [])
    if not isinstance(raw, list):
        raise KnownFileError(f"{path}: `known` must be an array of tables ([[known]])")
    entries = [_entry(r, n, str(path)) for n, r in enumerate(raw, 1)]
    seen = set()
    for e in entries:
        if e.id in seen:
            raise KnownFileError(f"{path}: duplicate id {e.id!r}")
        seen.add(e.id)
    return entries


def installed_versions(libraries=()) -> dict:
    """Versions of the libraries that decide: report.versions() plus any other named distribution."""
    from importlib import metadata

    from .runinfo import versions
    out = dict(versions())
    for lib in libraries:
        if lib not in out:
            try:
                out[lib] = metadata.version(lib)
            except metadata.PackageNotFoundError:
                pass
    return out


def applies(entry: Entry, versions: dict, device: str | None = None) -> str | None:
    """None when the entry applies to these installed versions (and device), else why not."""
    have = versions.get(entry.library)
    if have is None:
        return f"{entry.library} not installed"
    if not version_in(entry.versions, have):
        return f"{entry.library} {have} is outside {entry.versions}"
    if device is not None and entry.devices:
        kind = device.split(":")[0]
        if kind not in entry.devices and device not in entry.devices:
            return f"device {device} not in {', '.join(entry.devices)}"
    return None


# --- judging a run -----------------------------------------------------------------------------

def failing_checks(result) -> list[str]:
    """The checks of a result that failed; a failed/errored result without one counts as its status."""
    names = [n for n, c in result.checks.items() if not c.passed]
    if not names and result.status in FAILING:
        names = [result.status]
    return names


@dataclass
class Failure:
    target: str
    case: str
    seed: int
    check: str
    status: str
    result: object = None
    entries: list = field(default_factory=list)   # ids of the applicable entries matching it
    other: list = field(default_factory=list)     # ids of matching entries that do not apply here

    def key(self) -> tuple:
        return (self.target, self.case, self.seed, self.check)


@dataclass
class Judged:
    entry: Entry
    status: str                 # known | fixed | not run | not applicable
    reason: str = ""
    matched: list = field(default_factory=list)   # Failures
    judged_by: list = field(default_factory=list)  # (target, case, seed, check) that ran and passed


@dataclass
class Verdict:
    source: str | None
    device: str | None
    versions: dict
    entries: list               # Judged, in file order
    new: list                   # Failures matched by no applicable entry
    known: list                 # Failures matched by one

    def by_status(self, status: str) -> list:
        return [j for j in self.entries if j.status == status]

    @property
    def fixed(self) -> list:
        return self.by_status("fixed")

    @property
    def ok(self) -> bool:
        return not self.new and not self.fixed

    def counts(self) -> dict:
        return {"new": len(self.new), "known": len(self.known), "fixed": len(self.fixed),
                "known_entries": len(self.by_status("known")), "not_run": len(self.by_status("not run")),
                "not_applicable": len(self.by_status("not applicable"))}

    def to_dict(self, device: str = "cpu") -> dict:
        from .runinfo import repro_command

        def failure(f: Failure) -> dict:
            out = {"target": f.target, "case": f.case, "seed": f.seed, "check": f.check, "status": f.status}
            if f.result is not None:
                out["repro"] = repro_command(f.result, device)
            if f.entries:
                out["entries"] = list(f.entries)
            if f.other:
                out["not_applicable_entries"] = list(f.other)
            return out
        return {
            "file": self.source, "device": self.device, "counts": self.counts(), "ok": self.ok,
            "entries": [{"id": j.entry.id, "status": j.status, "reason": j.reason, "target": _json(j.entry.target),
                         "case": _json(j.entry.case), "check": _json(j.entry.check), "summary": j.entry.summary,
                         "reference": j.entry.reference, "library": j.entry.library, "versions": j.entry.versions,
                         "installed": self.versions.get(j.entry.library), "devices": list(j.entry.devices),
                         "first_seen": j.entry.first_seen, "repro": j.entry.repro,
                         "matched": [{"target": f.target, "case": f.case, "seed": f.seed, "check": f.check}
                                     for f in j.matched]}
                        for j in self.entries],
            "new": [failure(f) for f in self.new],
        }


def _json(globs):
    return globs if isinstance(globs, str) else list(globs)


def classify(results, entries, versions: dict, device: str | None = None, source: str | None = None) -> Verdict:
    """Judge a run's CaseResults against known entries (see the module docstring)."""
    judged = [Judged(e, "known") for e in entries]
    for j in judged:
        reason = applies(j.entry, versions, device)
        if reason is not None:
            j.status, j.reason = "not applicable", reason
    live = [j for j in judged if j.status != "not applicable"]
    new, known = [], []
    for r in results:
        if r.status == "skip":
            continue
        failed = set(failing_checks(r))
        for name in failing_checks(r):
            f = Failure(r.target, r.case, r.seed, name, r.status, r)
            for j in judged:
                if j.entry.matches(r.target, r.case, name, r.reason, r.seed):
                    if j.status == "not applicable":
                        f.other.append(j.entry.id)
                    else:
                        f.entries.append(j.entry.id)
                        j.matched.append(f)
            (known if f.entries else new).append(f)
        if r.status not in RAN:
            continue
        # cases that ran without crashing judge entries whose check passed here
        for j in live:
            e = j.entry
            if not e.covers(r.target, r.case, r.seed):
                continue
            names = [n for n in r.checks if any_glob(n, e.check) and n not in failed]
            if not names and any_glob("error", e.check):
                names = ["error"]  # an entry for a crash: this case ran without one
            j.judged_by += [(r.target, r.case, r.seed, n) for n in names]
    for j in live:
        if j.matched:
            j.status = "known"
            j.reason = f"{len(j.matched)} failing check(s)"
        elif j.judged_by and j.entry.intermittent:
            j.status = "not run"
            j.reason = "intermittent: not seen in this run"
        elif j.judged_by:
            j.status = "fixed"
            t, c, s, n = j.judged_by[0]
            more = f" (+{len(j.judged_by) - 1} more)" if len(j.judged_by) > 1 else ""
            j.reason = f"{FIXED_HINT}: {n} passed in {t} {c} seed={s}{more}"
        else:
            j.status = "not run"
            j.reason = "no case selected by this entry ran"
    return Verdict(source, device, dict(versions), judged, new, known)


# --- text ----------------------------------------------------------------------------------

def _ref(e: Entry) -> str:
    return f" [{e.reference}]" if e.reference else ""


def header_lines(entries, versions: dict, device: str, source: str, target_names=None) -> list[str]:
    """What prints before a run: the known defects that apply to these libraries."""
    live = [e for e in entries if applies(e, versions, device) is None
            and (target_names is None or any(any_glob(t, e.target) for t in target_names))]
    libs = sorted({e.library for e in live})
    where = ", ".join(f"{lib} {versions.get(lib)}" for lib in libs)
    if not live:
        return [f"Known findings ({source}): no entry applies to this run's targets, libraries and device"]
    out = [f"Known defects that apply here ({where}; {source}):"]
    out += [f"  {e.id}: {e.summary}{_ref(e)}" for e in live]
    return out


def verdict_lines(v: Verdict, limit: int = 10) -> list[str]:
    """The outcome per entry: known (matched), fixed, not run, not applicable."""
    out = []
    if v.new:
        rows = len({(f.target, f.case, f.seed) for f in v.new})
        out.append(f"NEW failing checks (no applicable known entry; they fail the run): {len(v.new)} in "
                   f"{rows} row{'' if rows == 1 else 's'}: "
                   + ", ".join(f"{f.target} {f.case} {f.check}" for f in v.new[:limit])
                   + (f", +{len(v.new) - limit} more" if len(v.new) > limit else ""))
    known = v.by_status("known")
    if known:
        out.append("Known defects (they reproduce; they do not fail the run):")
        out += [f"  KNOWN {j.entry.id} ({j.entry.label()}): {j.reason}" for j in known]
    if v.fixed:
        out.append(f"Known entries that no longer reproduce ({FIXED_HINT}):")
        out += [f"  FIXED {j.entry.id} ({j.entry.label()}): {j.reason}" for j in v.fixed]
    # the entries this run did not exercise, or that are for other versions or devices, are counted, not
    # listed (report.md's "Known findings" table has each); a not-applicable entry that a new failure
    # matches is named, since it may be the entry to update
    not_run, na = v.by_status("not run"), v.by_status("not applicable")
    matched = {i for f in v.new for i in getattr(f, "other", ())}
    named = [j for j in na if j.entry.id in matched]
    if not_run or na:
        out.append(f"Known entries: {len(not_run)} not exercised by this run, {len(na)} not applicable here "
                   "(each listed in report.md, \"Known findings\")")
    if named:
        out.append("Known entries not applicable here that a new failure matches: "
                   + "; ".join(f"{j.entry.id} ({j.reason})" for j in named[:limit]))
    return out + [""] if out else out


def markdown(section: dict | None) -> list[str]:
    """report.md's "Known findings" section from the report.json `known` object."""
    if section is None:
        return ["## Known findings", "", "Not judged (`--known none`): every failure counts.", ""]
    c = section["counts"]
    out = ["## Known findings", "",
           f"File `{section['file']}`, device {section['device']}: **{c['new']} new**, {c['known']} known "
           f"({c['known_entries']} entries), **{c['fixed']} fixed**, {c['not_run']} not run, "
           f"{c['not_applicable']} not applicable. The run passes when nothing is new and nothing is fixed.", ""]
    rows = []
    for e in section["entries"]:
        status = {"fixed": f"**fixed** ({FIXED_HINT})"}.get(e["status"], e["status"])
        ref = f"[link]({e['reference']})" if e["reference"].startswith("http") else e["reference"]
        rows.append(f"| {e['id']} | {status} | `{e['target']}` `{e['case']}` `{e['check']}` | {e['summary']} | "
                    f"{ref} | {e['library']} {e['versions']} (installed: {e['installed'] or '-'}) | "
                    f"{e['first_seen']} | `{e['repro']}` | {e['reason']} |")
    if rows:
        out += ["| id | status | target / case / check | summary | reference | applies to | first seen | repro | "
                "detail |", "|---|---|---|---|---|---|---|---|---|", *rows, ""]
    if section["new"]:
        out += ["### New failures (no applicable known entry)", ""]
        out += [f"- `{f['target']}` `{f['case']}` seed {f['seed']}: **{f['check']}** ({f['status']})"
                + (f"; matches not-applicable entries {', '.join(f['not_applicable_entries'])}"
                   if f.get("not_applicable_entries") else "")
                + (f"; reproduce: `{f['repro']}`" if f.get("repro") else "") for f in section["new"]]
        out.append("")
    return out


# --- the CLI's use ----------------------------------------------------------------------------

ENV = "OPTIMIZER_ORACLE_KNOWN"  # the file workers annotate results from ("none": no annotation)


class Judge:
    """What `python -m oracle.compare` does with --known: load (KnownFileError on a bad file), print the
    applicable entries before the run, classify after it, and give the report section and exit status."""

    def __init__(self, entries, source: str | None, device: str, note: str = ""):
        self.entries, self.source, self.device, self.note = entries, source, device, note
        self.versions = installed_versions({e.library for e in entries or ()})
        self.verdict: Verdict | None = None
        self._saved_env = None

    @classmethod
    def from_option(cls, option: str | None, device: str) -> "Judge":
        if option is not None and option.lower() == "none":
            return cls(None, None, device, "known findings disabled (--known none): every failure counts")
        if option is None:
            path = default_path()
            if not path.exists():
                return cls(None, None, device, f"note: no known-findings file at {path}: every failure counts")
        else:
            path = Path(option)
        entries = load(path)
        try:  # shown (and written to report.json) relative to the working folder where it lies inside
            shown = str(path.resolve().relative_to(Path.cwd().resolve()))
        except ValueError:
            shown = str(path)
        return cls(entries, shown, device)

    @property
    def active(self) -> bool:
        return self.entries is not None

    def export_env(self) -> None:
        """Worker processes (spawned) annotate results from the same file."""
        self._saved_env = os.environ.get(ENV)
        os.environ[ENV] = self.source if self.active else "none"

    def restore_env(self) -> None:
        if self._saved_env is None:
            os.environ.pop(ENV, None)
        else:
            os.environ[ENV] = self._saved_env

    def header(self, target_names) -> list[str]:
        if not self.active:
            return [self.note]
        return header_lines(self.entries, self.versions, self.device, self.source, target_names)

    def judge(self, results) -> dict | None:
        """The report's `known` section (None when disabled)."""
        if not self.active:
            return None
        self.verdict = classify(results, self.entries, self.versions, self.device, self.source)
        return self.verdict.to_dict(self.device)

    def lines(self) -> list[str]:
        return verdict_lines(self.verdict) if self.verdict is not None else []

    def is_new(self, result) -> bool:
        """Whether a failed/errored result holds a failure that no applicable entry matches."""
        if self.verdict is None:
            return result.status in FAILING
        return any(f.result is result for f in self.verdict.new)

    def exit_ok(self, results) -> bool:
        if self.verdict is None:
            return not any(r.status in FAILING for r in results)
        return self.verdict.ok


# --- notes on results (scenarios.finish, the kill matrix) ------------------------------------------

@functools.lru_cache(maxsize=4)
def _default_entries(path: str) -> tuple:
    try:
        entries = load(path)
    except KnownFileError:
        return ()
    vers = installed_versions({e.library for e in entries})
    return tuple(e for e in entries if applies(e, vers) is None)


def note(target: str, check: str, case: str | None = None) -> str | None:
    """The text naming a known defect that matches (target, case, check) in the default file and
    applies to the installed versions, for a result's `reason`; None when none does."""
    path = os.environ.get(ENV) or str(default_path())
    if path == "none" or not os.path.exists(path):
        return None
    return _note(path, target, check, case)


@functools.lru_cache(maxsize=8192)
def _note(path: str, target: str, check: str, case: str | None) -> str | None:
    """note() for one file: asked again for every probe run of an inference (the same few names)."""
    for e in _default_entries(path):
        if any_glob(target, e.target) and any_glob(check, e.check) and (case is None or any_glob(case, e.case)):
            return f"known {e.library} defect ({e.id}): {e.summary}"
    return None


__all__ = ["Entry", "Judge", "any_glob", "KnownFileError", "Verdict", "applies", "classify", "default_path", "installed_versions",
           "load", "note", "version_in", "FIXED_HINT"]
