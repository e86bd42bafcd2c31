"""How the CLI and its workers end and begin without waiting on the interpreter: a process leaves with
exit_now (its atexit handlers and buffered output kept, the teardown of torch skipped), a pool asks
every worker to stop before it waits for any, and the CLI reads what it needs of the targets' package
without importing torch before its first worker starts."""
import subprocess
import sys
import time

from oracle.compare.running import workers


def _python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


def test_exit_now_keeps_atexit_handlers_and_buffered_output():
    done = _python("import atexit, sys\n"
                   "from oracle.compare.isolation.processes import exit_now\n"
                   "atexit.register(lambda: print('handler ran'))\n"
                   "sys.stdout.write('buffered, no newline')\n"
                   "sys.stderr.write('to stderr')\n"
                   "exit_now(3)\n")
    assert done.returncode == 3
    assert done.stdout == "buffered, no newlinehandler ran\n"
    assert done.stderr == "to stderr"


def test_the_cli_module_exits_with_mains_status_and_a_crash_keeps_its_traceback(tmp_path):
    ok = subprocess.run([sys.executable, "-m", "oracle.compare", "--optimizer", "nonesuch"], capture_output=True,
                        text=True, timeout=120)
    assert ok.returncode == 2 and "unknown optimizer 'nonesuch'" in ok.stderr
    crash = _python("import sys, runpy\n"
                    "import oracle.compare.cli as cli\n"
                    "def boom(argv=None):\n"
                    "    raise RuntimeError('main itself failed')\n"
                    "cli.main = boom\n"
                    "runpy.run_module('oracle.compare', run_name='__main__')\n")
    assert crash.returncode == 1 and "RuntimeError: main itself failed" in crash.stderr


class _Worker:
    def __init__(self, name, log):
        self.name, self.log = name, log

    def stop(self):
        self.log.append(("stop", self.name))

    def close(self):
        self.log.append(("close", self.name))


def test_a_pool_asks_every_worker_to_stop_before_it_waits_for_any():
    log: list = []
    pool = workers.Pool(2)
    pool.workers = [_Worker("a", log), _Worker("b", log)]
    pool.close()
    assert log == [("stop", "a"), ("stop", "b"), ("close", "a"), ("close", "b")]
    assert pool.workers == []


def test_a_real_pool_closes_its_idle_workers_by_their_own_exit():
    """Each warm, idle worker is told to stop and exits 0 by itself (not killed) before close returns."""
    pool = workers.Pool(2).prestart(2)
    procs = [w.proc for w in pool.workers]
    deadline = time.monotonic() + 240
    while not all(w.ready for w in pool.workers) and time.monotonic() < deadline:
        for w in pool.workers:
            if not w.ready and w.conn.poll(0.5):
                w.info = w.conn.recv()[1]
                w.ready = True
    assert all(w.ready for w in pool.workers)
    pool.close()
    assert [p.exitcode for p in procs] == [0, 0]


def test_the_declarations_module_imports_no_torch():
    """cli.main reads ORACLE_INFERRED's name from it before the first worker starts. The targets' own
    API (Target and its helpers) imports none either: torch comes with the library modules that list
    torch's classes, and with a CUDA question (targets.base.cuda_available)."""
    done = _python("import sys\n"
                   "from oracle.compare.targets.declare import ENV\n"
                   "assert 'torch' not in sys.modules, 'torch imported'\n"
                   "from oracle.compare.targets import Target, load_impl, probe_import, with_counter\n"
                   "assert 'torch' not in sys.modules and Target.__name__ == 'Target'\n"
                   "print(ENV)\n")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ORACLE_INFERRED"
