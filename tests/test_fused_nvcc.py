"""The CUDA sources compile with nvcc for sm_80 and sm_90, on any machine
with nvcc (no GPU needed), so a kernel that does not compile cannot land.

One nvcc invocation per .cu file, both architectures through -gencode, the
files in parallel; the same flags as the JIT build (fused._ext) plus torch's
include paths. The binding (cuda_bindings.cpp) is checked with the host
compiler: it includes no CUDA header.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sysconfig

import pytest

from fused import _ext

NVCC = shutil.which("nvcc") or (os.path.join(os.environ["CUDA_HOME"], "bin", "nvcc")
                                if os.environ.get("CUDA_HOME") else None)
if NVCC is not None and not os.path.exists(NVCC):
    NVCC = None
pytestmark = pytest.mark.skipif(NVCC is None, reason="nvcc not found (PATH, CUDA_HOME)")

ARCHS = ["-gencode", "arch=compute_80,code=sm_80", "-gencode", "arch=compute_90,code=sm_90"]


def include_flags():
    from torch.utils.cpp_extension import include_paths

    return [f"-I{p}" for p in [str(_ext.CSRC), *include_paths()]]


def test_cuda_sources_compile_for_sm80_and_sm90(tmp_path):
    cu_files = sorted(_ext.CSRC.glob("*.cu"))
    assert {f.name for f in cu_files} == {s for s in _ext.CUDA_SOURCES if s.endswith(".cu")}
    jobs = {}
    for src in cu_files:
        cmd = [NVCC, "-std=c++20", *_ext.CUDA_CFLAGS, *ARCHS, *include_flags(), "-c", str(src),
               "-o", str(tmp_path / (src.stem + ".o"))]
        jobs[src.name] = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    failures = {}
    for name, job in jobs.items():
        out, _ = job.communicate(timeout=300)
        if job.returncode != 0:
            failures[name] = out[-4000:]
    assert not failures, "\n".join(f"--- {k}\n{v}" for k, v in failures.items())
    for src in cu_files:
        assert (tmp_path / (src.stem + ".o")).stat().st_size > 0


def test_cuda_binding_compiles_with_the_host_compiler():
    compiler = os.environ.get("CXX", "c++")
    cmd = [compiler, "-std=c++20", "-fsyntax-only", "-DTORCH_EXTENSION_NAME=fused_optim_cuda",
           f"-I{sysconfig.get_paths()['include']}", *include_flags(), str(_ext.CSRC / "cuda_bindings.cpp")]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
