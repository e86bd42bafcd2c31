"""Run cases in a worker process, so a target that segfaults or hangs costs
one error row, not the sweep.

One worker (started with "spawn": no forked OpenMP or CUDA state) runs the
cases one at a time. If it dies, the current case is recorded as an error
with the signal, and a fresh worker takes the remaining cases; if a case
outlives its time limit the worker is killed the same way.
"""
from __future__ import annotations

import multiprocessing as mp
import signal
import time

from .run import CaseResult

STARTUP_TIMEOUT = 120.0  # importing torch on a busy 2-core machine


def resolve_target(name: str, optimizer: str):
    """Rebuild a target from its name inside the worker (targets hold
    closures and do not pickle)."""
    from .registry import find
    return find(name, optimizer)


def run_job(target, case_name: str, seed: int, steps: int, device: str, pattern=None):
    from .driver import run_job as run
    return run(target, case_name, seed, steps, device, pattern)


def _worker(conn) -> None:
    # Ctrl-C belongs to the parent: it writes the partial report and ends this worker.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    from . import run, scenarios  # noqa: F401 - imported before "ready" so limits time the work only
    conn.send("ready")
    while True:
        job = conn.recv()
        if job is None:
            return
        name, optimizer, case_name, seed, steps, device, pattern = job
        try:
            result = run_job(resolve_target(name, optimizer), case_name, seed, steps, device, pattern)
        except Exception as exc:  # noqa: BLE001 - reported as the case's error row
            result = error_result(name, optimizer, case_name, seed, steps, f"{type(exc).__name__}: {exc}")
        conn.send(result)


def error_result(target, optimizer, case_name, seed, steps, reason) -> CaseResult:
    from . import cases as C
    from .checks import CheckResult
    try:
        case = C.find_case(case_name, steps)
        dtype, hparams = case.dtype, case.group_hparams()
    except ValueError:
        dtype, hparams = "", []
    r = CaseResult(target, case_name, optimizer, dtype, hparams, seed, steps, status="error", reason=reason)
    r.checks = {"error": CheckResult("error", passed=False, note=reason)}
    return r


class Worker:
    def __init__(self):
        ctx = mp.get_context("spawn")
        self.conn, child = ctx.Pipe()
        # not a daemon: scenarios (rank_skew) start processes of their own; close() ends it
        self.proc = ctx.Process(target=_worker, args=(child,), daemon=False)
        self.proc.start()
        child.close()
        if not self.conn.poll(STARTUP_TIMEOUT) or self.conn.recv() != "ready":
            self.kill()
            raise RuntimeError(f"worker process did not start within {STARTUP_TIMEOUT} s")

    def run(self, job, timeout: float) -> CaseResult | str:
        """The job's result, or a string saying why there is none."""
        self.conn.send(job)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.conn.poll(0.05):
                try:
                    return self.conn.recv()
                except EOFError:  # the worker is going down: wait for its exit status
                    self.proc.join(10)
                    break
            if not self.proc.is_alive():
                break
        if self.proc.is_alive():
            self.kill()
            return f"timed out after {timeout:g} s (worker killed)"
        code = self.proc.exitcode
        if code is not None and code < 0:
            return f"worker died with signal {signal.Signals(-code).name}"
        return f"worker exited with status {code}"

    def kill(self) -> None:
        self.proc.kill()
        self.proc.join(5)

    def close(self) -> None:
        if self.proc.is_alive():
            try:
                self.conn.send(None)
                self.proc.join(5)
            except (BrokenPipeError, OSError):
                pass
        if self.proc.is_alive():
            self.kill()


def run_isolated(work, device: str, timeout: float, progress=None):
    """Yield each (target, case, seed) job's result (a CaseResult or a list of them), in order."""
    worker = None
    try:
        for target, case, seed in work:
            if worker is None:
                worker = Worker()
            job = (target.name, target.optimizer, case.name, seed, case.steps, device, getattr(case, "pattern", None))
            out = worker.run(job, timeout)
            if isinstance(out, str):
                worker = None
                out = error_result(target.name, target.optimizer, case.name, seed, case.steps, out)
            yield out
    finally:
        if worker is not None:
            worker.close()
