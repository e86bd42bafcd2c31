"""Builds and loads the C++/CUDA extensions, once, the way apex and DeepSpeed do.

`torch.utils.cpp_extension.load` compiles csrc/ with ninja into a build
directory (env FUSED_BUILD_DIR, default ~/.cache/optimizer-oracle/<torch, python,
hash of the build key>): one folder per csrc/ content, flags and torch build
(version and git revision), so checkouts of other sources never share one, and
fresh venvs of one torch wheel (every CI clone) do. A library whose stamp matches
the key and its own sha256 is loaded as it is; otherwise torch's load rebuilds. No
build isolation, no download: the installed torch's headers and libraries.

The CPU extension uses no CUDA header or library, so it loads with the
CPU-only torch wheel. The CUDA extension is built only when a CUDA device is
used.
"""
from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

# The repository's csrc/ (a clone, an editable install); a wheel carries a copy inside the package
# (setup.py).
_REPO_CSRC = Path(__file__).resolve().parent.parent / "csrc"
CSRC = _REPO_CSRC if _REPO_CSRC.is_dir() else Path(__file__).resolve().parent / "csrc"
CPU_SOURCES = ["cpu_bindings.cpp", "cpu_kernels.cpp"]
CUDA_SOURCES = ["cuda_bindings.cpp", "cuda_adam.cu", "cuda_adagrad.cu", "cuda_lamb.cu", "cuda_sgd.cu",
                "cuda_lion.cu"]

# -ffp-contract=off: no fused multiply-adds, so each element sees the same
#   roundings on every path (vector body, scalar tail, CUDA) as the oracle's
#   sequence of operations; the loops are memory-bound, FMA buys nothing.
# -fno-math-errno: sqrtf without an errno branch, so the loops vectorize;
#   results are unchanged.
COMMON_CFLAGS = ["-O3", "-fno-math-errno", "-ffp-contract=off"]
CUDA_CFLAGS = ["-O3", "--fmad=false", "-lineinfo"]


def build_dir(name: str, key: dict) -> Path:
    """<root>/torch<version>-py<XY>-<hash of key>/<name>: one folder per build key, so two checkouts of
    different csrc/, flags or torch builds never share a folder, and neither can overwrite the library
    the other stamped."""
    root = os.environ.get("FUSED_BUILD_DIR") or Path.home() / ".cache" / "optimizer-oracle"
    version = f"torch{torch.__version__.replace('+', '_')}-py{sys.version_info.major}{sys.version_info.minor}"
    path = Path(root) / f"{version}-{key_digest(key)}" / name
    path.mkdir(parents=True, exist_ok=True)
    return path


def key_digest(key: dict) -> str:
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]


@functools.cache
def native_arch_flags() -> tuple[str, ...]:
    """-march=native if this compiler accepts it here, else nothing.

    JIT builds run on the machine that uses them, so native is safe when it
    compiles; some compilers or emulated CPUs reject it.
    """
    compiler = os.environ.get("CXX", "c++")
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "probe.cpp"
        src.write_text("int main() { return 0; }\n")
        try:
            done = subprocess.run([compiler, "-march=native", "-O2", "-c", str(src), "-o", str(Path(tmp) / "p.o")],
                                  capture_output=True, timeout=60)
        except (OSError, subprocess.SubprocessError):
            return ()
    return ("-march=native",) if done.returncode == 0 else ()


@contextlib.contextmanager
def build_lock(directory):
    """Hold the build of one JIT extension directory; clears a stale torch build lock.

    torch.utils.cpp_extension marks a build in progress with a plain file
    `<dir>/lock` and makes every later load wait, without limit, until that file
    is gone; a build that was killed (timeout, kill -9, CI cancel) leaves it
    behind, and every later run then hangs on import. Here each build also
    holds an flock on `<dir>/.oracle-build.flock`, which the kernel drops when
    its holder dies: whoever holds the flock knows no build of ours is running,
    so a `lock` file it finds is stale and is removed (said on stderr)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / ".oracle-build.flock", "a") as fh:  # closing it releases the flock
        fcntl.flock(fh, fcntl.LOCK_EX)
        stale = directory / "lock"
        if stale.exists():
            print(f"removing a stale build lock left by a killed build: {stale}", file=sys.stderr, flush=True)
            stale.unlink(missing_ok=True)
        yield


STAMP = ".oracle-build.json"  # in the build directory: build_key() of the library there, and its sha256


def build_key(name: str, kwargs: dict) -> dict:
    """What a build depends on: every file of csrc/ (sources and headers, by content), the flags, the
    python version and torch's build (version and git revision: its headers and libraries). Not where
    torch is installed: the library names torch's libraries by soname only (no rpath), and a stamped
    library is imported as it is (_import_stamped), without the JIT build file that holds the paths."""
    digest = hashlib.sha256()
    for path in sorted(p for p in CSRC.iterdir() if p.is_file()):
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return {"name": name, "csrc": digest.hexdigest(), "flags": repr(sorted(kwargs.items())), "torch": torch.__version__,
            "torch_build": torch.version.git_version, "python": sys.version.split()[0]}


def library_digest(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def write_stamp(where: Path, name: str, key: dict) -> None:
    """Stamps the library just built in `where` with its key and its own hash."""
    stamp = {**key, "library_sha256": library_digest(where / f"{name}.so")}
    (where / STAMP).write_text(json.dumps(stamp, indent=1))


def _import_stamped(name: str, where: Path, key: dict):
    """The library in `where` if its stamp says it was built from exactly `key` and the library is the
    one stamped (its sha256), else None: a library another build replaced is rebuilt, never loaded.

    torch's load runs ninja first, and ninja recompiles every object whose headers are newer than it:
    after a reinstall of torch (a fresh venv, as in CI) that is a full rebuild of sources that did not
    change. The stamp's key is what a rebuild could change, so a matching stamp loads the library as is."""
    try:
        stamp = json.loads((where / STAMP).read_text())
        library = where / f"{name}.so"
        if {k: v for k, v in stamp.items() if k != "library_sha256"} != key:
            return None
        if stamp.get("library_sha256") != library_digest(library):
            return None
        return import_library(name, library)
    except (OSError, ValueError, ImportError, AttributeError):
        return None


def import_library(name: str, path) -> object:
    """The Python extension module `name` from the built library at `path`, imported as it is (no
    build step); raises ImportError or OSError where it does not import. The DeepSpeed ops' cache
    (oracle.compare.targets.deepspeed.load_op) loads its stamped builds through this too."""
    spec = importlib.util.spec_from_file_location(name, str(path))
    if spec is None:
        raise ImportError(f"{path} is not an importable library")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _load(name: str, sources: list[str], **kwargs):
    from torch.utils.cpp_extension import load

    verbose = os.environ.get("FUSED_BUILD_VERBOSE", "") not in ("", "0")
    key = build_key(name, {"sources": sources, **kwargs})
    where = build_dir(name, key)
    with build_lock(where):
        module = _import_stamped(name, where, key)
        if module is None:
            module = load(name=name, sources=[str(CSRC / s) for s in sources], extra_include_paths=[str(CSRC)],
                          build_directory=str(where), verbose=verbose, **kwargs)
            write_stamp(where, name, key)
        return module


def cpu_build() -> tuple[str, list[str], dict]:
    """(name, sources, torch load arguments) of the CPU extension."""
    cflags = [*COMMON_CFLAGS, *native_arch_flags(), "-fopenmp"]
    return "fused_optim_cpu", CPU_SOURCES, dict(extra_cflags=cflags, extra_ldflags=["-fopenmp"], with_cuda=False)


def cpu_build_dir() -> Path:
    """The build folder of the CPU extension for this csrc/, these flags and this torch install."""
    name, sources, kwargs = cpu_build()
    return build_dir(name, build_key(name, {"sources": sources, **kwargs}))


@functools.cache
def cpu():
    """The CPU extension module (built on first use)."""
    name, sources, kwargs = cpu_build()
    return _load(name, sources, **kwargs)


@functools.cache
def cuda():
    """The CUDA extension module (built on first use; needs a CUDA torch and nvcc)."""
    if not torch.cuda.is_available():
        raise RuntimeError("fused: the CUDA extension needs torch with CUDA and a visible device")
    return _load("fused_optim_cuda", CUDA_SOURCES, extra_cflags=COMMON_CFLAGS, extra_cuda_cflags=CUDA_CFLAGS,
                 with_cuda=True)


def for_device(device: torch.device):
    if device.type == "cpu":
        return cpu()
    if device.type == "cuda":
        return cuda()
    raise RuntimeError(f"fused: no kernels for device type {device.type!r}")
