"""The one rank launcher: `world` worker processes over torch.distributed
(gloo on 127.0.0.1), each writing rank{r}.pkl and rank{r}.log into a work
folder, collected by the parent.

Every rank runs in a process group of its own (a new session for spawned
interpreters, setpgid for forked children), and the launcher kills each
whole group, whatever it started (gloo threads, a resource tracker, a
compiler), when a rank outlives the deadline, when the parent is
interrupted, and on the way out in any case; the work folder is removed
with it. So a timed-out or interrupted run leaves no process and no
temporary folder behind. A rank also dies with the process that launched it
(oracle.compare.isolation.processes.die_with_parent): when a case worker is killed at its
time limit, its ranks go with it, and the parent (the CLI's worker pool)
removes the worker's temporary folder, which holds the work folders.
"""
from __future__ import annotations

import contextlib
import os
import pickle
import signal
import socket
import subprocess
import sys
import tempfile
import time
from typing import Callable

from .processes import LAUNCHER_ENV, die_with_launcher, die_with_parent

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rank_env(world: int, port: int | None = None, **extra) -> dict:
    """The environment every rank shares (RANK/LOCAL_RANK are added per rank)."""
    return {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port or free_port()),
            "WORLD_SIZE": str(world), "LOCAL_SIZE": str(world), "OMP_NUM_THREADS": "1",
            "PYTHONPATH": os.pathsep.join([ROOT, os.getcwd(), *filter(None, [os.environ.get("PYTHONPATH")])]),
            **extra}


def shm_buffer_path(rank: int, addr: str | None = None, port: str | None = None) -> str:
    """Where DeepSpeed's CPU shm comm op puts a process group's buffer for `rank` (ops/csrc/cpu/comm/shm.cpp
    shm_initialize, 0.19.8); the group's MASTER_ADDR/MASTER_PORT, this process's by default."""
    addr = os.environ.get("MASTER_ADDR", "") if addr is None else addr
    port = os.environ.get("MASTER_PORT", "") if port is None else port
    return f"/dev/shm/deepspeed_allreduce_buffer_{os.getuid()}_{addr}_{port}_{rank}"


def kill_group(pid: int) -> None:
    """SIGKILL a rank's whole process group (the rank is its group's leader)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


PARENT_ENV = LAUNCHER_ENV  # a spawned rank dies with the process of this pid
rank_started = die_with_launcher  # called first thing in a spawned rank


@contextlib.contextmanager
def workdir(prefix: str):
    """A temporary folder that is removed however the block ends."""
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        yield tmp


def spawn(argv: Callable[[int], list], world: int, work: str, timeout: float, env: dict) -> tuple[list, str | None]:
    """Start `world` fresh interpreters (argv(rank)), wait up to `timeout`
    for all of them; returns (per-rank pickles, None where missing; error text)."""
    procs = []
    try:
        for rank in range(world):
            with open(os.path.join(work, f"rank{rank}.log"), "w") as log:
                procs.append(subprocess.Popen(argv(rank), env={**env, "RANK": str(rank), "LOCAL_RANK": str(rank),
                                                               PARENT_ENV: str(os.getpid())},
                                              stdout=log, stderr=subprocess.STDOUT, cwd=os.getcwd(),
                                              start_new_session=True))
        err = _wait([p.wait for p in procs], timeout)
    finally:
        for p in procs:
            kill_group(p.pid)
            p.wait()
        release_shm(env, world)
    return collect(work, [p.returncode for p in procs], err)


def release_shm(env: dict, world: int) -> None:
    """Unlink DeepSpeed's shm allreduce buffers of this group (targets.deepspeed.init_distributed): a rank
    unlinks its own after the group is up, but one killed before that would leave 67 MB in /dev/shm."""
    for rank in range(world):
        with contextlib.suppress(OSError):
            os.unlink(shm_buffer_path(rank, env.get("MASTER_ADDR", ""), env.get("MASTER_PORT", "")))


def fork(target: Callable, args: Callable[[int], tuple], world: int, work: str, timeout: float,
         env: dict | None = None) -> tuple[list, str | None]:
    """The same with forked children (CPU: no torch re-import); `target(*args(rank))`
    runs in each, in its own process group. `env`: the group's rank_env, whose DeepSpeed shm
    buffers (if a rank created any) are released as spawn releases them."""
    import multiprocessing
    ctx = multiprocessing.get_context("fork")
    parent = os.getpid()
    procs = [ctx.Process(target=_own_group, args=(target, args(rank), parent), daemon=True) for rank in range(world)]
    try:
        for p in procs:
            p.start()
        err = _wait([p.join for p in procs], timeout)
    finally:
        for p in procs:
            if p.pid is not None:
                kill_group(p.pid)
                p.kill()  # in case it was killed before it could make its own group
            p.join()
        if env is not None:
            release_shm(env, world)
    return collect(work, [p.exitcode for p in procs], err)


def _own_group(target, args, parent: int) -> None:
    os.setpgid(0, 0)
    die_with_parent(parent)
    target(*args)


def _wait(waiters, timeout: float) -> str | None:
    deadline = time.monotonic() + timeout
    for rank, wait in enumerate(waiters):
        try:
            wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            return f"rank {rank} did not finish within {timeout:.0f} s"
        if time.monotonic() > deadline:
            return f"rank {rank} did not finish within {timeout:.0f} s"
    return None


def collect(work: str, codes: list, err: str | None) -> tuple[list, str | None]:
    out = []
    for rank, code in enumerate(codes):
        path = os.path.join(work, f"rank{rank}.pkl")
        if code != 0 or not os.path.exists(path):
            out.append(None)
            err = err or f"rank {rank} exited with {code}:\n{log_tail(work, rank)}"
            continue
        with open(path, "rb") as fh:
            out.append(pickle.load(fh))
    return out, err


def log_tail(work: str, rank: int, size: int = 3000) -> str:
    path = os.path.join(work, f"rank{rank}.log")
    if not os.path.exists(path):
        return ""
    with open(path, errors="replace") as fh:
        return fh.read()[-size:]


def python_module(module: str, *args: str) -> Callable[[int], list]:
    """argv for a rank that runs `python -m module args...`."""
    return lambda rank: [sys.executable, "-m", module, *args]


__all__ = ["collect", "fork", "free_port", "kill_group", "log_tail", "python_module", "rank_env", "release_shm",
           "shm_buffer_path", "spawn", "workdir"]
