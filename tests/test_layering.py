"""The layering contracts in pyproject.toml hold, and they can fail.

`lint-imports` (import-linter) checks them: the specification imports no torch
and nothing above it, only the comparison engine and the mutants import the
engine, nothing imports the mutants, no import cycles between siblings, the engine's
subpackages are layered.
"""
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LINT = shutil.which("lint-imports") or str(Path(sys.executable).parent / "lint-imports")

pytestmark = pytest.mark.skipif(not Path(LINT).exists(), reason="import-linter is not installed (test extra)")


def lint(cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([LINT, "--no-cache"], cwd=cwd, capture_output=True, text=True, timeout=300,
                          env={"PYTHONPATH": str(cwd), "PATH": "/usr/bin:/bin"})


def test_contracts_hold():
    done = lint(ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 broken" in done.stdout


@pytest.mark.parametrize("module,line,contract", [
    ("oracle/storage.py", "import torch  # noqa", "imports no torch"),
    ("oracle/adam.py", "from oracle.compare.measuring import checks  # noqa", "only the comparison engine"),
    ("oracle/compare/checking/cases.py", "from oracle.mutants import base  # noqa", "nothing imports the mutants"),
    ("oracle/compare/measuring/checks.py", "from ..checking import case_run  # noqa", "no import cycles"),
    ("oracle/compare/checking/explain.py", "from ..reporting import report  # noqa", "subpackages are layered"),
])
def test_a_violation_breaks_its_contract(tmp_path, module, line, contract):
    for name in ("oracle", "fused", "pyproject.toml"):
        src = ROOT / name
        (shutil.copytree if src.is_dir() else shutil.copy)(src, tmp_path / name)
    path = tmp_path / module
    path.write_text(path.read_text() + "\n" + line + "\n")
    done = lint(tmp_path)
    assert done.returncode != 0
    broken = [ln for ln in done.stdout.splitlines() if " BROKEN" in ln]
    assert any(contract in ln for ln in broken), done.stdout
