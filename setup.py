"""Packaging hook: a wheel carries what the packages read from the repository at run time.

The project's metadata is in pyproject.toml. In a clone (and an editable install) `fused` compiles
its kernels from csrc/ and the comparison CLI judges runs against reports/known.toml, both found next
to the packages. A wheel has no repository around it, so build_py copies them into the packages:
csrc/ to fused/csrc/, and the known-findings list with its repro scripts to
oracle/compare/checking/known_findings/. fused._ext.CSRC and oracle.compare.checking.known.default_path use those
copies where the repository's own files are absent.
"""
from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
# (source in the repository, destination inside the built packages, files to take). All of csrc/:
# fused._ext.build_key hashes every file there, so the copy keys builds as the repository does.
COPIES = (
    ("csrc", "fused/csrc", ("*",)),
    ("reports", "oracle/compare/checking/known_findings", ("known.toml", "known/*.py")),
)


class BuildPyWithData(build_py):
    def run(self):
        super().run()
        for src, dst, patterns in COPIES:
            for pattern in patterns:
                for path in sorted(p for p in (ROOT / src).glob(pattern) if p.is_file()):
                    target = Path(self.build_lib) / dst / path.relative_to(ROOT / src)
                    target.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(path, target)


setup(cmdclass={"build_py": BuildPyWithData})
