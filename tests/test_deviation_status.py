"""A library's quirk never buys a pass: a row judged under a deviation (oracle.forms) has status
"deviation", fails the run and names the deviation with its size; declared on purpose
(ORACLE_DEVIATIONS) it passes, the report saying so."""
import json

import pytest

from oracle.compare.cli import main


def run(tmp_path, impl, optimizer, *extra):
    code = main(["--impl", impl, "--optimizer", optimizer, "--dtype", "fp32", "--scenario", "none", "--steps", "4",
                 "--known", "none", "--quiet", "--report-dir", str(tmp_path), *extra])
    return code, json.loads((tmp_path / "report.json").read_text())


def ran(doc):
    return [r for r in doc["results"] if r["status"] != "skip"]


def test_an_adam_that_decays_like_adamw_fails_as_a_deviation(tmp_path):
    code, doc = run(tmp_path, "tests.plumbing_optimizers:DecoupledAdam", "adam")
    assert code == 1
    rows = ran(doc)
    assert rows and all(r["status"] == "deviation" for r in rows), [(r["case"], r["status"]) for r in rows]
    reason = rows[0]["reason"]
    assert "decay='decoupled'" in reason and "bitsandbytes" in reason and "step size x1.08 at step 1" in reason
    assert doc["inferred"][0]["explained"] and "under the name Adam" in doc["inferred"][0]["deviation"]
    assert "deviation" in (tmp_path / "report.md").read_text()


def test_a_declared_deviation_passes_saying_so(tmp_path):
    code, doc = run(tmp_path, "tests.plumbing_optimizers:DeclaredDecoupledAdam", "adam")
    assert code == 0
    rows = ran(doc)
    assert rows and all(r["status"] == "pass" for r in rows)
    note = rows[0]["checks"]["deviation"]["note"]
    assert note.startswith("declared deviation (decay: decoupled decay under the name Adam")


def test_pytorch_optimizer_lamb_is_a_deviation_of_ten_times_the_step(tmp_path):
    pytest.importorskip("pytorch_optimizer")
    code, doc = run(tmp_path, "pytorch_optimizer:Lamb", "lamb", "--case", "lamb/fp32/wd0.01/*")
    assert code == 1
    rows = ran(doc)
    assert rows and all(r["status"] == "deviation" for r in rows)
    assert "bias_correction='step_size_bc1'" in rows[0]["reason"] and "x10" in rows[0]["reason"]
