"""oracle.testing and the pytest plugin, used the way an outside library uses them: the suite in
tests/outside_library/ (its own package `mylib`, its own pyproject, no conftest, no plugin import) is
copied to a temporary folder and run by pytest in a subprocess; the plugin comes from the installed
distribution's `pytest11` entry point."""
import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from importlib import metadata
from pathlib import Path

import pytest
import torch

from oracle.testing import assert_optimizer_matches, case_names, oracle_cases

HERE = Path(__file__).resolve().parent
CASE = "adamw/fp32/wd0.1/single/normal"


def test_a_correct_optimizer_passes():
    results = assert_optimizer_matches(torch.optim.AdamW, optimizer="adamw", dtypes=["float32"], cases=[CASE])
    assert [(r.case, r.status) for r in results] == [(CASE, "pass")]


def screen_rows(text: str, columns: int = 120) -> int:
    """Rows `text` takes in a terminal `columns` wide (long lines wrap)."""
    return sum(max(1, -(-len(line) // columns)) for line in text.splitlines())


def test_a_broken_optimizer_raises_one_paragraph():
    from tests.broken.adamw import OffByOneAdamW
    with pytest.raises(AssertionError) as err:
        assert_optimizer_matches(OffByOneAdamW, optimizer="adamw", dtypes="fp32", cases="adamw/fp32/wd0.1/*")
    msg = str(err.value)
    lines = msg.splitlines()
    # the most severe failing case first, then its repro command, then what inference concluded
    # wd0.1 has 5 cases in the adam record's plan (blocks/zero_grads joined with the quantized-state
    # layout); only scalar/lr0, where nothing moves, passes an off-by-one counter
    assert lines[0] == "4 of 5 oracle case(s) failed; the most severe:"
    assert lines[1].startswith(f"UNEXPLAINED impl:tests.broken.adamw:OffByOneAdamW {CASE} seed=0: unexplained: "
                               "no form of adamw explains it (nearest: torch.adamw ")
    assert "lockstep step 1 group 0 param 0 param[" in lines[1] and "ULP > bound" in lines[1]
    assert lines[2].startswith("  reproduce: python -m oracle.compare --impl tests.broken.adamw:OffByOneAdamW "
                               f"--optimizer adamw --case {CASE}")
    assert lines[3].startswith("impl:tests.broken.adamw:OffByOneAdamW: NO known convention explains it; "
                               "judged against the nearest, torch.adamw")
    assert lines[-1].startswith("also failing: adamw/fp32/wd0.1/") and lines[-1].count("seed=0 (lockstep") == 3
    assert screen_rows(msg) <= 40, msg  # one screen


def test_a_failure_names_an_inferred_deviation():
    from tests.broken.adamw import L2AdamW
    with pytest.raises(AssertionError) as err:
        assert_optimizer_matches(L2AdamW, optimizer="adamw", dtypes="fp32", cases=CASE)
    msg = str(err.value)
    assert "that convention is a DEVIATION from adamw: decay='l2'" in msg, msg
    assert "ORACLE_CONVENTION = oracle.adam.AdamConvention(decay='l2'" in msg  # the CLI's explanation lines
    assert screen_rows(msg) <= 40, msg


def test_nothing_checked_is_not_a_pass():
    with pytest.raises(AssertionError, match="nothing was checked: every selected case was skipped"):
        assert_optimizer_matches(NoAmsgrad, optimizer="adamw", dtypes=["float32"], cases="adamw/fp32/amsgrad/*")


class NoAmsgrad(torch.optim.AdamW):
    """Takes no amsgrad argument: the amsgrad cases skip."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2):
        super().__init__(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)


def test_a_factory_defined_in_a_function_gets_a_python_repro():
    def factory(params, **kw):
        from tests.broken.adamw import OffByOneAdamW
        return OffByOneAdamW(params, **kw)
    with pytest.raises(AssertionError) as err:
        assert_optimizer_matches(factory, optimizer="adamw", dtypes=["float32"], cases=[CASE])
    assert f"reproduce: oracle.testing.assert_optimizer_matches(test_a_factory_defined_in_a_function_gets_a_python_repro" \
           f".<locals>.factory, optimizer='adamw', cases=['{CASE}'], seeds=[0], steps=20)" in str(err.value)


def test_selection_errors_name_the_choices():
    with pytest.raises(ValueError, match="unknown optimizer 'sdg'"):
        case_names("sdg")
    with pytest.raises(ValueError, match="no case 'adamw/fp32/nope'"):
        case_names("adamw", ["float32"], ["adamw/fp32/nope"])
    with pytest.raises(ValueError, match="which optimizer does"):
        assert_optimizer_matches(torch.optim.AdamW, dtypes=["float32"], cases=[CASE])
    ids = [c.id for c in oracle_cases("adamw", ["bf16"], "*/wd0.1/*", scenarios=["checkpoint"])]
    assert ids[:1] == ["adamw/bf16/wd0.1/single/normal"] and ids[-1] == "scenario:checkpoint"


def test_importing_the_api_and_the_plugin_imports_no_torch():
    code = ("import sys, oracle.testing, oracle.pytest_plugin; "
            "bad = [m for m in ('torch', 'oracle.compare.checking.case_run') if m in sys.modules]; assert not bad, bad")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr


def test_an_outside_library_uses_the_plugin(tmp_path):
    eps = [e for e in metadata.entry_points(group="pytest11") if e.value == "oracle.pytest_plugin"]
    if not eps:
        pytest.skip("optimizer-oracle is not installed (pip install -e .): no pytest11 entry point")
    lib = tmp_path / "lib"
    shutil.copytree(HERE / "outside_library", lib, ignore=shutil.ignore_patterns("__pycache__"))
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTEST_ADDOPTS", "PYTEST_PLUGINS")}
    xml = tmp_path / "junit.xml"
    out = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", f"--junitxml={xml}"],
                         cwd=lib, env=env, capture_output=True, text=True, timeout=900)
    assert out.returncode == 1, out.stdout[-4000:] + out.stderr[-2000:]  # test_sloppy.py fails by design
    outcome = {}
    for tc in ET.parse(xml).getroot().iter("testcase"):
        state = "failed" if tc.find("failure") is not None else "skipped" if tc.find("skipped") is not None else \
            "error" if tc.find("error") is not None else "passed"
        outcome[f"{tc.get('classname').split('.')[-1]}::{tc.get('name')}"] = (state, tc)
    cases = [f"test_my_adamw_case_by_case[{n}]" for n in case_names("adamw", ["float32", "bfloat16"], "*/wd0.1/*")]
    want_pass = ["test_my_adamw_matches_the_oracle", "test_the_oracle_catches_a_bias_correction_a_step_ahead", *cases]
    for name in want_pass:
        assert outcome[f"test_adamw_matches_the_oracle::{name}"][0] == "passed", (name, out.stdout[-3000:])
    state, tc = outcome["test_sloppy::test_sloppy_adamw_matches_the_oracle"]
    assert state == "failed"
    message = tc.find("failure").text  # the whole traceback (the attribute is cut short)
    assert f"UNEXPLAINED impl:mylib.optim:SloppyAdamW {CASE} seed=0: unexplained: " in message
    assert "lockstep step 1 group 0 param 0 param[" in message
    assert "ULP > bound" in message
    assert f"reproduce: python -m oracle.compare --impl mylib.optim:SloppyAdamW --optimizer adamw --case {CASE}" \
        in out.stdout
    # the failure shows the test's own line and the message, none of the engine's source (__tracebackhide__)
    assert "oracle/testing.py" not in out.stdout and "raise AssertionError" not in out.stdout, out.stdout[-3000:]
    assert "NO known convention explains it" in message or "inferred convention" in message
    assert len(outcome) == len(want_pass) + 1
