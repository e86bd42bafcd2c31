"""Our extension's build cache: a library built from the same csrc/, flags and torch install is loaded
as it is, without torch's JIT load (whose ninja step recompiles everything after a torch reinstall,
since every torch header is then newer); anything else goes through torch's load and is stamped."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import torch

from fused import _ext

ROOT = Path(__file__).resolve().parent.parent
REFUSE_JIT = """
import torch.utils.cpp_extension as cpp_extension
def refuse(*args, **kwargs):
    raise AssertionError("torch's JIT load was called")
cpp_extension.load = refuse
from fused import _ext
print("loaded", _ext.cpu().chunk_size())
"""


def copy_of_the_build(tmp_path) -> tuple[Path, dict]:
    _ext.cpu()  # built, or loaded, and stamped here first
    src = _ext.cpu_build_dir()
    dst = tmp_path / src.parent.name / "fused_optim_cpu"
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("lock", "*.flock"))
    return dst, {**os.environ, "FUSED_BUILD_DIR": str(tmp_path)}


def load(env, script=REFUSE_JIT):
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600, env=env,
                          cwd=ROOT)


def test_a_stamped_build_loads_without_torchs_jit_load(tmp_path):
    build, env = copy_of_the_build(tmp_path)
    stamp = json.loads((build / _ext.STAMP).read_text())
    assert len(stamp["csrc"]) == 64 and stamp["torch"] == torch.__version__ and "extra_cflags" in stamp["flags"]
    assert stamp["library_sha256"] == _ext.library_digest(build / "fused_optim_cpu.so")
    out = load(env)
    assert out.returncode == 0 and "loaded 65536" in out.stdout, out.stderr[-2000:]


def test_a_build_stamped_for_other_sources_goes_through_torchs_load(tmp_path, monkeypatch):
    """In process, with torch's load replaced by a recorder: a real load would run ninja, which in a
    venv newer than the build (CI's) recompiles it, 50 s that test nothing of ours."""
    import torch.utils.cpp_extension

    build, _ = copy_of_the_build(tmp_path)
    stamp = json.loads((build / _ext.STAMP).read_text())
    (build / _ext.STAMP).write_text(json.dumps({**stamp, "csrc": "0" * 64}))
    monkeypatch.setenv("FUSED_BUILD_DIR", str(tmp_path))
    calls, built = [], object()
    monkeypatch.setattr(torch.utils.cpp_extension, "load", lambda **kw: calls.append(kw) or built)
    name, sources, kwargs = _ext.cpu_build()
    assert _ext._load(name, sources, **kwargs) is built
    [call] = calls
    assert call["name"] == name and call["build_directory"] == str(build)
    assert json.loads((build / _ext.STAMP).read_text()) == stamp  # restamped with what it was built from
    calls.clear()
    assert _ext._load(name, sources, **kwargs) is not built and not calls  # and now loaded as it is


def test_the_key_follows_every_file_of_csrc(tmp_path, monkeypatch):
    key = _ext.build_key("fused_optim_cpu", {"x": 1})
    assert _ext.build_key("fused_optim_cpu", {"x": 1}) == key
    assert _ext.build_key("fused_optim_cpu", {"x": 2}) != key
    fake = tmp_path / "csrc"
    shutil.copytree(_ext.CSRC, fake)
    monkeypatch.setattr(_ext, "CSRC", fake)
    assert _ext.build_key("fused_optim_cpu", {"x": 1}) == key
    header = fake / "optim_math.h"
    header.write_text(header.read_text() + "\n// a change in a header only\n")
    assert _ext.build_key("fused_optim_cpu", {"x": 1}) != key


def test_each_build_key_has_its_own_folder(tmp_path, monkeypatch):
    """Another torch build, other flags or another checkout's csrc/ never share a folder: one could
    otherwise rebuild the library the other had stamped, and the other load it. Where torch is installed
    is not in the key (no path is): fresh venvs of one torch wheel, each CI clone's, share the build."""
    monkeypatch.setenv("FUSED_BUILD_DIR", str(tmp_path))
    key = _ext.build_key("fused_optim_cpu", {"x": 1})
    here = _ext.build_dir("fused_optim_cpu", key)
    assert here.is_dir() and here.parent.parent == tmp_path
    for other in ({**key, "torch_build": "0" * 40}, {**key, "csrc": "1" * 64},
                  _ext.build_key("fused_optim_cpu", {"x": 2})):
        assert _ext.build_dir("fused_optim_cpu", other) != here
    assert _ext.build_dir("fused_optim_cpu", dict(key)) == here
    assert not any(os.sep in str(v) for k, v in key.items() if k != "flags"), key


def test_a_library_that_is_not_the_one_stamped_is_rebuilt(tmp_path, monkeypatch):
    """The stamp records the library's own sha256: a library replaced after it was stamped (by a build
    of other sources that wrote the same path) goes through torch's load, never imported as it is."""
    import torch.utils.cpp_extension

    build, _ = copy_of_the_build(tmp_path)
    library = build / "fused_optim_cpu.so"
    library.write_bytes(library.read_bytes() + b"\0")  # still loads as a library; not the one stamped
    monkeypatch.setenv("FUSED_BUILD_DIR", str(tmp_path))
    calls, built = [], object()
    monkeypatch.setattr(torch.utils.cpp_extension, "load", lambda **kw: calls.append(kw) or built)
    monkeypatch.setattr(_ext, "write_stamp", lambda *args: None)  # the recorder built nothing to hash
    name, sources, kwargs = _ext.cpu_build()
    assert _ext._load(name, sources, **kwargs) is built and len(calls) == 1
