"""The CLI end to end: correct implementations pass, broken ones are reported precisely."""
import json

import pytest

from oracle.compare.measuring.checks import FAILING
from oracle.compare.cli import main


def run(tmp_path, *args):
    code = main([*args, "--report-dir", str(tmp_path), "--quiet", *([] if "--scenario" in args else ["--scenario", "none"])])
    doc = json.loads((tmp_path / "report.json").read_text()) if (tmp_path / "report.json").exists() else None
    return code, doc


def failing(doc):
    """Rows that fail the run: an undeclared broken optimizer's are "unexplained" (no form explains it)."""
    return [r for r in doc["results"] if r["status"] in FAILING]


def test_correct_user_optimizer_passes(tmp_path):
    code, doc = run(tmp_path, "--impl", "tests.broken.adamw:CorrectAdamW", "--dtype", "fp32", "--optimizer", "adamw")
    assert code == 0, failing(doc)[:1]
    statuses = [r["status"] for r in doc["results"]]
    # amsgrad/maximize cases are skipped: the class does not accept those options
    assert statuses.count("pass") >= 6 and set(statuses) == {"pass", "skip"}


@pytest.mark.parametrize("name,case,check,tensor", [
    # bias correction one step ahead: wrong from step 1, and no form of AdamW explains it
    ("OffByOneAdamW", "adamw/fp32/wd0.1/single/normal", "lockstep", "param"),
])
def test_broken_optimizer_is_reported(tmp_path, name, case, check, tensor):
    code, doc = run(tmp_path, "--impl", f"tests.broken.adamw:{name}", "--case", case, "--optimizer", "adamw")
    assert code == 1
    [row] = failing(doc)
    assert row["status"] == "unexplained"
    finding = next(f for f in row["checks"][check]["findings"] if tensor in f["tensor"])
    assert finding["step"] == 1 and finding["index"] is not None
    assert finding["error_ulps"] > finding["bound_ulps"]
    assert f"--case {case}" in row["repro"] and name in row["repro"]
    assert name in (tmp_path / "report.md").read_text()


@pytest.mark.parametrize("name,case,option", [
    # eps inside the sqrt: what optax's eps_root does, under the name eps
    ("EpsInsideAdamW", "adamw/fp32/wd0/two_groups/tiny_grads", "eps_mode='inside'"),
    # L2 decay under the name AdamW: Adam's decay
    ("L2AdamW", "adamw/fp32/wd0.1/empty_group/large_decay", "decay='l2'"),
])
def test_a_known_deviation_is_reported_as_one(tmp_path, name, case, option):
    """A broken AdamW whose mistake is a form some library ships: a deviation row naming it and its size."""
    code, doc = run(tmp_path, "--impl", f"tests.broken.adamw:{name}", "--case", case, "--optimizer", "adamw")
    assert code == 1
    [row] = failing(doc)
    assert row["status"] == "deviation" and option in row["reason"] and "step size x" in row["reason"]
    assert f"--case {case}" in row["repro"] and name in row["repro"]


def test_usage_errors_exit_2(tmp_path, capsys):
    assert main(["--optimizer", "no_such_optimizer", "--report-dir", str(tmp_path)]) == 2
    assert main(["--impl", "no_such_module:X", "--report-dir", str(tmp_path)]) == 2
    assert main(["--case", "no-such-case", "--report-dir", str(tmp_path)]) == 2
    assert "error:" in capsys.readouterr().err


def test_default_run_passes_on_torch_paths(tmp_path):
    """Every torch path of the default sweep, every matrix case: no false positive. (The compiled
    paths are not in the default sweep; tests/test_compiled.py runs them, whose torch.compile took
    160 of this test's 190 worker-seconds.)"""
    code, doc = run(tmp_path, "--optimizer", "adamw", "--optimizer", "adam", "--optimizer", "adagrad",
                    "--target", "torch.*.forloop", "--target", "torch.*.foreach*", "--target", "torch.*.fused*")
    assert code == 0, [(r["target"], r["case"]) for r in failing(doc)][:5]
    assert doc["complete"] and doc["schema"] == "optimizer-oracle-report/2"
    paths = {r["target"].rsplit(".", 1)[1] for r in doc["results"]}
    assert paths == {"forloop", "foreach", "fused", "foreach_capturable", "fused_capturable"}, paths
    assert {r["optimizer"] for r in doc["results"]} == {"adam", "adamw", "adagrad"}


def test_a_run_that_can_check_nothing_is_refused(tmp_path, capsys):
    import torch
    if torch.cuda.is_available():
        pytest.skip("needs a machine without CUDA")
    assert main(["--device", "cuda", "--target", "torch.*", "--report-dir", str(tmp_path)]) == 2
    assert "CUDA is not available" in capsys.readouterr().err
