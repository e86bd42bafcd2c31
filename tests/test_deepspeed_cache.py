"""The DeepSpeed op cache: one key shared by CI, the main job and the tests, and a build that says
what it builds and why (no deepspeed needed here)."""
import json
from pathlib import Path

import pytest

from oracle.compare.targets import deepspeed as dst

ROOT = Path(__file__).resolve().parent.parent


def test_the_key_names_versions_torch_build_and_simd_not_install_folders():
    key = dst.cache_key()
    assert set(key) == {"python", "torch", "torch_build", "deepspeed", "simd"}
    import torch
    assert key["torch_build"] == torch.version.git_version  # read from torch/version.py, same value
    name = dst.cache_key_name(key)
    assert name == dst.cache_key_name(dict(key)) and "+" not in name
    assert name.startswith(f"py{key['python'].replace('.', '')}-torch")
    # a torch of other sources under the same version string gets its own folder
    assert dst.cache_key_name({**key, "torch_build": "0" * 40}) != name
    assert dst.default_extensions_dir().endswith(name)
    # no install path: fresh venvs of the same versions (each CI clone's) share one build
    assert not any("/" in str(v) for v in key.values()), key


def test_build_reason_says_why(tmp_path):
    key = {**dst.cache_key(), "deepspeed": "0.19.8"}
    assert "no build of it" in dst.build_reason("cpu_adam", str(tmp_path), key)
    (tmp_path / "cpu_adam").mkdir()
    (tmp_path / "cpu_adam" / "cpu_adam.so").write_bytes(b"")
    assert "no record of what it was built for" in dst.build_reason("cpu_adam", str(tmp_path), key)
    dst._stamp("cpu_adam", str(tmp_path), key)
    assert dst.build_reason("cpu_adam", str(tmp_path), key) is None
    other = {**key, "deepspeed": "0.19.9"}
    why = dst.build_reason("cpu_adam", str(tmp_path), other)
    assert "another setup" in why and "'0.19.8' -> '0.19.9'" in why
    assert json.loads((tmp_path / "cpu_adam" / dst.STAMP).read_text())["deepspeed"] == "0.19.8"


def test_ci_builds_into_the_shared_cache():
    ci = (ROOT / ".ci" / "run").read_text()
    assert "TORCH_EXTENSIONS_DIR=" not in ci, "CI must not build into a folder of its own"
    assert "bash scripts/build_deepspeed_ops.sh >" in ci and 'wait "$ds_pid"' in ci
    script = (ROOT / "scripts" / "build_deepspeed_ops.sh").read_text()
    assert "--print-dir" in script and "--print-key" in script


# --- DeepSpeed's shared-memory allreduce buffers ---------------------------------------------------

_INIT = """
import os, sys
import torch.distributed as tdist
from oracle.compare.targets import deepspeed as dst
if os.environ.get("WORLD_SIZE", "1") == "1":
    dst.init_single_process()
else:
    dst.init_distributed()
world = tdist.get_world_size()
if world > 1:
    tdist.barrier()  # every rank past init_distributed: each has unlinked its own name
maps = open("/proc/self/maps").read()
for r in range(world):
    path = dst.shm_buffer_path(r)
    print(r, "mapped" if path in maps else "unmapped", "exists" if os.path.exists(path) else "gone")
tdist.barrier() if world > 1 else None
"""


def _shm_op_or_skip():
    reason = dst.op_unavailable("shm_comm")
    if reason:
        import pytest
        pytest.skip(reason)


def _run_ranks(world: int, tmp_path) -> tuple[list, dict]:
    import subprocess
    import sys

    from oracle.compare.isolation import ranks
    env = {k: v for k, v in ranks.rank_env(world).items() if k not in ("RANK", "LOCAL_RANK")}
    env["DS_ACCELERATOR"] = "cpu"
    if world == 1:  # init_single_process sets its own rendezvous
        env = {k: v for k, v in env.items() if k not in ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "LOCAL_SIZE")}
    procs = [subprocess.Popen([sys.executable, "-c", _INIT], env={**env, "RANK": str(r), "LOCAL_RANK": str(r)},
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
             for r in range(world)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), [err[-2000:] for _, err in outs]
    # only our lines (DeepSpeed prints to stdout too)
    return ["\n".join(ln for ln in out.splitlines() if ln[:2] in ("0 ", "1 ")) for out, _ in outs], env


@pytest.mark.deepspeed_ops  # loads the ops: runs last (tests/conftest.py)
def test_init_leaves_no_shm_buffer_behind(tmp_path):
    """DeepSpeed's CPU shm comm op creates a 67 MB /dev/shm buffer per rank and never unlinks it; a day
    of test runs left 20 GB of them. The buffer is created (the process maps it) and already unlinked."""
    _shm_op_or_skip()
    (out,), _ = _run_ranks(1, tmp_path)
    assert out.split() == ["0", "mapped", "gone"], out


@pytest.mark.deepspeed_ops  # loads the ops: runs last (tests/conftest.py)
def test_two_ranks_map_each_others_buffers_and_leave_none(tmp_path):
    _shm_op_or_skip()
    outs, env = _run_ranks(2, tmp_path)
    for out in outs:  # each rank still maps both buffers (the allreduce works), neither name is left
        assert out.splitlines() == ["0 mapped gone", "1 mapped gone"], out
    assert not Path(dst.shm_buffer_path(0, env["MASTER_ADDR"], env["MASTER_PORT"])).exists()


def test_the_rank_launcher_removes_buffers_of_killed_ranks():
    from oracle.compare.isolation import ranks
    env = ranks.rank_env(2)
    paths = [Path(dst.shm_buffer_path(r, env["MASTER_ADDR"], env["MASTER_PORT"])) for r in range(2)]
    for p in paths:  # as a rank killed before it could unlink its buffer leaves them
        p.write_bytes(b"x")
    ranks.release_shm(env, 2)
    assert not any(p.exists() for p in paths)


def _leave_buffer(path: str, work: str, rank: int) -> None:
    import pickle
    with open(path, "wb") as fh:  # as DeepSpeed's shm op leaves its buffer until a rank unlinks it
        fh.write(b"x")
    with open(f"{work}/rank{rank}.pkl", "wb") as fh:  # a rank's result, as ranks.collect reads it
        pickle.dump(rank, fh)


def test_forked_ranks_have_their_buffers_released_too(tmp_path):
    from oracle.compare.isolation import ranks
    env = ranks.rank_env(2)
    paths = [Path(dst.shm_buffer_path(r, env["MASTER_ADDR"], env["MASTER_PORT"])) for r in range(2)]
    out, err = ranks.fork(_leave_buffer, lambda rank: (str(paths[rank]), str(tmp_path), rank), 2, str(tmp_path), 60,
                          env)
    assert err is None and out == [0, 1]  # both ranks ran
    assert not any(p.exists() for p in paths)


_NO_JIT_LION = """
import torch.utils.cpp_extension as cpp_extension
def refuse(*args, **kwargs):
    raise AssertionError("torch's JIT load was called for a cached op")
cpp_extension.load = refuse
import torch
from oracle.compare.optimizers.lion import deepspeed_lion_targets

(target,) = deepspeed_lion_targets()
p = torch.nn.Parameter(torch.ones(8))
opt = target.make([{"params": [p]}], {"lr": 0.1})  # DeepSpeedCPULion asks DeepSpeed's builder for the op
p.grad = torch.ones(8)
opt.step()
print("stepped", p.detach()[0].item())
"""


@pytest.mark.deepspeed_ops  # loads the ops: runs last (tests/conftest.py)
def test_a_cached_op_is_imported_from_its_build_without_torchs_jit_load():
    """torch's JIT load runs ninja, which recompiles an op whose torch headers are newer than its
    objects: every op, in a fresh venv at the same path (CI's), 140 s for the five. A build stamped for
    this setup is imported from its .so instead, and DeepSpeed's own builder then finds it loaded."""
    import subprocess
    import sys

    import pytest
    if dst.op_unavailable("cpu_lion"):
        pytest.skip(dst.op_unavailable("cpu_lion"))
    where = dst.build_ops(ops=("cpu_lion",))["TORCH_EXTENSIONS_DIR"]
    assert dst.build_reason("cpu_lion", where) is None
    out = subprocess.run([sys.executable, "-c", _NO_JIT_LION], capture_output=True, text=True, timeout=600,
                         cwd=ROOT, env={**__import__("os").environ, "TORCH_EXTENSIONS_DIR": where})
    assert out.returncode == 0 and "stepped 0.89999997" in out.stdout, out.stderr[-2000:]


def test_each_ops_cache_folder_is_its_builders_name():
    """build_reason and the stamp find an op's build by dst._FOLDERS (no deepspeed import needed);
    DeepSpeed builds it into the folder its builder names: the two must agree for every op."""
    import pytest
    if dst.deepspeed_unavailable():
        pytest.skip(dst.deepspeed_unavailable())
    from deepspeed.ops import op_builder
    for op in dst.OPS:
        assert dst._FOLDERS.get(op, op) == getattr(op_builder, dst._BUILDERS[op])().name, op
