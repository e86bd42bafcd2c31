"""Every row leads with its most severe failing check (oracle.compare.measuring.checks.SEVERITY): memory
written outside a tensor, then non-finite output, modified inputs, bookkeeping, deviations, numerical
bounds last; the same order in the terminal line, report.json's reason, report.md, report.html and
JUnit, and failure listings put the most severe rows first."""
import json
import re
import xml.etree.ElementTree as ET

import pytest

from oracle.compare.reporting import console, junit, report
from oracle.compare.checking import explain
from oracle.compare.measuring.checks import NUMERIC_RANK, SEVERITY, CheckResult, Finding, severity
from oracle.compare.cli import main
from oracle.compare.checking.known import Judge
from oracle.compare.checking.case_run import CaseResult
from oracle.compare.checking.summary import summarize


def failed(name: str, tensor: str = "group 0 param 0 param", **kw) -> CheckResult:
    c = CheckResult(name, compared=4)
    c.fail(Finding(name, 1, tensor, **kw))
    return c


def lockstep() -> CheckResult:
    return failed("lockstep", index=(3,), expected=0.5, got=0.75, error_ulps=1.34e6, bound_ulps=3.5,
                  detail="1 of 4 elements out of bound")


def bounds() -> CheckResult:
    return failed("bounds", index=(4,), expected="guard unchanged", got="written",
                  detail="wrote outside the tensor's view")


def row(case: str, *checks: CheckResult, target: str = "t.adamw", status: str = "fail") -> CaseResult:
    r = CaseResult(target, case, "adamw", "float32", [{"lr": 0.01}], 0, 3, status=status)
    r.checks = {c.check: c for c in checks}
    return r


def reason_of(line: str) -> str:
    """What follows `seed=N: ` in a failure line."""
    return line.split(" seed=0: ", 1)[1]


# --- the ranking ------------------------------------------------------------------------------------

def test_the_ranking_is_the_documented_order():
    names = ["lockstep", "deviation", "roundtrip", "schema", "counters", "inputs_unchanged", "finite", "bounds"]
    ranked = sorted(names, key=severity)
    assert ranked[:3] == ["bounds", "finite", "inputs_unchanged"]
    assert set(ranked[3:6]) == {"counters", "schema", "roundtrip"}  # one tier: report order within it
    assert ranked[6:] == ["deviation", "lockstep"]
    assert severity("checkpoint") == severity("counters")
    assert len({n for tier in SEVERITY for n in tier}) == sum(len(t) for t in SEVERITY)  # each name once


def test_suffixed_and_unknown_names():
    assert severity("counters@16777216") == severity("counters") < severity("lockstep@16777216")
    assert severity("lockstep@16777216") == severity("trajectory") == severity("noncontiguous") == NUMERIC_RANK


# --- the one-line reason ----------------------------------------------------------------------------

def test_bounds_leads_even_when_lockstep_comes_first_in_the_row():
    r = row("scenario:irregular/mixed", lockstep(), bounds())  # report order: lockstep, bounds
    line = explain.failure_line(r)
    assert reason_of(line).startswith("bounds step 1 group 0 param 0 param[4]: expected guard unchanged, got written")
    assert line.endswith("; also failing: lockstep")
    assert explain.reason(r).startswith("bounds step 1")  # report.json's reason


@pytest.mark.parametrize("checks,lead,rest", [
    (("schema", "finite"), "finite", "schema"),
    (("counters", "inputs_unchanged"), "inputs_unchanged", "counters"),
    (("lockstep@16777216", "counters@16777216"), "counters@16777216", "lockstep@16777216"),
    (("trajectory", "roundtrip", "lockstep"), "roundtrip", "trajectory, lockstep"),
    (("noncontiguous", "bounds"), "bounds", "noncontiguous"),
])
def test_the_most_severe_check_leads(checks, lead, rest):
    r = row("c", *(failed(n, expected=1, got=2) for n in checks))
    text = explain.describe(r)
    assert text.startswith(f"{lead} step 1 ")
    assert text.endswith(f"; also failing: {rest}")


def test_a_dict_row_reads_the_same():
    r = row("c", lockstep(), bounds())
    doc = report.document([r], ["x"], True, "cpu")
    assert explain.describe(doc["results"][0]) == explain.describe(r)


def test_a_deviation_row_ranks_between_bookkeeping_and_numerics():
    dev = row("dev", status="deviation")
    assert explain.row_severity(row("c", failed("roundtrip"))) < explain.row_severity(dev) \
        < explain.row_severity(row("c", lockstep()))


# --- where failures are listed ----------------------------------------------------------------------

def rows_of_every_rank():
    """Report order: the least severe first, so a listing in report order would be wrong."""
    return [row("numeric", lockstep()), row("schema", failed("schema"), lockstep()),
            row("finite", lockstep(), failed("finite", expected="finite", got="nan")),
            row("bounds", lockstep(), bounds(), target="u.adamw")]


def test_terminal_lines_most_severe_first():
    judge = Judge.from_option("none", "cpu")
    lines = console.failure_lines(rows_of_every_rank(), judge, "cpu", None, "report.html")
    heads = [s.split("\n")[0] for s in lines]  # each: the failure line, then its repro command
    assert [s.split()[2] for s in heads] == ["bounds", "finite", "schema", "numeric"]
    assert reason_of(heads[0]).startswith("bounds step 1")
    assert reason_of(heads[1]).startswith("finite step 1")


def test_report_md_and_html_lead_with_the_most_severe(tmp_path):
    report.write(str(tmp_path), rows_of_every_rank(), ["x"], True, "cpu")
    md = (tmp_path / "report.md").read_text()
    listed = re.findall(r"^- FAIL \S+ (\S+) seed=0: (\S+)", md, re.M)
    assert listed == [("bounds", "bounds"), ("finite", "finite"), ("schema", "schema"), ("numeric", "lockstep")]
    assert "- FAIL u.adamw bounds seed=0: bounds step 1 group 0 param 0 param[4]" in md

    html = (tmp_path / "report.html").read_text()
    cases = re.findall(r"<b>(\w+)</b> seed 0 <span class='why'>(\w+) step 1", html)
    assert cases == [("bounds", "bounds"), ("finite", "finite"), ("schema", "schema"), ("numeric", "lockstep")]
    # the target holding the most severe row is listed first
    assert html.index("<summary><b>u.adamw</b>") < html.index("<summary><b>t.adamw</b>")
    # the bounds row's findings table: bounds before lockstep
    detail = html[html.index("<b>bounds</b> seed 0"):html.index("<b>finite</b> seed 0")]
    findings = detail[detail.index("<table class='findings'>"):]
    assert findings.index("<td>bounds</td>") < findings.index("<td>lockstep</td>")


def test_summary_lists_failed_checks_most_severe_first():
    [summary] = [s for s in summarize(rows_of_every_rank()) if s["target"] == "t.adamw"]
    assert summary["failed_checks"] == ["finite", "schema", "lockstep"]


def test_junit_message_and_type_lead_with_bounds():
    doc = report.document([row("c", lockstep(), bounds())], ["x"], True, "cpu")
    failure = ET.fromstring(junit.text(doc).split("\n", 1)[1]).find(".//failure")
    assert failure.get("type") == "bounds,lockstep"
    assert reason_of(failure.get("message")).startswith("bounds step 1")
    assert failure.text.startswith("bounds step 1")


# --- end to end -------------------------------------------------------------------------------------

BROKEN = "tests.broken.adamw:OutOfViewOffByOneAdamW"
CASE = "adamw/fp32/wd0.1/single/normal"


def test_cli_leads_with_bounds_for_an_optimizer_writing_outside_its_view(tmp_path, capsys):
    code = main(["--impl", BROKEN, "--optimizer", "adamw", "--case", CASE, "--scenario", "none", "--quiet",
                 "--report-dir", str(tmp_path), "--no-isolate", "--known", "none"])
    out = capsys.readouterr().out
    assert code == 1
    [line] = [s for s in out.splitlines() if s.startswith(f"  FAIL impl:{BROKEN} {CASE} seed=0: ")]
    assert reason_of(line).startswith("bounds step 1 group 0 param 0 param[")
    assert "wrote outside the tensor's view" in line and "also failing: lockstep" in line
    md = (tmp_path / "report.md").read_text()
    assert f"- FAIL impl:{BROKEN} {CASE} seed=0: bounds step 1 " in md
    [r] = [r for r in json.loads((tmp_path / "report.json").read_text())["results"] if r["status"] == "fail"]
    assert list(r["checks"]).index("lockstep") < list(r["checks"]).index("bounds")  # report order unchanged
    assert not r["checks"]["lockstep"]["passed"] and r["reason"].startswith("bounds step 1")
