"""Known findings (reports/known.toml, oracle.compare.checking.known): the committed file is valid and every
entry's repro still reproduces on its listed versions; classification is strict-xfail (known / new /
fixed / not run / not applicable); the CLI's exit status follows it; `diff` compares two reports."""
from __future__ import annotations

import copy
import functools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from oracle.compare.checking import known as K
from oracle.compare.measuring.checks import CheckResult
from oracle.compare.cli import main
from oracle.compare.reporting.diff import compare
from oracle.compare.checking.case_run import CaseResult

ROOT = Path(__file__).resolve().parent.parent
KNOWN_FILE = ROOT / "reports" / "known.toml"
ENTRIES = K.load(KNOWN_FILE)
VERSIONS = K.installed_versions({e.library for e in ENTRIES})


# --- the committed file and its evidence -------------------------------------------------------

def test_default_file_is_the_committed_one():
    assert K.default_path() == KNOWN_FILE


def test_committed_file_is_valid():
    assert ENTRIES, "reports/known.toml holds no entry"
    for e in ENTRIES:
        assert e.repro_path().is_file(), f"{e.id}: repro {e.repro} missing"
        assert e.repro_path().parent == ROOT / "reports" / "known", e.id
        assert e.summary and "\n" not in e.summary


def test_no_known_or_declared_lists_left_in_code():
    from oracle.compare import scenarios
    from oracle.compare.scenarios import deepspeed_engine as engine
    assert not hasattr(scenarios, "KNOWN") and not hasattr(scenarios, "DECLARED")
    assert not hasattr(engine, "KNOWN"), "engine scenario defects belong in reports/known.toml"


def repro_env(entry) -> dict:
    """The repro's environment: DeepSpeed's run on its CPU accelerator with the ops the harness built
    (the same TORCH_EXTENSIONS_DIR, so no script rebuilds them)."""
    # this worker may hold a live process group: its rendezvous settings must not reach the script
    # (and pytest's name of the current test, which would make each entry's environment its own: run_script)
    drop = {"MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_SIZE", "PYTEST_CURRENT_TEST"}
    env = {k: v for k, v in os.environ.items() if k not in drop}
    if entry.library == "deepspeed":
        from oracle.compare.targets.deepspeed import default_extensions_dir
        env.setdefault("DS_ACCELERATOR", "cpu")
        env.setdefault("TORCH_EXTENSIONS_DIR", default_extensions_dir())
    return env


# Runs a DeepSpeed repro script unchanged, in a process where our loader has already imported the
# cached ops: DeepSpeed then finds them loaded. A script left to DeepSpeed's own JIT load runs ninja,
# which recompiles every op when the venv is newer than the builds (CI's is): 30-70 s per script.
PRELOADED = """
import runpy, sys
from oracle.compare.targets.deepspeed import preload_ops
preload_ops()
path = sys.argv[1]
sys.argv = [path]
runpy.run_path(path, run_name="__main__")
"""


@functools.lru_cache(maxsize=None)
def prebuilt_deepspeed_ops(where: str) -> dict:
    """Build (or load) every DeepSpeed op the scripts use, once per worker and under fused.build_lock:
    scripts that JIT-built an op themselves raced each other under torch's own lock file, and one killed
    at its timeout left that file behind, so every later script waited out its timeout too."""
    from oracle.compare.targets.deepspeed import build_ops
    return build_ops(where)


@functools.lru_cache(maxsize=None)
def run_script(argv: tuple, env: tuple) -> subprocess.CompletedProcess:
    """A repro script's run, once per script and environment: entries that share a script (one defect
    seen by several scenarios) share its evidence (64 entries, 36 scripts)."""
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=600, cwd=ROOT, env=dict(env))


# Entries sharing a script share its run (run_script) on one worker: a group per kind. Scripts are
# per library, so DeepSpeed's entries share only among themselves, and the two groups run on two
# workers; tests/conftest.py hands the DeepSpeed group out after the ungrouped tests, once CI's
# background op build has had its time.
@pytest.mark.parametrize("entry", [pytest.param(e, marks=[pytest.mark.deepspeed_ops, pytest.mark.xdist_group("known_repro_deepspeed")])
                                   if e.library == "deepspeed" else pytest.param(e, marks=pytest.mark.xdist_group("known_repro"))
                                   for e in ENTRIES], ids=lambda e: e.id)
def test_repro_still_reproduces_on_its_listed_versions(entry):
    """strict xfail for the evidence: where the entry applies, its script must still show the defect."""
    why = K.applies(entry, VERSIONS)
    if why is not None:
        pytest.skip(f"{entry.id} does not apply here: {why}")
    if entry.devices and "cpu" not in entry.devices:
        import torch
        if not torch.cuda.is_available():
            pytest.skip(f"{entry.id} is for {', '.join(entry.devices)}")
    env = repro_env(entry)
    if entry.library == "deepspeed":
        built = prebuilt_deepspeed_ops(env["TORCH_EXTENSIONS_DIR"])
        failed = {op: r for op, r in built.items() if isinstance(r, str) and r.startswith("failed")}
        assert not failed, f"DeepSpeed ops did not build, so {entry.id} cannot run: {failed}"
    argv = [sys.executable, str(entry.repro_path())]
    if entry.library == "deepspeed":  # the script as it is, run after the cached ops are loaded (PRELOADED)
        argv = [sys.executable, "-c", PRELOADED, str(entry.repro_path())]
    out = run_script(tuple(argv), tuple(sorted(env.items())))
    assert out.returncode == 0, (f"{entry.id} no longer reproduces on {entry.library} "
                                 f"{VERSIONS.get(entry.library)} ({K.FIXED_HINT}):\n{out.stdout}{out.stderr}")


# --- versions and loading ------------------------------------------------------------------

@pytest.mark.parametrize("spec,version,inside", [
    (">=2.13,<2.14", "2.13.0+cpu", True), (">=2.13,<2.14", "2.13.1", True), (">=2.13,<2.14", "2.14.0", False),
    (">=2.13,<2.14", "2.12.1+cu121", False), ("==0.19.8", "0.19.8", True), ("<1", "0.18.0", True),
    (">=2.13,<2.14", "2.13.0a0+gitabc", True), ("~=0.19.0", "0.19.9", True), ("~=0.19.0", "0.20.0", False),
])
def test_version_in(spec, version, inside):
    assert K.version_in(spec, version) is inside
    assert K._tiny_contains(spec, version) is inside  # the fallback without `packaging` agrees


GOOD = """
[[known]]
id = "a"
target = "t.*"
case = "scenario:x/*"
check = "c"
summary = "s"
reference = ""
library = "torch"
versions = ">=2"
first_seen = 2026-01-02
repro = "known/a.py"
"""


@pytest.mark.parametrize("edit,message", [
    (lambda t: t.replace('check = "c"\n', ""), "entry 1 ('a'): missing check"),
    (lambda t: t.replace('versions = ">=2"', 'versions = "two"'), "entry 1 ('a'): versions 'two'"),
    (lambda t: t.replace("first_seen = 2026-01-02", 'first_seen = "yesterday"'), "first_seen"),
    (lambda t: t + 'colour = "red"\n', "unknown key(s) colour"),
    (lambda t: t + t, "duplicate id 'a'"),
    (lambda t: t.replace("[[known]]", "[[known"), "not valid TOML"),
    (lambda t: t.replace('summary = "s"', 'summary = """two\nlines"""'), "one line"),
    (lambda t: t + 'devices = "cpu"\n', "devices must be a list"),
    # an entry for a crash says which crash, and only such an entry may
    (lambda t: t.replace('check = "c"', 'check = "error"'), "an entry for a crash (check \"error\") names it"),
    (lambda t: t + 'error = "KeyError"\n', "error is for check \"error\" only"),
    (lambda t: t.replace('case = "scenario:x/*"', 'case = []'), "case must be a non-empty glob or a non-empty list"),
    (lambda t: t.replace('case = "scenario:x/*"', 'case = ["scenario:x/*", 3]'), "case must be a non-empty glob"),
])
def test_bad_file_names_the_entry(tmp_path, edit, message):
    path = tmp_path / "known.toml"
    path.write_text(edit(GOOD))
    with pytest.raises(K.KnownFileError) as exc:
        K.load(path)
    assert message in str(exc.value)


def test_good_file_loads(tmp_path):
    path = tmp_path / "known.toml"
    path.write_text(GOOD)
    [e] = K.load(path)
    assert (e.id, e.first_seen, e.devices, e.repro_path()) == ("a", "2026-01-02", (), tmp_path / "known" / "a.py")


# --- classification ----------------------------------------------------------------------------

def entry(**kw):
    base = dict(id="e", target="t.*", case="scenario:x/*", check="c", summary="s", library="torch",
                versions=">=2", first_seen="2026-01-01", repro="known/e.py")
    return K.Entry(**{**base, **kw})


def result(target="t.a", case="scenario:x/v", status="pass", **checks):
    r = CaseResult(target, case, "adamw", "float32", [], 0, 20, status=status)
    r.checks = {name: CheckResult(name, passed=ok) for name, ok in checks.items()}
    return r


V = {"torch": "2.13.0+cpu"}


def test_classify_known():
    v = K.classify([result(status="fail", c=False, d=True)], [entry()], V, "cpu")
    assert v.ok and [f.check for f in v.known] == ["c"] and not v.new
    assert v.entries[0].status == "known" and v.counts()["known"] == 1


def test_classify_new_failure_even_beside_a_known_one():
    v = K.classify([result(status="fail", c=False, d=False)], [entry()], V, "cpu")
    assert not v.ok and [f.check for f in v.new] == ["d"] and [f.check for f in v.known] == ["c"]


def test_classify_fixed_when_the_selected_check_passes():
    v = K.classify([result(c=True)], [entry()], V, "cpu")
    assert not v.ok and v.entries[0].status == "fixed" and K.FIXED_HINT in v.entries[0].reason


def test_classify_not_run():
    rs = [result(case="adamw/fp32/x", c=True), result(target="u.a", c=True),
          result(status="skip"), result(status="error", error=False, case="scenario:y/v")]
    v = K.classify(rs[:3], [entry()], V, "cpu")
    assert v.ok and v.entries[0].status == "not run"
    # an errored case did not run the entry's check: not evidence of a fix either
    v = K.classify([result(status="error", error=False)], [entry()], V, "cpu")
    assert v.entries[0].status == "not run" and [f.check for f in v.new] == ["error"]


def test_classify_not_applicable_versions_devices_and_absent_library():
    es = [entry(id="old", versions="<2"), entry(id="gpu", devices=("cuda",)), entry(id="ds", library="deepspeed")]
    v = K.classify([result(status="fail", c=False)], es, V, "cpu")
    assert [j.status for j in v.entries] == ["not applicable"] * 3
    assert "outside <2" in v.entries[0].reason and "device cpu" in v.entries[1].reason
    assert "deepspeed not installed" in v.entries[2].reason
    # a failure matching only entries for other versions is new, with the entries named
    assert not v.ok and v.new[0].other == ["old", "gpu", "ds"]


def test_a_list_of_globs_matches_any_of_them(tmp_path):
    path = tmp_path / "known.toml"
    path.write_text(GOOD.replace('case = "scenario:x/*"', 'case = ["scenario:x/*", "scenario:y/*"]'))
    [e] = K.load(path)
    assert e.case == ("scenario:x/*", "scenario:y/*")
    rs = [result(status="fail", c=False), result(case="scenario:y/w", status="fail", c=False),
          result(case="scenario:z/v", status="fail", c=False)]
    v = K.classify(rs, [e], V, "cpu")
    assert [f.case for f in v.known] == ["scenario:x/v", "scenario:y/w"] and [f.case for f in v.new] == ["scenario:z/v"]
    assert v.to_dict()["entries"][0]["case"] == ["scenario:x/*", "scenario:y/*"]


def test_classify_entry_for_a_crash():
    e = entry(check="error", error="KeyError: 'state1'")
    crashed = result(status="error", error=False)
    crashed.reason = "rank 0 exited with 1:\nTraceback ...\nKeyError: 'state1'\n"
    assert K.classify([crashed], [e], V, "cpu").ok
    # another crash of the same case is not this defect: new, and the entry is not evidence of anything
    other = result(status="error", error=False)
    other.reason = "Traceback ...\nIndexError: list index out of range\n"
    v = K.classify([other], [e], V, "cpu")
    assert not v.ok and [f.check for f in v.new] == ["error"] and v.entries[0].status == "not run"
    v = K.classify([result(c=True)], [e], V, "cpu")  # ran without crashing: fixed
    assert v.entries[0].status == "fixed"


def test_every_committed_crash_entry_names_its_crash():
    crashes = [e for e in ENTRIES if e.check == "error"]
    assert crashes and all(e.error.strip() for e in crashes)


def test_failed_result_without_a_failing_check_counts_as_its_status():
    v = K.classify([result(status="fail", c=True)], [], V, "cpu")
    assert [f.check for f in v.new] == ["fail"]


def test_section_round_trips_to_json_and_markdown():
    v = K.classify([result(status="fail", c=False), result(target="t.b", status="fail", z=False)],
                   [entry(), entry(id="f", check="q", case="*"), entry(id="na", versions="<1")], V, "cpu")
    section = json.loads(json.dumps(v.to_dict()))
    assert section["counts"] == {"new": 1, "known": 1, "fixed": 0, "known_entries": 1, "not_run": 1,
                                 "not_applicable": 1}
    md = "\n".join(K.markdown(section))
    assert "## Known findings" in md and "New failures" in md and "t.b" in md
    assert "Not judged" in "\n".join(K.markdown(None))


# --- the CLI -----------------------------------------------------------------------------------

def cli(tmp_path, *args):
    code = main([*args, "--report-dir", str(tmp_path / "r"), "--quiet", "--no-isolate"])
    path = tmp_path / "r" / "report.json"
    return code, (json.loads(path.read_text()) if path.exists() else None)


FUSED_IRREGULAR = ("--optimizer", "adamw", "--target", "torch.adamw.fused", "--scenario", "irregular")
FUSED_ENTRY = "torch-fused-cpu-noncontiguous"


def applicable(entry_id):
    e = next(e for e in ENTRIES if e.id == entry_id)
    if K.applies(e, VERSIONS, "cpu") is not None:
        pytest.skip(f"{entry_id} does not apply to torch {VERSIONS.get('torch')}")
    return e


def test_known_defect_passes_and_is_named_first(tmp_path, capsys):
    applicable(FUSED_ENTRY)
    code, doc = cli(tmp_path, *FUSED_IRREGULAR)
    out = capsys.readouterr().out
    assert code == 0, out
    first = out.splitlines()[:3]
    assert first[0].startswith("Known defects that apply here (torch ") and FUSED_ENTRY in first[1], first
    # two failing checks, both known: noncontiguous (FUSED_ENTRY) and bounds (the strided-writes entry)
    # counted in rows, as the failed rows are: one row, both its failing checks known
    assert f"KNOWN {FUSED_ENTRY}" in out and "of the 1 failing row: 0 new, 1 known" in out
    section = doc["known"]
    assert section["ok"] and Path(section["file"]).resolve() == KNOWN_FILE
    [j] = [e for e in section["entries"] if e["id"] == FUSED_ENTRY]
    assert j["status"] == "known" and j["matched"][0]["check"] == "noncontiguous"
    md = (tmp_path / "r" / "report.md").read_text()
    assert "## Known findings" in md and FUSED_ENTRY in md
    # the row's reason names the entry too (scenarios.finish reads the same file)
    [row] = [r for r in doc["results"] if r["status"] == "fail"]
    assert f"known torch defect ({FUSED_ENTRY})" in row["reason"]


def test_known_none_counts_every_failure(tmp_path, capsys):
    applicable(FUSED_ENTRY)
    code, doc = cli(tmp_path, *FUSED_IRREGULAR, "--known", "none")
    assert code == 1 and doc["known"] is None
    assert "known findings disabled" in capsys.readouterr().out


def write_known(tmp_path, *entries) -> Path:
    text = ""
    for e in entries:
        text += "[[known]]\n" + "".join(f"{k} = {json.dumps(v) if isinstance(v, str) else v}\n"
                                        for k, v in e.items()) + "\n"
    path = tmp_path / "known.toml"
    path.write_text(text)
    return path


def fabricated(**kw):
    return {"id": "fabricated", "target": "torch.adamw.forloop", "case": "scenario:irregular/*",
            "check": "noncontiguous", "summary": "a defect that is not there", "reference": "",
            "library": "torch", "versions": ">=2", "first_seen": "2026-01-01", "repro": "known/none.py", **kw}


def test_entry_that_no_longer_reproduces_fails_as_fixed(tmp_path, capsys):
    path = write_known(tmp_path, fabricated())
    code, doc = cli(tmp_path, "--optimizer", "adamw", "--target", "torch.adamw.forloop", "--scenario", "irregular",
                    "--known", str(path))
    out = capsys.readouterr().out
    assert code == 1, out
    assert "FIXED fabricated" in out and "fixed upstream? update or drop the entry" in out
    assert "1 known entry fixed (no longer reproducing)" in out
    assert doc["known"]["entries"][0]["status"] == "fixed"


def test_entry_for_other_versions_does_not_cover_a_failure(tmp_path, capsys):
    applicable(FUSED_ENTRY)
    path = write_known(tmp_path, fabricated(id="old-torch", target="torch.*.fused", versions="<2"))
    code, doc = cli(tmp_path, *FUSED_IRREGULAR, "--known", str(path))
    out = capsys.readouterr().out
    assert code == 1 and "not applicable here that a new failure matches: old-torch (torch" in out
    assert doc["known"]["new"][0]["not_applicable_entries"] == ["old-torch"]


def test_new_defect_fails_and_is_listed_as_new(tmp_path, capsys):
    # a mutant (a defect that shipped in a real library) is not in the known file
    code, doc = cli(tmp_path, "--impl", "oracle.mutants.catalog:FlagGems4988DecaySwapped", "--optimizer", "adamw",
                    "--dtype", "fp32", "--case", "adamw/fp32/wd0.1/single/normal", "--scenario", "none")
    out = capsys.readouterr().out
    assert code == 1, out
    assert "NEW failing checks" in out and "NEW FAIL impl:oracle.mutants.catalog:FlagGems4988DecaySwapped" in out
    assert doc["known"]["counts"]["new"] >= 1 and not doc["known"]["ok"]


def test_unexercised_entries_do_not_fail(tmp_path, capsys):
    code, doc = cli(tmp_path, "--optimizer", "adamw", "--target", "torch.adamw.forloop", "--case",
                    "adamw/fp32/wd0.1/single/normal", "--scenario", "none")
    assert code == 0
    assert {e["status"] for e in doc["known"]["entries"]} <= {"not run", "not applicable"}


def test_bad_known_file_is_a_usage_error(tmp_path, capsys):
    path = write_known(tmp_path, fabricated(versions="not a version"))
    assert main(["--known", str(path), "--report-dir", str(tmp_path)]) == 2
    assert "entry 1 ('fabricated'): versions" in capsys.readouterr().err
    assert main(["--known", str(tmp_path / "missing.toml"), "--report-dir", str(tmp_path)]) == 2


# --- diff --------------------------------------------------------------------------------------

def row(target, case, status="pass", dtype="float32", seed=0, reason="", **ratios):
    """A result row as report.json holds it (valid against report.schema.json: diff reads only those)."""
    def check(r):
        return {"passed": r is not None and r <= 1, "compared": 1, "unbounded": 0,
                "worst_ratio": r if r is not None else "inf", "worst_error_ulps": 0.0, "worst_bound_ulps": 1.0,
                "power": 0.0, "note": "", "findings": []}
    return {"target": target, "case": case, "optimizer": "adamw", "dtype": dtype, "hparams": [], "seed": seed,
            "steps": 20, "status": status, "reason": reason or ("a check failed" if status == "fail" else ""),
            "seconds": 0.0, "repro": "", "checks": {n: check(r) for n, r in ratios.items()}}


def report(*rows):
    return {"schema": "optimizer-oracle-report/2", "created": "2026-01-01T00:00:00Z", "complete": True,
            "versions": {"python": "3.11", "torch": "2.13.0+cpu", "numpy": "2.0"},
            "argv": ["python", "-m", "oracle.compare"], "summary": [], "results": list(rows)}


OLD = report(
    row("t.a", "adamw/fp32/x", lockstep=0.5, counters=0.0),
    row("t.a", "adamw/fp32/y", "fail", lockstep=3.0),
    row("t.b", "adamw/fp32/x", lockstep=0.2),
    row("t.c", "(all cases)", "skip", reason="lib missing"),
    row("t.d", "adamw/fp32/x", lockstep=0.1),
    row("t.e", "adamw/fp32/x", lockstep=0.3),
)
NEW = report(
    row("t.a", "adamw/fp32/x", lockstep=0.6, counters=0.004),   # small moves, exact check 0 -> tiny: not flagged
    row("t.a", "adamw/fp32/y", lockstep=0.9),                   # fixed
    row("t.b", "adamw/fp32/x", lockstep=0.9),                   # 4.5x rise while passing: flagged
    row("t.c", "adamw/fp32/x", lockstep=0.1),                   # skip vanished
    row("t.d", "(all cases)", "skip", reason="lib missing"),    # skip appeared
    row("t.e", "adamw/fp32/x", "fail", lockstep=None),          # new failure
)


def test_diff_finds_each_kind_of_change():
    d = compare(OLD, NEW, factor=2.0)
    assert d.new_failures == [("t.e", "adamw/fp32/x", 0, "lockstep", "fail")]
    assert d.fixed == [("t.a", "adamw/fp32/y", 0, "lockstep")]
    assert [s[:2] for s in d.skips_appeared] == [("t.d", "(all cases)")]
    # a target new to NEW that skips, or a new case a target skips, loses nothing that ran before
    more = compare(OLD, report(*NEW["results"], row("t.f", "(all cases)", "skip", reason="lib missing"),
                               row("t.a", "adamw/c64/x", "skip", reason="no complex")), factor=2.0)
    assert more.skips_appeared == d.skips_appeared
    assert [s[:2] for s in more.new_rows_skipped] == [("t.f", "(all cases)"), ("t.a", "adamw/c64/x")]
    assert ("t.c", "(all cases)", 0, "absent") in d.skips_vanished
    assert [(r[0], r[2]) for r in d.rose] == [("t.b", "lockstep"), ("t.e", "lockstep")]
    assert d.worse


def test_diff_factor_and_identical_runs():
    assert not compare(OLD, OLD).worse
    only_ratio = report(*[r for r in OLD["results"] if r["target"] != "t.b"], row("t.b", "adamw/fp32/x", lockstep=0.9))
    assert compare(OLD, only_ratio, factor=2.0).worse
    assert not compare(OLD, only_ratio, factor=5.0).worse


def test_diff_cli_exit_codes_and_markdown(tmp_path, capsys):
    old, new = tmp_path / "old.json", tmp_path / "new.json"
    old.write_text(json.dumps(OLD))
    new.write_text(json.dumps(NEW))
    assert main(["diff", str(old), str(new), "--factor", "2", "--out", str(tmp_path / "diff.md")]) == 1
    out = capsys.readouterr().out
    assert "oracle.compare diff: WORSE" in out and "rose more than 2x" in out and "### New failures (1)" in out
    assert (tmp_path / "diff.md").read_text() == out
    assert main(["diff", str(old), str(old)]) == 0
    assert "no regression" in capsys.readouterr().out
    assert main(["diff", str(old), str(tmp_path / "missing.json")]) == 2
    (tmp_path / "bad.json").write_text("{}")
    assert main(["diff", str(old), str(tmp_path / "bad.json")]) == 2


def test_diff_on_committed_reports():
    """reports/torchao/previous: torchao judged by torch's bias-correction convention (commit 372f9bf);
    reports/torchao: under its own declared precision. Going forward fixes 27 failing checks and
    breaks nothing; going back is worse."""
    prev, cur = ROOT / "reports/torchao/previous/report.json", ROOT / "reports/torchao/report.json"
    out = subprocess.run([sys.executable, "-m", "oracle.compare", "diff", str(prev), str(cur)],
                         capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "no regression" in out.stdout and "0 new failures" in out.stdout
    from oracle.compare.reporting.diff import load_report
    d = compare(load_report(str(prev)), load_report(str(cur)))
    fixed = {(t, c, k) for t, c, _, k in d.fixed}
    assert ("torchao.adamw", "adamw/fp32/wd0.1/single/normal", "lockstep") in fixed
    assert ("torchao.adamw", "scenario:rank_skew/fp32/w2+w4", "error") in fixed
    # torchao's float32 step counter is now its declared convention (counter_format="float32"): the
    # current report's long-horizon row passes (its name now lists the low-precision horizons too)
    [horizon] = [r for r in load_report(str(cur))["results"]
                 if r["target"] == "torchao.adamw" and r["case"].startswith("scenario:long_horizon/")]
    assert horizon["status"] == "pass" and "counters@16777216" in horizon["checks"]
    back = compare(load_report(str(cur)), load_report(str(prev)))
    # going back, everything fixed fails again (the old report also has rows the new one ran no more)
    assert back.worse and {(f[0], f[1], f[3]) for f in back.new_failures} >= fixed


def test_diff_accepts_report_folders(tmp_path):
    for name, doc in (("a", OLD), ("b", copy.deepcopy(OLD))):
        (tmp_path / name).mkdir()
        (tmp_path / name / "report.json").write_text(json.dumps(doc))
    assert main(["diff", str(tmp_path / "a"), str(tmp_path / "b")]) == 0


# --- the nightly path --------------------------------------------------------------------------

def _gpu_suite():
    sys.path.insert(0, str(ROOT / "scripts"))
    import gpu_suite
    return gpu_suite


def test_gpu_suite_judges_against_the_known_file_and_diffs_with_a_previous_report(tmp_path):
    gs = _gpu_suite()
    names = {n: " ".join(a) for n, a, _ in gs.steps(tmp_path, "python")}
    assert "diff" not in names and "--known reports/known.toml" in names["compare"]
    prev = tmp_path / "last-night.json"
    prev.write_text(json.dumps(OLD))
    rd = tmp_path / "gpu"
    kept = gs.keep_previous(str(prev), rd)
    assert kept == rd / "previous" / "report.json" and json.loads(kept.read_text()) == OLD
    assert gs.keep_previous(str(tmp_path / "missing.json"), rd) is None
    steps = gs.steps(rd, sys.executable, previous=kept)
    assert [n for n, _, _ in steps][-1] == "diff"
    (rd / "report.json").write_text(json.dumps(NEW))
    name, argv, _ = steps[-1]
    out = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 1 and gs.verdict("diff", out.returncode, rd).startswith("WORSE")
    results = [{"step": s, "exit": 0, "seconds": 1.0, "verdict": "pass"} for s in ("device", "compare", "diff")]
    text = gs.write_summary(rd, results)
    assert "## Against the previous run" in text and "### New failures (1)" in text
    text = gs.write_summary(rd, results[:2])
    assert "No previous report.json" in text


def test_nightly_workflow_fetches_the_previous_report_best_effort():
    import yaml
    doc = yaml.safe_load((ROOT / ".github/workflows/nightly-gpu.yml").read_text())
    job = doc["jobs"]["gpu"]  # (the other jobs are the sharded CPU sweep)
    steps = job["steps"]
    tox = next(i for i, s in enumerate(steps) if "tox -e gpu" in s.get("run", ""))
    fetch = [s for s in steps[:tox] if "gh run download" in s.get("run", "")]
    assert fetch and fetch[0].get("continue-on-error") is True
    assert "GPU_PREVIOUS_REPORT=" in fetch[0]["run"] and "GITHUB_ENV" in fetch[0]["run"]
    assert doc["permissions"].get("actions") == "read"
    assert "GPU_PREVIOUS_REPORT" in (ROOT / "tox.ini").read_text()


def test_classify_intermittent_entry_is_never_fixed():
    """An intermittent defect that did not show this run is 'not run', not 'fixed'; one that
    showed is known as usual."""
    e = entry(intermittent=True)
    v = K.classify([result(c=True)], [e], V, "cpu")
    assert v.ok and not v.fixed and [j.status for j in v.entries] == ["not run"]
    v = K.classify([result(status="fail", c=False)], [e], V, "cpu")
    assert v.ok and [j.status for j in v.entries] == ["known"]


def test_classify_a_seed_scoped_entry_is_judged_by_its_seeds_only():
    """A defect only some seeds' inputs show (seeds = [4]): seed 0's passing row neither matches nor
    judges it (not "fixed"); seed 4's failing row is known; another seed's failure is new."""
    e = entry(seeds=(4,))
    passing0 = result(c=True)
    v = K.classify([passing0], [e], V, "cpu")
    assert v.ok and [j.status for j in v.entries] == ["not run"]
    failing4 = result(status="fail", c=False)
    failing4.seed = 4
    v = K.classify([passing0, failing4], [e], V, "cpu")
    assert v.ok and [j.status for j in v.entries] == ["known"]
    failing1 = result(status="fail", c=False)
    failing1.seed = 1
    v = K.classify([failing1], [e], V, "cpu")
    assert not v.ok and [f.seed for f in v.new] == [1]


def test_a_seed_scope_must_be_a_list_of_seeds(tmp_path):
    for bad in ("4", "[-1]", "[1.5]", "[true]"):
        path = tmp_path / "k.toml"
        path.write_text(KNOWN_TEMPLATE.replace("SEEDS", bad))
        with pytest.raises(K.KnownFileError, match="seeds must be a list"):
            K.load(path)
    path.write_text(KNOWN_TEMPLATE.replace("SEEDS", "[0, 4]"))
    assert K.load(path)[0].seeds == (0, 4)


KNOWN_TEMPLATE = """
[[known]]
id = "x"
target = "t.*"
case = "c"
check = "lockstep"
summary = "s"
library = "torch"
versions = ">=2"
first_seen = 2026-01-01
repro = "known/x.py"
seeds = SEEDS
"""


def test_console_counts_the_entries_a_run_did_not_exercise(tmp_path, capsys):
    """The console's tail stays short: entries this run did not exercise, or that are for other versions,
    are a count with a pointer to report.md (which lists each), not a list of ids."""
    entries = [fabricated(id=f"unexercised-{i}", target="torch.sgd.forloop") for i in range(30)]
    entries += [fabricated(id=f"other-torch-{i}", versions="<2") for i in range(5)]
    path = write_known(tmp_path, *entries)
    code, doc = cli(tmp_path, "--optimizer", "adamw", "--target", "torch.adamw.forloop", "--scenario", "none",
                    "--case", "adamw/fp32/wd0.1/single/normal", "--known", str(path))
    out = capsys.readouterr().out
    assert code == 0, out
    assert "Known entries: 30 not exercised by this run, 5 not applicable here" in out
    assert "unexercised-3" not in out and "other-torch-1" not in out
    md = (tmp_path / "r" / "report.md").read_text()
    assert "unexercised-3" in md and "other-torch-1" in md
