"""A JIT build killed mid-way leaves torch's `<dir>/lock` file behind, and every later
load waits for it to vanish, forever. fused._ext.build_lock clears such a lock when no
build of ours holds the directory (fused extension and DeepSpeed ops alike)."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fused._ext import build_lock, cpu_build_dir

_HOLD = """
import sys, time
from fused._ext import build_lock
with build_lock(sys.argv[1]):
    print("held", flush=True)
    time.sleep(float(sys.argv[2]))
"""


def test_a_lock_file_nobody_holds_is_removed(tmp_path, capsys):
    (tmp_path / "lock").write_text("")
    with build_lock(tmp_path):
        assert not (tmp_path / "lock").exists()
    assert "stale build lock" in capsys.readouterr().err


def test_a_running_build_is_waited_for_not_broken(tmp_path):
    holder = subprocess.Popen([sys.executable, "-c", _HOLD, str(tmp_path), "2"], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    (tmp_path / "lock").write_text("")  # the holder's torch build in progress
    t0 = time.monotonic()
    with build_lock(tmp_path):
        waited = time.monotonic() - t0
    holder.wait(timeout=30)
    assert waited > 1.0  # it waited for the holder instead of removing a live build's lock


def test_a_killed_holder_releases_the_directory(tmp_path):
    holder = subprocess.Popen([sys.executable, "-c", _HOLD, str(tmp_path), "600"], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    (tmp_path / "lock").write_text("")
    holder.kill()  # kill -9 mid-build: the flock goes with the process, torch's lock file stays
    holder.wait(timeout=30)
    assert (tmp_path / "lock").exists()
    with build_lock(tmp_path):
        assert not (tmp_path / "lock").exists()


def test_the_fused_extension_loads_past_a_stale_lock(tmp_path):
    """The real load: a copy of this machine's build with a stale lock."""
    pytest.importorskip("torch")
    from fused import _ext
    _ext.cpu()  # built (or loaded) here first
    src = cpu_build_dir()
    tag = src.parent.name
    # with its stamp: loaded from its .so (tests/test_fused_build_cache.py) once build_lock removed the lock
    shutil.copytree(src, tmp_path / tag / "fused_optim_cpu", ignore=shutil.ignore_patterns("lock", "*.flock"))
    (tmp_path / tag / "fused_optim_cpu" / "lock").write_text("")
    env = {**os.environ, "FUSED_BUILD_DIR": str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", "from fused import _ext; _ext.cpu(); print('loaded')"],
                         capture_output=True, text=True, timeout=600, env=env, cwd=Path(__file__).parent.parent)
    assert out.returncode == 0 and "loaded" in out.stdout, out.stderr[-2000:]
    assert "stale build lock" in out.stderr


_DS_LION = """
import torch
from oracle.compare.optimizers.lion import deepspeed_lion_targets
(target,) = deepspeed_lion_targets()
p = torch.nn.Parameter(torch.ones(8))
opt = target.make([{"params": [p]}], {"lr": 0.1})
p.grad = torch.ones(8)
opt.step()
print("stepped", p.detach()[0].item())
"""


@pytest.mark.deepspeed_ops
def test_a_deepspeed_target_makes_past_a_stale_lock(tmp_path):
    """A DeepSpeed target's make loads its op under build_lock before the optimizer's constructor asks
    DeepSpeed for it: a repro script killed at its timeout mid-load left torch's lock file in the shared
    op cache, and every later construction waited for it (CI ran out of time on that)."""
    from oracle.compare.targets import deepspeed as ds
    if ds.op_unavailable("cpu_lion"):
        pytest.skip(ds.op_unavailable("cpu_lion"))
    where = ds.build_ops(ops=("cpu_lion",))["TORCH_EXTENSIONS_DIR"]  # built (or loaded) here first
    # with its cache stamp: the copy loads from its .so (tests/test_deepspeed_cache.py), after build_lock
    # removed the stale lock. (Without the stamp, torch's JIT load would run ninja, which recompiles
    # everything when the venv is newer than the build, as CI's is: 55 s.)
    shutil.copytree(Path(where) / "cpu_lion", tmp_path / "cpu_lion", ignore=shutil.ignore_patterns("lock", "*.flock"))
    (tmp_path / "cpu_lion" / "lock").write_text("")
    env = {**os.environ, "TORCH_EXTENSIONS_DIR": str(tmp_path), "DS_ACCELERATOR": "cpu"}
    out = subprocess.run([sys.executable, "-c", _DS_LION], capture_output=True, text=True, timeout=600, env=env,
                         cwd=Path(__file__).parent.parent)
    assert out.returncode == 0 and "stepped 0.89999997" in out.stdout, out.stderr[-2000:]
    assert "stale build lock" in out.stderr
