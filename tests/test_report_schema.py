"""report.json is data, described by a JSON Schema in the repository (oracle/compare/reporting/report.schema.json):
every committed report and every fresh one validates against it."""
import json
from pathlib import Path

import pytest

from oracle.compare.reporting import publish, schema

pytest.importorskip("jsonschema")
ROOT = Path(__file__).resolve().parents[1]
COMMITTED = sorted(ROOT.glob("reports/**/report.json"))


def test_the_schema_is_a_valid_json_schema():
    import jsonschema
    jsonschema.Draft202012Validator.check_schema(schema.schema())
    from oracle.compare.reporting.report import SCHEMA
    assert schema.schema()["properties"]["schema"]["const"] == SCHEMA


def test_there_are_committed_reports():
    assert len(COMMITTED) >= 4, COMMITTED


@pytest.mark.parametrize("path", COMMITTED, ids=[str(p.parent.relative_to(ROOT)) for p in COMMITTED])
def test_committed_report_validates_and_is_one_run(path):
    doc = json.loads(path.read_text())
    assert schema.validate(doc) == []
    assert publish.verify(str(path.parent)) == []  # report.md/report.html beside it are its views
    for r in doc["results"]:
        assert all(isinstance(g, dict) for g in r["hparams"])


def test_a_fresh_report_validates(failing_report):
    folder, doc = failing_report
    assert schema.validate(doc) == []
    statuses = {r["status"] for r in doc["results"]}
    assert {"pass", "fail", "error"} <= statuses
    failing = [r for r in doc["results"] if r["status"] == "fail"]
    assert all(r["reason"] for r in failing)
    # failing rows carry the per-step data report.html plots; passing rows do not (report.json size)
    assert all("series" in r["checks"]["trajectory"] for r in failing)
    assert not any("series" in c for r in doc["results"] if r["status"] == "pass" for c in r["checks"].values())
    h = failing[0]["checks"]["lockstep"]["histogram"]
    assert h["step"] in failing[0]["checks"]["lockstep"]["series"]["step"] and sum(b[2] for b in h["bins"]) > 0


def test_validation_fails_on_what_the_old_format_did():
    doc = json.loads(COMMITTED[0].read_text())
    doc["results"][0]["hparams"] = ["{'lr': 0.001}"]          # a Python repr, not an object
    doc["results"][0]["checks"] = {"lockstep": {"passed": "no"}}
    doc["summary"][0]["worst_ratio"] = "1.5"
    errors = schema.validate(doc)
    assert any(e.startswith("results/0/hparams/0") for e in errors)
    assert any(e.startswith("results/0/checks/lockstep") for e in errors)
    assert any(e.startswith("summary/0/worst_ratio") for e in errors)


def test_a_version_1_report_upgrades():
    old = {"schema": "optimizer-oracle-report/1", "created": "2026-01-01T00:00:00Z", "complete": True,
           "versions": {"python": "3", "torch": "2", "numpy": "2"}, "argv": ["x"], "summary": [],
           "results": [{"target": "t", "case": "adamw/fp32/wd0.1/single/normal", "optimizer": "adamw",
                        "dtype": "float32", "hparams": ["{'lr': 0.001, 'betas': (0.9, 0.999), 'eps': inf}"],
                        "seed": 0, "steps": 20, "status": "fail", "reason": "", "seconds": 1.0, "repro": "r",
                        "checks": {"lockstep": {"passed": False, "compared": 4, "unbounded": 0, "worst_ratio": 3.0,
                                                "worst_error_ulps": 3.0, "worst_bound_ulps": 1.0, "power": "inf",
                                                "note": "", "findings": [
                                                    {"check": "lockstep", "step": 1, "tensor": "group 0 param 0 param",
                                                     "index": [1], "expected": 1.0, "got": 1.5, "error_ulps": 3.0,
                                                     "bound_ulps": 1.0, "detail": ""}]}}}]}
    new = schema.upgrade(old)
    assert new["schema"] == "optimizer-oracle-report/2" and new["upgraded_from"] == "optimizer-oracle-report/1"
    assert new["results"][0]["hparams"] == [{"lr": 0.001, "betas": [0.9, 0.999], "eps": "inf"}]
    assert new["results"][0]["reason"].startswith("lockstep step 1 group 0 param 0 param[1]: expected 1, got 1.5")
    assert schema.validate(new) == []
    assert old["schema"] == "optimizer-oracle-report/1"  # the input is left alone
