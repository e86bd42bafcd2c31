"""Process hygiene for the engine's worker processes (no torch here).

Every process the engine starts (case workers, rank processes) dies with its
parent: `die_with_parent()` asks the kernel for a SIGKILL when the parent
exits (Linux prctl PR_SET_PDEATHSIG), or, elsewhere, starts a thread that
polls os.getppid(). So a `kill -9` of the CLI takes its workers down, and a
killed worker takes its ranks down. A worker leads a process group of its
own (`own_group()`), killed whole (`kill_group`) on timeout, interrupt and
exit. Each worker also gets a private temporary folder (TMPDIR) that the
parent removes when the worker ends; `sweep_stale_tmp()` removes the folders
of CLI processes that no longer exist (one killed with SIGKILL could not).
"""
from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

PR_SET_PDEATHSIG = 1
TMP_PREFIX = "oracle-worker-"
LAUNCHER_ENV = "ORACLE_RANK_PARENT"  # a process started with this set dies with the process of this pid


def die_with_launcher() -> None:
    """Called first thing in a fresh interpreter the engine started (a rank, the
    inference): die with the process named by LAUNCHER_ENV."""
    parent = os.environ.get(LAUNCHER_ENV)
    if parent and parent.isdigit():
        die_with_parent(int(parent))


def die_with_parent(parent_pid: int | None = None, sig: int = signal.SIGKILL) -> None:
    """Have this process receive `sig` when its parent exits. `parent_pid`: the
    parent it was started by (if it already died, this process dies now)."""
    expected = os.getppid() if parent_pid is None else parent_pid
    armed = False
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            armed = libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) == 0
        except (OSError, AttributeError):
            armed = False
    if os.getppid() != expected:  # the parent died before the request took effect
        os.kill(os.getpid(), sig)
    if not armed:
        def watch():
            while os.getppid() == expected:
                time.sleep(0.5)
            os.kill(os.getpid(), sig)
        threading.Thread(target=watch, name="die-with-parent", daemon=True).start()


def own_group() -> None:
    """Make this process the leader of a new process group (killed whole by its parent)."""
    with contextlib.suppress(OSError):
        os.setpgid(0, 0)


class MemoryLimitExceeded(RuntimeError):
    """A child run by run_child grew past its memory limit (it was killed)."""


MEMORY_POLL_S = 0.25


def run_child(argv: list, timeout: float, env: dict | None = None,
              memory_limit_mb: float | None = None) -> subprocess.CompletedProcess:
    """Run a fresh interpreter the CLI depends on (the --impl import probe, the inference)
    to its end: in a process group of its own, dying with this process (LAUNCHER_ENV),
    its whole group killed on timeout (subprocess.TimeoutExpired is raised after), when
    its resident memory with its children passes `memory_limit_mb` (MemoryLimitExceeded),
    on interrupt or any other way out of here. stdout and stderr come back as text."""
    env = {**(os.environ if env is None else env), LAUNCHER_ENV: str(os.getpid())}
    proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, errors="replace", start_new_session=True)
    deadline = time.monotonic() + timeout
    try:
        while True:
            left = deadline - time.monotonic()
            try:
                # communicate may be called again after its timeout: output read so far is kept
                out, err = proc.communicate(timeout=min(left, MEMORY_POLL_S) if memory_limit_mb else left)
                break
            except subprocess.TimeoutExpired:
                if not memory_limit_mb or time.monotonic() >= deadline:
                    raise
            rss = tree_rss_mb([proc.pid]).get(proc.pid, 0.0)
            if rss > memory_limit_mb:
                raise MemoryLimitExceeded(f"exceeded the memory limit of {memory_limit_mb:g} MB "
                                          f"(resident {rss:.0f} MB)")
    finally:
        kill_group(proc.pid)
        proc.wait()
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


def kill_group(pid: int, sig: int = signal.SIGKILL) -> None:
    """Signal the process group led by `pid`, and `pid` itself in case it had not made its group yet."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, sig)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def make_tmp(index: int) -> str:
    """A private temporary folder for worker `index` of this process."""
    return tempfile.mkdtemp(prefix=f"{TMP_PREFIX}{os.getpid()}-{index}-")


def remove_tmp(path: str | None) -> None:
    if path:
        shutil.rmtree(path, ignore_errors=True)


def sweep_stale_tmp() -> None:
    """Remove worker folders whose CLI process is gone."""
    root = tempfile.gettempdir()
    with contextlib.suppress(OSError):
        for name in os.listdir(root):
            if not name.startswith(TMP_PREFIX):
                continue
            pid = name[len(TMP_PREFIX):].split("-", 1)[0]
            if pid.isdigit() and int(pid) != os.getpid() and not _alive(int(pid)):
                shutil.rmtree(os.path.join(root, name), ignore_errors=True)


def tree_rss_mb(pids) -> dict[int, float]:
    """Resident memory of each pid with all its descendants, MiB (one pass over Linux /proc; {} elsewhere)."""
    parents: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return {}
    page = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
    for name in entries:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as fh:
                stat = fh.read()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2:].split()
        # fields[0] is the state (field 3 of stat); the ppid is field 4, rss (pages) field 24
        parents.setdefault(int(fields[1]), []).append(int(name))
        rss[int(name)] = int(fields[21])
    out = {}
    for pid in pids:
        total, todo = 0, [pid]
        while todo:
            p = todo.pop()
            total += rss.get(p, 0)
            todo += parents.get(p, [])
        out[pid] = total * page / 2**20
    return out


__all__ = ["LAUNCHER_ENV", "MemoryLimitExceeded", "die_with_launcher", "die_with_parent", "run_child", "kill_group", "make_tmp", "own_group", "remove_tmp", "sweep_stale_tmp",
           "tree_rss_mb"]
