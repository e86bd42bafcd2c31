"""`--junit-xml FILE`: the run as JUnit XML, so a CI system shows each case as a test.

One <testsuite> per target, one <testcase> per result row (classname "oracle.compare.<target>",
name "<case> [seed N]"): a new failure is a <failure> (message: the failure line; text: every
finding and the repro command), a crash an <error> (the traceback), a skip <skipped> with the
reason, and a known defect <skipped> with type "xfail" and the entry (strict-xfail: it does not
fail the run). A known entry that no longer reproduces is a failing testcase of the "known"
suite. Built from the report.json document, like report.md and report.html.
"""
from __future__ import annotations

import xml.etree.ElementTree as ET

from ..checking.explain import by_severity, failure_line, failing_checks, finding_text
from ..measuring.checks import FAILING
from ..checking.summary import WHOLE_TARGET


def _new_keys(doc: dict):
    known = doc.get("known")
    if not known:
        return None
    return {(f["target"], f["case"], f["seed"]) for f in known.get("new", [])}


def _known_ids(doc: dict) -> dict:
    out = {}
    for e in (doc.get("known") or {}).get("entries", []):
        for f in e.get("matched", []):
            out.setdefault((f["target"], f["case"], f["seed"]), []).append(e["id"])
    return out


def _details(row: dict) -> str:
    checks = by_severity(row.get("checks", {}).items())  # the failure message's finding first
    lines = [finding_text(f) for _, c in checks for f in c.get("findings", [])]
    notes = [f"{n}: {c['note']}" for n, c in checks if c.get("note") and not c.get("passed", True)]
    return "\n".join(lines + notes + [f"reproduce: {row.get('repro', '')}"])


SKIPPED_SUITE = "targets skipped as a whole"


def document(doc: dict) -> ET.ElementTree:
    new, known_ids = _new_keys(doc), _known_ids(doc)
    suites = {}
    totals = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    root = ET.Element("testsuites", name="oracle.compare")
    for r in doc["results"]:
        # a target skipped as a whole is no result row: its own suite keeps the targets' suites to the rows
        name = SKIPPED_SUITE if r["case"] == WHOLE_TARGET else r["target"]
        suite = suites.get(name)
        if suite is None:
            suite = suites[name] = ET.SubElement(root, "testsuite", name=name)
            suite.attrib.update({k: 0 for k in ("tests", "failures", "errors", "skipped")})
            suite.attrib["time"] = 0.0
        case = ET.SubElement(suite, "testcase", classname=f"oracle.compare.{r['target']}",
                             name=f"{r['case']} [seed {r['seed']}]", time=f"{r.get('seconds', 0):.3f}")
        suite.attrib["tests"] += 1
        suite.attrib["time"] += float(r.get("seconds", 0) or 0)
        key = (r["target"], r["case"], r["seed"])
        status = r["status"]
        if status in FAILING and new is not None and key not in new:
            ids = ", ".join(known_ids.get(key, [])) or "known"
            el = ET.SubElement(case, "skipped", type="xfail", message=f"known defect ({ids}): {failure_line(r)}")
            el.text = _details(r)
            suite.attrib["skipped"] += 1
        elif status in ("fail", "deviation", "unexplained"):
            checks = [n for n, _ in failing_checks(r)]
            el = ET.SubElement(case, "failure", type=",".join(checks) or "fail", message=failure_line(r))
            el.text = _details(r)
            suite.attrib["failures"] += 1
        elif status == "error":
            note = (r.get("checks", {}).get("error") or {}).get("note") or r.get("reason", "")
            el = ET.SubElement(case, "error", type="error", message=failure_line(r))
            el.text = f"{note}\nreproduce: {r.get('repro', '')}"
            suite.attrib["errors"] += 1
        elif status == "skip":
            ET.SubElement(case, "skipped", message=r.get("reason", ""))
            suite.attrib["skipped"] += 1
        if status != "skip":
            ET.SubElement(case, "system-out").text = f"reproduce: {r.get('repro', '')}"
    fixed = [e for e in (doc.get("known") or {}).get("entries", []) if e["status"] == "fixed"]
    if fixed:
        suite = ET.SubElement(root, "testsuite", name="known")
        suite.attrib.update({"tests": len(fixed), "failures": len(fixed), "errors": 0, "skipped": 0, "time": 0.0})
        for e in fixed:
            case = ET.SubElement(suite, "testcase", classname="oracle.compare.checking.known", name=e["id"], time="0")
            ET.SubElement(case, "failure", type="fixed", message=f"known entry {e['id']} no longer reproduces: "
                                                                 f"{e['reason']}").text = e["summary"]
    for suite in root:
        for k in totals:
            totals[k] += suite.attrib[k]
        suite.attrib = {k: (f"{v:.3f}" if k == "time" else str(v)) for k, v in suite.attrib.items()}
    root.attrib.update({k: str(v) for k, v in totals.items()})
    return ET.ElementTree(root)


def text(doc: dict) -> str:
    tree = document(doc)
    ET.indent(tree, space=" ")
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(tree.getroot(), encoding="unicode") + "\n"


def write(path: str, doc: dict) -> None:
    from .report import atomic_write
    atomic_write(path, text(doc))


__all__ = ["document", "text", "write"]
