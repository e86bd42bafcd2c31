"""Adding an optimizer takes its own files and nothing else (docs/adding-an-optimizer.md): a toy
optimizer (sign descent with decoupled decay) is added to a temporary copy of the tree as its spec,
its comparison record and its control and mutant, and the copy then knows it everywhere: the spec
registry, the CLI's choices, the case matrix, the mutation gate's controls, and a run that passes
the control and fails the mutant. No file of the tree is edited."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# the whole change: path -> content
TOY_FILES = {
    "oracle/toysign.py": '''
        """Toy sign descent (a test optimizer): p <- p*(1 - lr*wd) - lr*sign(g)."""
        from dataclasses import dataclass

        import numpy as np

        from .common import ascent, check_counter, decay_decoupled, drive, held
        from .hparams import validated
        from .spec import DECAY, NO_PRECISION_ROLE, STEP_SIZE, OptimizerSpec, Role


        @dataclass(frozen=True)
        class ToySignConvention:
            counter: str = "none"
            fp32_hparams: bool = False

            def __post_init__(self):
                check_counter(self.counter)


        DEFAULTS = {"lr": 1e-2, "weight_decay": 0.0, "maximize": False}
        ROLES = {"lr": Role(STEP_SIZE), "weight_decay": Role(DECAY, "wd"), "maximize": Role(NO_PRECISION_ROLE)}


        def validate(hparams):
            return validated(hparams, DEFAULTS, ROLES)


        def update(p, g, hp, conv):
            lr, wd = held(hp, conv, "lr", "weight_decay")
            return decay_decoupled(p, lr, wd) - lr * np.sign(ascent(g, hp))


        def step(params, grads, state, hparams, conv=ToySignConvention(), scaling=None):
            hps = validate(hparams)
            return drive(params, grads, state, hps, conv.counter, scaling,
                         lambda g, i, p, grad, st, t: (update(p, grad, hps[g], conv), st))


        SPECS = (OptimizerSpec(name="toysign", step=step, validate=validate, convention=ToySignConvention(),
                               state_keys=(), defaults=DEFAULTS, roles=ROLES, options=frozenset({"maximize"}),
                               summary="toy sign descent"),)
    ''',
    "oracle/compare/optimizers/toysign.py": '''
        from . import CompareRecord

        CONFIGS = {"wd0.1": {"lr": 1e-3, "weight_decay": 0.1}, "maximize": {"lr": 1e-3, "maximize": True}}
        PLAN = (("wd0.1", "single", "normal"), ("maximize", "two_groups", "zero_grads"))
        RECORDS = (CompareRecord("toysign", CONFIGS, PLAN, {"lr": 1e-3, "weight_decay": 0.1}),)
    ''',
    "oracle/mutants/optimizers/toysign.py": '''
        import torch

        from oracle.mutants.base import _Base
        from oracle.mutants.catalog import Mutant
        from oracle.toysign import ToySignConvention


        class ToySign(_Base):
            """Toy sign descent in fp32, one rounding on store."""

            ORACLE_OPTIMIZER = "toysign"
            ORACLE_CONVENTION = ToySignConvention()
            ORACLE_OPTIONS = frozenset({"maximize"})

            def __init__(self, params, lr=1e-2, weight_decay=0.0, maximize=False):
                super().__init__(params, dict(lr=lr, weight_decay=weight_decay, maximize=maximize))

            def _update(self, p, st, group):
                g = self._grad(p, group)
                g = -g if group["maximize"] else g
                pf = self._master(p, st)
                pf.mul_(1 - group["lr"] * group["weight_decay"]).add_(torch.sign(g), alpha=-group["lr"])
                self._store(p, st, pf)


        class ToySignDecayTwice(Mutant, ToySign):
            PROVENANCE = "a test of this project's issue 28 (no shipped instance)"
            DESCRIPTION = "decays twice"
            EXPECT = ("lockstep", "param", 1, "")

            def _update(self, p, st, group):
                super()._update(p, st, group)
                p.mul_(1 - group["lr"] * group["weight_decay"])


        CONTROLS = [ToySign]
        MUTANTS = [ToySignDecayTwice]
    ''',
}


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    """A copy of the package sources with the toy optimizer's files added."""
    dst = tmp_path_factory.mktemp("tree")
    for name in ("oracle", "fused", "csrc"):
        shutil.copytree(ROOT / name, dst / name, ignore=shutil.ignore_patterns("__pycache__", "*.so", "build"))
    for path, text in TOY_FILES.items():
        assert not (dst / path).exists(), f"{path} exists already: the toy must be new"
        (dst / path).write_text(textwrap.dedent(text).lstrip())
    return dst


def _run(tree: Path, *args, cwd=None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    return subprocess.run([sys.executable, *args], cwd=cwd or tree, env=env, capture_output=True, text=True,
                          timeout=600)


def test_the_copy_knows_the_toy_everywhere(tree):
    code = textwrap.dedent('''
        import oracle
        assert oracle.__file__.startswith(%r), oracle.__file__
        from oracle.compare.checking import cases
        from oracle.compare.optimizers import records
        from oracle.mutants import controls, mutants
        assert "toysign" in oracle.SPECS and "toysign" in records()
        assert len(cases.cases("toysign")) == 6   # 2 plan rows x 3 dtypes
        assert any(c.__name__ == "ToySign" for c in controls())
        assert any(c.__name__ == "ToySignDecayTwice" for c in mutants())
        print("ok")
    ''' % str(tree))
    out = _run(tree, "-c", code)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]
    helped = _run(tree, "-m", "oracle.compare", "--help")
    assert "toysign" in " ".join(helped.stdout.split()), helped.stdout


@pytest.mark.parametrize("cls, want", [("ToySign", 0), ("ToySignDecayTwice", 1)])
def test_a_run_judges_the_toy(tree, tmp_path, cls, want):
    """The control passes and the mutant fails through the CLI, as any optimizer's would."""
    out = _run(tree, "-m", "oracle.compare", "--optimizer", "toysign", "--impl",
               f"oracle.mutants.optimizers.toysign:{cls}", "--no-infer", "--scenario", "none", "--steps", "3",
               "--dtype", "fp32", "--jobs", "1", "--known", "none", "--report-dir", str(tmp_path / "r"), cwd=tmp_path)
    assert out.returncode == want, out.stdout[-3000:] + out.stderr[-2000:]
    assert "2 jobs -> 2 result rows" in out.stdout, out.stdout[-2000:]


def test_the_change_is_only_the_toys_files(tree):
    """Every file of the copy but the toy's is the tree's own, byte for byte."""
    added = {str(p.relative_to(tree)) for p in tree.rglob("*.py")} - {
        str(p.relative_to(ROOT)) for name in ("oracle", "fused", "csrc") for p in (ROOT / name).rglob("*.py")}
    assert added == set(TOY_FILES)
    for path in (ROOT / "oracle").rglob("*.py"):
        rel = path.relative_to(ROOT)
        assert (tree / rel).read_bytes() == path.read_bytes(), rel
