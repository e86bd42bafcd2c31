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

A process group does not hold a target's escapees: a child started with
start_new_session=True, or a double-forked daemon, leaves it. So every process
the engine starts carries a tag in its environment (TAG_ENV, one per worker or
child interpreter), which every descendant inherits whatever its session or
parent; `kill_tagged(tag)` kills them all (Linux /proc). A worker kills its
escapees after every job (`kill_escaped`), its parent kills every tagged
process when the worker ends, and `run_child` when its child exits (a daemon
holding the child's stdout would otherwise stall the read until the timeout).

A process that runs target code sits behind a shield (`behind_shield()`): it
forks first thing, and the parent that stays behind only waits for the child
and leaves as the child left. So a target that signals its parent
(`os.kill(os.getppid(), SIGTERM)`) hits the shield, not the CLI: the shield
dies, its child with it (die_with_parent), and the CLI sees one process lost,
which costs one error row rather than the run.
"""
from __future__ import annotations

import contextlib
import ctypes
import os
import resource
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
TAG_ENV = "ORACLE_PROCESS_TAG"       # inherited by every descendant: kill_tagged finds them all


def new_tag() -> str:
    import uuid
    return uuid.uuid4().hex


def _proc_pids() -> list[int]:
    try:
        return [int(n) for n in os.listdir("/proc") if n.isdigit()]
    except OSError:
        return []


def tagged(tag: str) -> list[int]:
    """Pids of the live processes whose environment carries TAG_ENV=tag (this one excluded)."""
    needle = f"{TAG_ENV}={tag}".encode()
    out = []
    for pid in _proc_pids():
        if pid == os.getpid():
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as fh:
                env = fh.read()
        except OSError:
            continue
        if needle in env.split(b"\0"):
            out.append(pid)
    return out


def kill_tagged(tag: str | None, keep=lambda pid: False) -> list[int]:
    """SIGKILL every process carrying the tag (except this one and those `keep` accepts); the pids killed."""
    if not tag:
        return []
    killed = []
    for pid in tagged(tag):
        if keep(pid):
            continue
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
    return killed


def _stat(pid: int) -> tuple[int, int] | None:
    """(parent pid, session id) of a live process."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            fields = fh.read().rsplit(b")", 1)[1].split()
        return int(fields[1]), int(fields[3])
    except (OSError, IndexError, ValueError):
        return None


def kill_escaped() -> list[int]:
    """In a worker, after a job: kill the processes carrying this process's tag that left it, a new
    session or an orphan no longer under this process (a daemon). Children still under it, in its
    session (torch's compile workers), are its own and stay."""
    tag = os.environ.get(TAG_ENV)
    me, session = os.getpid(), os.getsid(0)

    def ours(pid):
        if pid == SHIELD_PID:
            return True
        seen = set()
        while pid not in seen:
            seen.add(pid)
            st = _stat(pid)
            if st is None or st[1] != session:
                return False
            if st[0] == me:
                return True
            pid = st[0]
        return False
    return kill_tagged(tag, keep=ours)


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


SHIELD_PID: int | None = None  # in a process behind a shield: the shield's pid (kill_escaped spares it)


def behind_shield() -> None:
    """Fork; the parent becomes this process's shield and the child returns and goes on. The shield
    holds nothing but inherited descriptors, runs no target code and leaves with the child's exit
    status (or signal), so whoever started the process sees the child's end as its own."""
    global SHIELD_PID
    shield = os.getpid()
    child = os.fork()
    if child == 0:
        SHIELD_PID = shield
        die_with_parent(shield)  # a target that kills the shield takes its own process down with it
        return
    _leave_as(_wait_for(child))


def _wait_for(pid: int) -> int:
    while True:
        try:
            return os.waitpid(pid, 0)[1]
        except InterruptedError:
            continue
        except ChildProcessError:
            return 1 << 8  # not ours to wait for: status 1


def _leave_as(status: int) -> None:
    """End this process as a child that ended with `status` did: the same exit code or signal."""
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        with contextlib.suppress(OSError, ValueError):
            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # the child's crash already happened
        with contextlib.suppress(OSError, ValueError):
            signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
        os._exit(128 + sig)  # a signal this process cannot die of (blocked, or SIGCHLD-like)
    os._exit(os.waitstatus_to_exitcode(status))


class OwnProcessDied(RuntimeError):
    """The child a job ran in ended without handing back a result (a crash, a signal, os._exit)."""


def in_own_process(fn):
    """fn() in a child forked for it alone; its return value (pickled) comes back, and an exception
    comes back as a RuntimeError carrying its type, message and traceback. Whatever fn changes in
    the process (a native library's static state: DeepSpeed's CPU FusedAdam keeps one bias-correction
    object per process) ends with the child, so the next job starts from the same state as this one."""
    import pickle
    import traceback
    rfd, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(rfd)
        code = 0
        try:
            if "torch" in sys.modules:
                # one thread: an OpenMP pool the parent started has no threads in this child, and a
                # parallel region that waited for them would never end
                sys.modules["torch"].set_num_threads(1)
            try:
                out = ("ok", fn())
            except BaseException as exc:  # noqa: BLE001 - handed to the parent, which raises it
                out = ("raised", f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}")
            data = pickle.dumps(out)
            with os.fdopen(wfd, "wb") as fh:
                fh.write(data)
        except BaseException:  # noqa: BLE001 - nothing to hand back: the parent sees an empty pipe
            code = 1
        finally:
            for stream in (sys.stdout, sys.stderr):
                with contextlib.suppress(Exception):
                    stream.flush()
            os._exit(code)
    os.close(wfd)
    with os.fdopen(rfd, "rb") as fh:
        data = fh.read()
    status = _wait_for(pid)
    if not data:
        how = (f"signal {signal.Signals(os.WTERMSIG(status)).name}" if os.WIFSIGNALED(status)
               else f"status {os.waitstatus_to_exitcode(status)}")
        raise OwnProcessDied(f"the job's own process ended with {how} before handing back its result")
    kind, payload = pickle.loads(data)
    if kind == "raised":
        raise RuntimeError(f"in the job's own process: {payload}")
    return payload


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
    tag = new_tag()
    env = {**(os.environ if env is None else env), LAUNCHER_ENV: str(os.getpid()), TAG_ENV: tag}
    proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, errors="replace", start_new_session=True)
    deadline = time.monotonic() + timeout
    try:
        while True:
            left = deadline - time.monotonic()
            try:
                # communicate may be called again after its timeout: output read so far is kept
                out, err = proc.communicate(timeout=max(0.0, min(left, MEMORY_POLL_S)))
                break
            except subprocess.TimeoutExpired:
                if time.monotonic() >= deadline:
                    raise
            if proc.poll() is not None:  # it ended; what still holds its pipes is a descendant left behind
                kill_tagged(tag)
                continue
            rss = tree_rss_mb([proc.pid]).get(proc.pid, 0.0) if memory_limit_mb else 0.0
            if memory_limit_mb and rss > memory_limit_mb:
                raise MemoryLimitExceeded(f"exceeded the memory limit of {memory_limit_mb:g} MB "
                                          f"(resident {rss:.0f} MB)")
    finally:
        kill_group(proc.pid)
        kill_tagged(tag)
        proc.wait()
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


def exit_now(code: int) -> None:
    """Exit without the interpreter's teardown, which takes about a second once torch and the targets'
    libraries are loaded (a pool waits for its workers' exits, a user for the CLI's): what exit runs
    that can matter runs first (multiprocessing's finalizers, atexit handlers, buffered output)."""
    import atexit
    from multiprocessing import util
    util._exit_function()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):  # a closed or broken pipe: nothing more to write there
            stream.flush()
    os._exit(code)


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


__all__ = ["LAUNCHER_ENV", "MemoryLimitExceeded", "behind_shield", "die_with_launcher", "die_with_parent", "run_child", "kill_group", "make_tmp", "own_group", "remove_tmp", "sweep_stale_tmp",
           "tree_rss_mb"]
