"""What a person (or a CI system) reads after a run: failure lines that say what is wrong, progress
and summary in the same units, skipped targets in one line, --verbose/--quiet/--version, the console
script, JUnit XML, report.json as data."""
import io
import json
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest

from oracle.compare.reporting import console
from oracle.compare.checking import explain
from oracle.compare.cli import main
from oracle.compare.checking.summary import summarize

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BROKEN = "tests.broken.adamw:OffByOneAdamW"
CASE = "adamw/fp32/wd0.1/single/normal"
FAILURE = re.compile(r"lockstep step 1 group 0 param 0 param\[\d+, \d+\]: expected -?[\d.e-]+, got -?[\d.e-]+, "
                     r"error [\d.e+]+ ULP > bound [\d.]+ ULP \(\d+ of \d+ elements out of bound\)")


def run(tmp_path, *args):
    return main([*args, "--report-dir", str(tmp_path / "r"), "--no-isolate"])


def test_a_new_failure_line_states_check_tensor_index_values_error_and_bound(tmp_path, capsys):
    # judged by its declaration alone (--no-infer): a plain numerical failure, not an unexplained target
    code = run(tmp_path, "--impl", BROKEN, "--optimizer", "adamw", "--case", CASE, "--scenario", "none", "--quiet",
               "--no-infer")
    out = capsys.readouterr().out
    assert code == 1
    [line] = [s for s in out.splitlines() if s.startswith(f"  NEW FAIL impl:{BROKEN} {CASE} seed=0: ")]
    assert FAILURE.search(line), line
    assert "also failing: trajectory" in line
    assert f"reproduce: python -m oracle.compare --impl {BROKEN} --optimizer adamw --case {CASE}" in out
    doc = json.loads((tmp_path / "r" / "report.json").read_text())
    [row] = [r for r in doc["results"] if r["status"] == "fail"]
    assert FAILURE.search(row["reason"])  # report.json says why a row failed, too
    assert row["hparams"] == [{"lr": 0.01, "weight_decay": 0.1}]  # an object, not a repr string


def test_known_failures_carry_their_note(tmp_path, capsys):
    """A failure a known entry covers is listed after the new ones, with the entry."""
    from oracle.compare.checking.known import Judge
    from oracle.compare.checking.case_run import CaseResult
    from oracle.compare.measuring.checks import CheckResult, Finding
    r = CaseResult("torch.adamw.fused", "scenario:irregular/mixed", "adamw", "float32", [], 0, 3, status="fail",
                   reason="noncontiguous: known torch defect (torch-fused-cpu-noncontiguous): summary")
    c = CheckResult("noncontiguous")
    c.fail(Finding("noncontiguous", 1, "[noncontiguous] group 0 param 0 param", (4, 2), 0.05, 0.06, 1e6, 3.5, "x"))
    r.checks = {"noncontiguous": c}
    judge = Judge.from_option(None, "cpu")
    judge.judge([r])
    lines = console.failure_lines([r], judge, "cpu", 10, "report.html")
    assert lines[0].startswith("  KNOWN FAIL torch.adamw.fused scenario:irregular/mixed seed=0: noncontiguous step 1")
    assert "[noncontiguous] group 0 param 0 param[4, 2]: expected 0.05, got 0.06, error 1e+06 ULP > bound 3.5 ULP" \
        in lines[0]
    assert "known torch defect (torch-fused-cpu-noncontiguous)" in lines[0]


def test_progress_and_summary_count_jobs_and_the_rest_is_named_in_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(console, "FAILURE_LINES", 2)
    code = run(tmp_path, "--impl", BROKEN, "--optimizer", "adamw", "--dtype", "fp32", "--case", "tiny_grads",
               "--scenario", "none")
    cap = capsys.readouterr()
    assert code == 1
    progress = re.findall(r"^\[(\d+)/(\d+)\]", cap.err, re.M)
    total = int(progress[0][1])
    assert [int(n) for n, _ in progress] == list(range(1, total + 1))
    assert re.search(rf"^{total} jobs -> {total} result rows: ", cap.out, re.M)


def test_more_failures_than_shown_say_how_many_more(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(console, "FAILURE_LINES", 1)
    code = run(tmp_path, "--impl", BROKEN, "--optimizer", "adamw", "--dtype", "fp32", "--case", "*/wd0.1/*",
               "--scenario", "none", "--quiet", "--no-infer")
    out = capsys.readouterr().out
    n = len(json.loads((tmp_path / "r" / "report.json").read_text())["results"])
    failing = len([r for r in json.loads((tmp_path / "r" / "report.json").read_text())["results"]
                   if r["status"] == "fail"])
    assert code == 1 and failing >= 2 and n >= failing
    assert f"  ... and {failing - 1} more (see {tmp_path / 'r' / 'report.html'})" in out
    assert len(re.findall(r"^  NEW FAIL ", out, re.M)) == 1


def test_skipped_targets_are_one_line_after_the_table(tmp_path, capsys):
    code = run(tmp_path, "--optimizer", "adamw", "--target", "torch.adamw.forloop", "--target", "torch.adamw.*capturable",
               "--case", CASE, "--scenario", "none", "--quiet")
    out = capsys.readouterr().out
    assert code == 0
    [line] = [s for s in out.splitlines() if s.startswith("Skipped ")]
    assert line == ("Skipped 2 target(s), unavailable here: torch.adamw.foreach_capturable, "
                    "torch.adamw.fused_capturable (does not run on cpu)")
    assert out.count("does not run on cpu") == 1  # not also as rows of a table
    assert "1 job -> 1 result row: 1 passed" in out and "2 target(s) skipped as a whole" in out


def test_verbose_and_quiet(tmp_path, capsys):
    args = ["--optimizer", "adamw", "--target", "torch.adamw.forloop", "--case", CASE, "--scenario", "none"]
    assert run(tmp_path, *args, "--verbose") == 0
    cap = capsys.readouterr()
    assert "[1/1] pass  torch.adamw.forloop" in cap.err and "      lockstep: pass, compared " in cap.err
    assert "worst err / bound (ULP)" in cap.out
    assert run(tmp_path, *args, "-q") == 0
    cap = capsys.readouterr()
    assert cap.err == "" and "worst err / bound" not in cap.out and "1 job -> 1 result row" in cap.out


def test_progress_bar_with_eta_on_a_terminal():
    class Tty(io.StringIO):
        def isatty(self):
            return True

    class Row:
        def __init__(self, status):
            self.status, self.target, self.case, self.seed, self.reason, self.checks = status, "t", "c", 0, "", {}
    stream = Tty()
    p = console.Progress(4, stream)
    assert p.tty
    p.start("t first")
    p.advance([Row("pass")], "t first", "t second")
    p.advance([Row("error")], "t second", "t third")
    p.close()
    text = stream.getvalue()
    assert "\r\x1b[2K[#####...............] 1/4 jobs" in text and "ETA " in text and "t second" in text
    assert "ERROR t c seed=0: the target raised or crashed" in text  # printed above the bar
    assert "(1 error)" in text
    assert not console.Progress(4, io.StringIO()).tty  # a pipe gets plain lines


def test_version_and_the_console_script():
    exe = os.path.join(os.path.dirname(sys.executable), "oracle-compare")
    if not os.path.exists(exe):
        pytest.skip("the package is not installed (pip install -e .): no console script")
    out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and re.match(r"optimizer-oracle \S+ \(report schema optimizer-oracle-report/2\)",
                                            out.stdout), out
    out = subprocess.run([exe, "--help"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.startswith("usage: oracle-compare")
    for flag in ("--verbose", "--quiet", "--junit-xml", "--wait", "--version"):
        assert flag in out.stdout


def test_junit_xml_has_one_testcase_per_case(tmp_path, capsys):
    xml = tmp_path / "junit.xml"
    code = run(tmp_path, "--impl", BROKEN, "--optimizer", "adamw", "--dtype", "fp32", "--case", "scalar",
               "--scenario", "none", "--quiet", "--junit-xml", str(xml))
    assert code == 0 or code == 1
    doc = json.loads((tmp_path / "r" / "report.json").read_text())
    root = ET.parse(xml).getroot()
    cases = root.findall("./testsuite/testcase")
    assert len(cases) == len(doc["results"]) and int(root.get("tests")) == len(cases)
    for tc, row in zip(cases, doc["results"]):
        assert tc.get("name") == f"{row['case']} [seed 0]" and tc.get("classname") == f"oracle.compare.impl:{BROKEN}"
        kind = {"pass": None, "fail": "failure", "skip": "skipped", "error": "error"}[row["status"]]
        assert (tc.find(kind) is not None) if kind else not list(tc.findall("failure"))
        if row["status"] == "fail":
            assert tc.find("failure").get("message") == explain.failure_line(row)
            assert "reproduce: python -m oracle.compare" in tc.find("failure").text
    assert int(root.get("failures")) == sum(r["status"] == "fail" for r in doc["results"])


def test_scenario_summary_rows_show_the_worst_bounded_check_not_zero():
    def check(ratio, err, bound, compared=10, passed=True):
        return {"passed": passed, "compared": compared, "worst_ratio": ratio, "worst_error_ulps": err,
                "worst_bound_ulps": bound, "power": "inf"}
    rows = [{"target": "t", "optimizer": "adamw", "case": "scenario:irregular/mixed", "dtype": "float32",
             "status": "fail", "reason": "", "checks": {"lockstep": check(0.0, 0.0, 0.0),
                                                         "noncontiguous": check(9e6, 3e7, 3.4, passed=False)}},
            {"target": "t", "optimizer": "adamw", "case": "scenario:construction/x", "dtype": "float32",
             "status": "pass", "reason": "", "checks": {"counters": check(0.0, 0.0, 0.0, compared=3)}}]
    [row] = summarize(rows)
    assert row["dtype"] == "scenarios" and row["worst_ratio"] == 9e6 and row["worst_bound_ulps"] == 3.4
    [exact_only] = summarize(rows[1:])
    assert exact_only["worst_ratio"] is None  # no bounded check: blank, not "0 / 0"


def test_checkpoint_scenario_names_its_dtypes_whole():
    from oracle.compare.scenarios import SCENARIOS
    from oracle.compare.registry import find
    r = SCENARIOS["checkpoint"].run(find("torch.adamw.forloop", "adamw"), "cpu", 0)
    assert r.case == "scenario:checkpoint/fp32+bf16", r.case


def test_failure_line_for_exact_checks_and_errors():
    f = {"check": "counters", "step": 3, "tensor": "group 0 step", "index": None, "expected": 3, "got": 4,
         "error_ulps": None, "bound_ulps": None, "detail": ""}
    assert explain.finding_text(f) == "counters step 3 group 0 step: expected 3, got 4, off by 1; exact check (bound 0)"
    row = {"target": "t", "case": "c", "seed": 0, "status": "error", "reason": "RuntimeError: boom",
           "checks": {"error": {"passed": False, "note": "Traceback...\nRuntimeError: boom", "findings": []}}}
    assert explain.failure_line(row) == "ERROR t c seed=0: RuntimeError: boom (traceback in the report)"


def test_one_set_of_counts_in_console_md_html_json_and_junit(tmp_path, capsys):
    """A run with passing rows, a new failure, a known one and a target skipped as a whole: the counts
    are the same numbers in every view, in the same units (rows; whole-target skips apart)."""
    from html import escape

    from oracle.compare.reporting.junit import SKIPPED_SUITE
    from oracle.compare.checking.summary import counts_text, run_counts
    xml = tmp_path / "run.xml"
    # irregular: the broken class fails (new), torch's CPU fused AdamW fails (known), forloop passes
    code = run(tmp_path, "--impl", BROKEN, "--no-infer", "--target", "torch.adamw.fused", "--target",
               "torch.adamw.forloop", "--target", "apex.fused_adam.adamw", "--optimizer", "adamw", "--scenario",
               "irregular", "--junit-xml", str(xml), "--quiet")
    out = capsys.readouterr().out
    assert code == 1
    doc = json.loads((tmp_path / "r" / "report.json").read_text())
    c = doc["counts"]
    assert c == run_counts(doc)
    assert c["targets_skipped"] == 1 and c["pass"] >= 1 and c["new"] >= 1 and c["known"] >= 1 and c["rows"] == len(doc["results"]) - 1
    assert c["failing"] == c["fail"] + c["error"] + c["deviation"] + c["unexplained"] == c["new"] + c["known"]
    line = counts_text(c)
    assert "; of the " in line and "1 target(s) skipped as a whole" in line
    assert line in out
    assert line in (tmp_path / "r" / "report.md").read_text()
    assert escape(line, quote=True) in (tmp_path / "r" / "report.html").read_text()
    root = ET.parse(xml).getroot()
    suites = {s.get("name"): s for s in root.iter("testsuite")}
    assert int(suites.pop(SKIPPED_SUITE).get("tests")) == c["targets_skipped"]
    total = lambda k: sum(int(s.get(k)) for s in suites.values())  # noqa: E731
    assert total("tests") == c["rows"]
    assert total("failures") + total("errors") == c["new"] + c["fixed_entries"]
    xfail = sum(1 for s in suites.values() for e in s.iter("skipped") if e.get("type") == "xfail")
    assert xfail == c["known"] and total("skipped") == c["skip"] + c["known"]
