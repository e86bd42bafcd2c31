"""Run jobs in a pool of warm worker processes, so a target that segfaults,
hangs or eats memory costs one error row, not the sweep.

`run_isolated(work, device, timeout, jobs=N)` starts up to N workers (with
"spawn": no forked OpenMP or CUDA state). Each imports torch and the engine
once and then runs job after job. Results come back in the order of the work
list whatever N is, so the report and exit status do not depend on it.

A worker leads a process group of its own and dies with the CLI
(oracle.compare.isolation.processes). When its job outlives `timeout` seconds, or the
resident memory of the worker and its children exceeds `memory_limit_mb`, the
whole group is killed (SIGKILL) and the job gets one error row; a worker that
dies by itself (a segfault) costs the same row. A fresh worker takes its
place for the remaining jobs. On the way out (the end, an exception, Ctrl-C)
every worker's group is killed and its private temporary folder removed.

Which worker runs which job: a target whose availability is a check of its own imports a library
beyond torch (bitsandbytes: a second, most of it torch's compiler stack; DeepSpeed with its ops).
Such a library's checks and jobs go to the worker that imported it first, while the others have other
work, and different libraries go to different workers (_Todo.take): on the default job this saves a
bitsandbytes import per run. A worker never idles while a job is left, so load balance comes first.
Which worker runs a job, and in which order, never changes its row; results come back in work order.

Each worker runs torch, OpenMP and BLAS with one thread (OMP_NUM_THREADS=1
set before torch loads; torch.set_num_threads(1)): N single-threaded workers
on N cores do not spin against each other. A target that asks for more
(Target.threads) gets them for its own jobs.
"""
from __future__ import annotations

import multiprocessing as mp
import os
import signal
import sys
import time
from collections import deque
from multiprocessing.connection import wait

from ..isolation import processes as procs
from ..measuring import phases
from .driver import error_result, untampered

STARTUP_TIMEOUT = 120.0  # importing torch on a busy 2-core machine
# A worker that dies or is still importing at its limit is replaced, with twice the limit, this many
# times in a row before the run gives up: a fresh clone on a loaded machine once needed more than
# 120 s to import torch cold, and one slow start used to end the whole sweep.
STARTUP_ATTEMPTS = 3
POLL_S = 0.5             # how often the memory of busy workers is read
THREAD_ENV = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
# A worker may start before the CLI has planned the run (Pool.prestart: its imports overlap the plan),
# and planning sets what jobs read from the environment (inferred conventions, the known-findings file,
# DeepSpeed's extensions folder). So before each job a worker is sent every variable that changed in
# the CLI since it started, as (ENV_UPDATE, {name: value, or None: removed}); its own (OWN_ENV) excepted.
ENV_UPDATE = "environment"
# (PROBE, target name, optimizer, device): is the target usable here? Its check imports its library (and
# may run a kernel), which the CLI process never does: a library that crashes or hangs on import costs
# one skip row naming that, not the run (Pool.probe).
PROBE = "availability"
# A probe's limit is at least this: a check may JIT-build a library's ops cold (DeepSpeed's five take
# about 5 minutes on 2 cores), which the CLI used to wait out without a limit.
PROBE_TIMEOUT_MIN = 1200.0
OWN_ENV = frozenset({*THREAD_ENV, "TMPDIR", procs.TAG_ENV})


def env_changes(then: dict, now) -> dict:
    """{name: new value, or None where removed} of the variables that differ between two environments,
    the worker's own excepted."""
    out = {k: v for k, v in now.items() if then.get(k) != v and k not in OWN_ENV}
    out.update({k: None for k in then if k not in now and k not in OWN_ENV})
    return out


def apply_env(changes: dict) -> None:
    """Apply env_changes' {name: value, or None: removed} to this process's environment."""
    for key, value in changes.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


def default_jobs() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


_LISTED: dict = {}  # this worker's registry.by_name(every_target()), listed at its first job


def resolve_target(name: str, optimizer: str):
    """Rebuild a target from its name inside the worker (targets hold closures and do not pickle). The
    registry's list is the same at every job of a process (built-in and library targets, whose checks
    and imports happen when used), so it is listed once per worker (1.3 ms a job otherwise); find still
    applies what this run inferred for an outside optimizer, and loads a user's `impl:` target afresh."""
    from ..registry import by_name, every_target, find
    if not _LISTED and not name.startswith("impl:"):
        _LISTED.update(by_name(every_target()))
        from .. import lazy_torch
        lazy_torch.bind()  # the target modules the listing imported
    return find(name, optimizer, _LISTED)


def run_job(target, case_name: str, seed: int, steps: int, device: str, pattern=None):
    from .driver import run_job as run
    return run(target, case_name, seed, steps, device, pattern)


def _set_threads(n: int) -> None:
    import torch
    if torch.get_num_threads() != n:
        torch.set_num_threads(n)


def _worker(conn, parent_pid: int) -> None:
    procs.own_group()
    procs.die_with_parent(parent_pid)
    # Ctrl-C belongs to the parent: it writes the partial report and ends this worker.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    procs.behind_shield()  # a target signalling its parent hits the shield: one error row, not the CLI
    t0 = time.perf_counter()
    with phases.phase("worker start-up (imports)"):
        import torch
        torch.set_num_threads(1)
        try:
            torch.set_num_interop_threads(1)
        except RuntimeError:  # already fixed (something ran in parallel)
            pass
        from ..checking import case_run as run
        from .. import scenarios
        from ..isolation import tamper  # noqa: F401 - imported before "ready" so limits time the work only
        # torch.optim.Optimizer's constructor imports torch._dynamo on first use (a second and a half):
        # every job builds one, so it is paid here, where a worker started before the plan overlaps it
        import torch._dynamo  # noqa: F401
        from .. import lazy_torch
        from ..registry import class_paths
        from ..targets import classes
        lazy_torch.bind()  # the engine's modules read torch directly from here on
        # what the CLI lists the targets by, read here since the CLI imports no torch (targets.classes)
        facts = classes.read_all(class_paths())
        clean = tamper.snapshot()  # before any target code ran in this process
    conn.send(("ready", {"import_s": time.perf_counter() - t0, "pid": os.getpid(), "phases": phases.take(),
                         "classes": facts}))
    while True:
        job = conn.recv()
        if job is None:
            procs.exit_now(0)  # the pool waits for this exit: not a second of teardown
        if job[0] == ENV_UPDATE:  # what the CLI's environment gained or lost since this worker started
            apply_env(job[1])
            continue
        if job[0] == PROBE:
            before = dict(os.environ)
            with phases.phase("availability checks (targets' own)"):
                reason, changes = probe_target(clean, *job[1:])
            env = {k: v for k, v in env_changes(before, os.environ).items() if k not in OWN_ENV}
            conn.send(("retired" if changes else "result", (reason, env), phases.take()))
            if changes:
                return
            continue
        name, optimizer, case_name, seed, steps, device, pattern = job
        with phases.phase("job between integrity checks"):
            result, changes = judged_job(clean, name, optimizer, case_name, seed, steps, device, pattern)
        # retired after a job that changed it: the rest runs in a fresh worker, as under any --jobs
        conn.send(("retired" if changes else "result", result, phases.take()))
        if changes:
            return


def judged_job(clean, name, optimizer, case_name, seed, steps, device, pattern):
    """(result, what the target changed in this process): one job between two integrity checks
    (oracle.compare.isolation.tamper); a job that changed anything is an error row, its changes undone."""
    from ..isolation import tamper
    tamper.settle(clean)
    try:
        target = resolve_target(name, optimizer)
        _set_threads(max(1, getattr(target, "threads", 1) or 1))
        result = run_job(target, case_name, seed, steps, device, pattern)
    except Exception as exc:  # noqa: BLE001 - reported as the case's error row
        result = error_result(name, optimizer, case_name, seed, steps, f"{type(exc).__name__}: {exc}")
    procs.kill_escaped()  # a new session or a daemon the job left behind dies with the job
    return untampered(clean, result, name, optimizer, case_name, seed, steps)


def probe_target(clean, name: str, optimizer: str, device: str) -> tuple[str | None, list[str]]:
    """(why the target is not usable on `device`, or None; what its check changed in this process, which
    tamper.changed watches, then put back: the worker is retired as after such a job)."""
    from ..isolation import tamper
    tamper.settle(clean)
    try:
        reason = resolve_target(name, optimizer).unavailable(device)
    except Exception as exc:  # noqa: BLE001 - a check that raises makes the target unusable, saying why
        reason = f"its availability check raised {type(exc).__name__}: {exc}"
    procs.kill_escaped()
    changes = tamper.changed(clean)
    if changes:
        tamper.settle(clean)
        reason = f"its availability check changed the process that judges it ({'; '.join(changes[:4])})"
    return reason, changes


class _PatchedEnv:
    def __init__(self, values: dict):
        self.values, self.saved = values, {}

    def __enter__(self):
        self.saved = {k: os.environ.get(k) for k in self.values}
        os.environ.update(self.values)

    def __exit__(self, *exc):
        for k, v in self.saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


class WorkerStartError(RuntimeError):
    """No worker process could be started (STARTUP_ATTEMPTS in a row): the environment, not a target."""


class Worker:
    """One worker process; started without waiting for it (`ready` says when it is)."""

    def __init__(self, index: int = 0, startup_timeout: float = STARTUP_TIMEOUT):
        self.tmp = procs.make_tmp(index)
        ctx = mp.get_context("spawn")
        self.conn, child = ctx.Pipe()
        # not a daemon: scenarios (rank_skew) start processes of their own; close() ends it
        self.proc = ctx.Process(target=_worker, args=(child, os.getpid()), daemon=False,
                                name=f"oracle-worker-{index}")
        self.started = time.monotonic()
        self.startup_deadline = self.started + startup_timeout
        self.tag = procs.new_tag()  # every descendant inherits it: kill() finds escapees by it
        # the spawn context's resource tracker is this process's, started here so it is not tagged
        from multiprocessing import resource_tracker
        resource_tracker.ensure_running()
        self.env = dict(os.environ)  # what it inherits (besides its own variables): see ENV_UPDATE
        with _PatchedEnv({**THREAD_ENV, "TMPDIR": self.tmp, procs.TAG_ENV: self.tag}):
            self.proc.start()
        child.close()
        self.ready = False
        self.info: dict = {}
        self.job = None          # (work index, deadline) of the job it runs
        self.stopping = False    # told to exit (stop)
        self.dispatched = 0.0
        self.libraries: set = set()  # libraries its jobs and checks have imported (library_of)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def why_dead(self) -> str:
        self.proc.join(10)
        code = self.proc.exitcode
        if code is not None and code < 0:
            return f"worker died with signal {signal.Signals(-code).name}"
        return f"worker exited with status {code}"

    def kill(self) -> None:
        procs.kill_group(self.proc.pid)
        procs.kill_tagged(self.tag)  # new sessions and daemons its targets left, which the group misses
        self.proc.join(5)
        procs.remove_tmp(self.tmp)
        self.conn.close()

    def stop(self) -> None:
        """Ask an idle worker to exit (close() waits for it): an exit takes about a second with torch
        loaded (the interpreter's teardown), so a pool asks every worker before it waits for any."""
        if self.stopping or not (self.proc.is_alive() and self.job is None and self.ready):
            return
        try:
            self.conn.send(None)
            self.stopping = True
        except (BrokenPipeError, OSError):
            pass

    def close(self) -> None:
        self.stop()
        if self.stopping:
            self.proc.join(5)
        self.kill()  # whatever is left in its group (a child it started), and its folder


class Pool:
    """Runs a work list on up to `jobs` workers; `results` holds finished jobs
    (work index -> result) not yet handed out, for a partial report."""

    def __init__(self, jobs: int = 1, timeout: float = 300.0, memory_limit_mb: float | None = None,
                 startup_timeout: float = STARTUP_TIMEOUT):
        self.jobs, self.timeout, self.memory_limit_mb = max(1, jobs), timeout, memory_limit_mb
        self.startup_timeout = startup_timeout
        self.start_failures: list[str] = []  # why each start failed since a worker last came up
        self.workers: list[Worker] = []
        self.results: dict = {}
        self._lost_result = None  # (item index, why) -> its result, set by _drive
        self._item_timeout = timeout  # the limit of the items _drive hands out
        # jobs a worker may run while availability checks are still out (probe's `early`), and their
        # results by job message, for run() to take instead of running them again
        self._early: list = []
        self._early_next, self._early_device = 0, "cpu"
        self.early_done: dict = {}
        self.started = 0
        # "phases": what the workers measured (oracle.compare.measuring.phases), added up
        self.stats = {"workers_started": 0, "import_s": [], "spawn_s": [], "phases": {}}

    def configure(self, jobs: int, timeout: float, memory_limit_mb: float | None) -> "Pool":
        """The run's limits, for a pool started before the arguments were parsed (cli.early_workers):
        workers beyond `jobs` are closed."""
        self.jobs, self.timeout, self.memory_limit_mb = max(1, jobs), timeout, memory_limit_mb
        self._item_timeout = timeout
        while len(self.workers) > self.jobs:
            self.workers.pop().close()
        return self

    def prestart(self, n: int = 1) -> "Pool":
        """Start up to n workers now, before the work is known (their imports overlap the CLI's plan;
        the environment the plan leaves reaches them with their first job: ENV_UPDATE)."""
        while len(self.workers) < min(n, self.jobs):
            self._start()
        return self

    def class_facts(self) -> dict:
        """What the first worker up read of the optimizer classes the targets wrap (targets.classes
        read_all, sent with "ready"), waiting for one to be up. Raises WorkerStartError as a run does
        when no worker starts."""
        while True:
            for w in self.workers:
                if w.ready:
                    return w.info.get("classes") or {}
            if not self.workers:
                self._start()
            self._wait()

    def _start(self) -> None:
        limit = self.startup_timeout * 2 ** len(self.start_failures)
        self.workers.append(Worker(self.started, limit))
        self.started += 1
        self.stats["workers_started"] += 1

    def _retire(self, w: Worker) -> None:
        w.kill()
        self.workers.remove(w)

    def run(self, work, device: str):
        """Yield each (target, case, seed) job's result (a CaseResult or a list of them), in work order."""
        procs.sweep_stale_tmp()
        work = list(work)

        def message(i):
            return job_message(*work[i], device)

        def lost(i, why):
            return lost_job(*work[i], why)

        # jobs run early (while the availability checks were out) are not run again
        done = {i: self.early_done[key] for i, key in enumerate(map(message, range(len(work))))
                if key in self.early_done}
        self.early_done.clear()
        try:
            yield from self._drive(len(work), message, lost, libraries=[library_of(t, device) for t, _, _ in work],
                                   done=done)
        finally:
            self.close()

    def probe(self, targets, device: str, timeout: float | None = None, early=()) -> dict:
        """{target name: why it is not usable on `device`, or None}, each target's own check run in a worker
        (PROBE), side by side on the pool's workers; what the checks set in their environment (DeepSpeed's
        accelerator and extensions folder) is set here too, so every later worker inherits it. A check that
        kills its worker, or runs past `timeout` (default: the pool's, at least PROBE_TIMEOUT_MIN), makes that
        target unusable, saying so. The pool stays open for the run.

        early: (target, case, seed) jobs of the run that need no check (torch's own paths, ours). A worker
        with no check to run meanwhile (the others are importing a library for theirs) runs these, in
        order, until the last check is back; run() then takes their results instead of running them (a
        job's row does not depend on when or where it ran; jobs see the same environment as in run())."""
        targets = list(targets)
        if not targets:
            return {}
        self._early, self._early_next, self._early_device = list(early), 0, device

        def lost(i, why):
            return (f"checking whether it is usable here ended its worker process ({why})", {})

        reasons = {}
        limit = timeout if timeout is not None else max(self.timeout, PROBE_TIMEOUT_MIN)
        # a library's checks go to the worker that imported it first; another worker waits rather than
        # import it too (the checks after the first are quick, the import is not)
        checks = self._drive(len(targets), lambda i: (PROBE, targets[i].name, targets[i].optimizer, device), lost,
                             limit, [library_of(t, device) for t in targets], wait_for_owner=True)
        try:
            for target, (reason, env) in zip(targets, checks):
                reasons[target.name] = reason
                apply_env(env)
            while any(w.job is not None and _is_early(w.job[0]) for w in self.workers):
                self._wait()  # the early jobs still running finish; no other is handed out
            for key in [k for k in self.results if _is_early(k)]:
                self.early_done[job_message(*self._early[key[1]], device)] = self.results.pop(key)
        finally:
            self.results.clear()  # what is left is no job's row
            self._early = []
        return reasons

    def _drive(self, count: int, message, lost, timeout: float | None = None, libraries: list | None = None,
               wait_for_owner: bool = False, done: dict | None = None):
        """Yield the results of items 0..count-1 in order: message(i) is sent to a free worker; lost(i, why)
        is the result of an item whose worker died, ran past `timeout` (default: the pool's) or outgrew its
        memory. libraries[i]: the library item i imports (library_of), which picks the worker (_pick).
        done: results of items already run (probe's early jobs), yielded in their place."""
        self._libraries = libraries or [None] * count
        done = done or {}
        self.results.update(done)
        todo = _Todo(self._libraries, skip=done)
        self._lost_result = lost
        self._item_timeout = self.timeout if timeout is None else timeout
        self._wait_for_owner = wait_for_owner
        nxt = 0
        while True:
            while nxt in self.results:  # done ones first: a wait with nothing out would last its full timeout
                yield self.results.pop(nxt)
                nxt += 1
            if nxt >= count:
                return
            self._fill(todo, message)
            self._wait()

    def _fill(self, todo: "_Todo", message) -> None:
        busy = sum(w.job is not None for w in self.workers)
        want = min(self.jobs, busy + len(todo))
        while len(self.workers) < want:
            self._start()
        for w in self.workers:
            if not (w.ready and w.job is None):
                continue
            i = self._pick(todo, w) if todo else None
            if i is None:
                self._send_early(w)
                continue
            if not self._send(w, message(i)):
                todo.appendleft(i)  # it died idle: the next round replaces it
                continue
            w.job = (i, time.monotonic() + self._item_timeout)
            if self._libraries[i] is not None:
                w.libraries.add(self._libraries[i])

    def _send(self, w: Worker, job) -> bool:
        """Send `job` to an idle worker, after what the CLI's environment gained or lost since its last one."""
        try:
            changes = env_changes(w.env, os.environ)
            if changes:
                w.conn.send((ENV_UPDATE, changes))
                w.env = dict(os.environ)
            w.conn.send(job)
        except (BrokenPipeError, OSError):
            return False
        return True

    def _send_early(self, w: Worker) -> None:
        """The next early job (probe) to a worker that has no check to run, with the pool's job limit."""
        if self._early_next >= len(self._early):
            return
        k = self._early_next
        if self._send(w, job_message(*self._early[k], self._early_device)):
            self._early_next += 1
            w.job = (("early", k), time.monotonic() + self.timeout)

    def _pick(self, todo: "_Todo", w: Worker):
        """The item `w` runs next, taken out of `todo` (_Todo.take); None: it waits."""
        return todo.take(w.libraries, [(o.libraries, o.ready) for o in self.workers if o is not w],
                         wait=self._wait_for_owner)

    def _wait(self) -> None:
        now = time.monotonic()
        # busy workers' job deadlines and starting workers' start-up deadlines (idle ones have none)
        deadlines = [w.job[1] if w.job else w.startup_deadline for w in self.workers if w.job or not w.ready]
        wake = min(deadlines, default=now + 60.0) - now
        if self.memory_limit_mb:
            wake = min(wake, POLL_S)
        waitables = {}
        for w in self.workers:
            waitables[w.conn] = w
            waitables[w.proc.sentinel] = w
        ready = wait(list(waitables), timeout=max(0.0, wake))
        handled = set()
        for obj in ready:
            w = waitables[obj]
            if id(w) in handled or w not in self.workers:
                continue
            handled.add(id(w))
            self._event(w)
        self._check_limits()

    def _event(self, w: Worker) -> None:
        msg = None
        if w.conn.poll():
            try:
                msg = w.conn.recv()
            except (EOFError, OSError):
                msg = None
        if msg is None:  # end of the pipe, or the process is gone
            self._lost(w, w.why_dead())
            return
        kind, payload, *measured = msg
        if kind == "ready":
            w.ready, w.info = True, payload
            self.start_failures.clear()
            self.stats["spawn_s"].append(time.monotonic() - w.started)
            self.stats["import_s"].append(payload.get("import_s", 0.0))
            phases.merge(self.stats["phases"], payload.get("phases"))
        elif kind in ("result", "retired") and w.job is not None:
            phases.merge(self.stats["phases"], measured[0] if measured else None)
            self.results[w.job[0]] = payload
            w.job = None
            if kind == "retired":
                self._retire(w)

    def _lost(self, w: Worker, why: str) -> None:
        """The worker is gone (or being killed): its job, if any, gets the lost result (an error row)."""
        job = w.job
        self._retire(w)
        if job is None:
            if not w.ready:
                self._start_failed(f"worker process did not start: {why}")
            return
        if _is_early(job[0]):
            self.results[job[0]] = lost_job(*self._early[job[0][1]], why)
            return
        self.results[job[0]] = self._lost_result(job[0], why)

    def _check_limits(self) -> None:
        now = time.monotonic()
        busy = [w.pid for w in self.workers if w.job is not None]
        rss = procs.tree_rss_mb(busy) if self.memory_limit_mb and busy else {}
        for w in list(self.workers):
            if w.job is not None and now >= w.job[1]:
                limit = self.timeout if _is_early(w.job[0]) else self._item_timeout
                self._lost(w, f"timed out after {limit:g} s (worker killed)")
            elif w.job is None and not w.ready and now >= w.startup_deadline:
                self._retire(w)
                self._start_failed(f"worker process did not start within {w.startup_deadline - w.started:g} s")
            elif w.job is not None and self.memory_limit_mb and rss.get(w.pid, 0.0) > self.memory_limit_mb:
                self._lost(w, f"exceeded the memory limit of {self.memory_limit_mb:g} MB "
                              f"(resident {rss[w.pid]:.0f} MB; worker killed)")

    def _start_failed(self, why: str) -> None:
        """The next _fill replaces the worker, with a doubled limit, until STARTUP_ATTEMPTS failed in a row."""
        self.start_failures.append(why)
        if len(self.start_failures) >= STARTUP_ATTEMPTS:
            raise WorkerStartError(f"{len(self.start_failures)} worker processes in a row did not start: "
                                   + "; ".join(self.start_failures))
        print(f"warning: {why}; starting another ({len(self.start_failures)} of {STARTUP_ATTEMPTS} attempts "
              f"failed; its limit {self.startup_timeout * 2 ** len(self.start_failures):g} s)",
              file=sys.stderr, flush=True)

    def close(self) -> None:
        for w in self.workers:  # every idle one exits at once: their teardowns overlap
            w.stop()
        for w in list(self.workers):
            w.close()
        self.workers.clear()


class _Todo:
    """The items not yet handed out, in work order, kept per library (library_of) so that a worker's next
    item is found without scanning the rest (take)."""

    def __init__(self, libraries: list, skip=()):
        self.libraries = libraries
        self.queues: dict = {}
        for i, lib in enumerate(libraries):
            if i not in skip:
                self.queues.setdefault(lib, deque()).append(i)

    def __len__(self) -> int:
        return sum(len(q) for q in self.queues.values())

    def appendleft(self, i: int) -> None:
        self.queues[self.libraries[i]].appendleft(i)

    def take(self, mine: set, others: list, wait: bool = False):
        """The next item for a worker that has imported the libraries `mine`, while the other workers (each
        `others` entry: (the libraries it imported, whether it is ready)) have imported theirs:

        1. the first item of a library it has;
        2. else the first that imports none;
        3. else the first of a library no other worker has, unless it has one already and another worker
           has none (that one takes it: each library is imported by one worker while there are workers);
        4. else the first, or with `wait` None where another worker will take it (the checks after a
           library's first are quick, its import is not).

        So a library that costs a second to import (bitsandbytes) is imported by one worker, not by each,
        while there is other work for the rest. Which worker runs a job never changes its row (every job
        runs between the same integrity checks), and results are yielded in work order whatever the order
        they ran in."""
        heads = {lib: q[0] for lib, q in self.queues.items() if q}
        if not heads:
            return None
        elsewhere = set().union(*(libs for libs, _ in others))
        bare_other = any(not libs for libs, _ in others)
        for allowed in (lambda lib: lib is not None and lib in mine, lambda lib: lib is None,
                        lambda lib: lib not in elsewhere and not (mine and bare_other)):
            firsts = [i for lib, i in heads.items() if allowed(lib)]
            if firsts:
                return self._pop(min(firsts))
        if wait and (bare_other or any(ready for _, ready in others)):
            return None
        return self._pop(min(heads.values()))

    def _pop(self, i: int) -> int:
        self.queues[self.libraries[i]].popleft()
        return i


def job_message(target, case, seed, device: str) -> tuple:
    """What a worker is sent for one (target, case, seed) job; also its key among early results."""
    return (target.name, target.optimizer, case.name, seed, case.steps, device, getattr(case, "pattern", None))


def lost_job(target, case, seed, why: str):
    """The error row of a job whose worker died, ran past its limit or outgrew its memory."""
    return error_result(target.name, target.optimizer, case.name, seed, case.steps, why)


def _is_early(key) -> bool:
    return isinstance(key, tuple)


def library_of(target, device: str) -> str | None:
    """The library a target's jobs import beyond torch and the engine (every worker has those): its name's
    first part ("bnb", "deepspeed", "torchao") where its availability is a check of its own, else None."""
    from ..targets.base import checked_in_worker
    return target.name.split(".", 1)[0] if checked_in_worker(target, device) else None


def run_isolated(work, device: str, timeout: float, jobs: int = 1, memory_limit_mb: float | None = None,
                 pool: Pool | None = None):
    """Yield each (target, case, seed) job's result (a CaseResult or a list of them), in order."""
    pool = pool or Pool(jobs, timeout, memory_limit_mb)
    yield from pool.run(work, device)


__all__ = ["ENV_UPDATE", "PROBE", "Pool", "Worker", "WorkerStartError", "default_jobs", "env_changes", "error_result",
           "run_isolated"]
