"""A crashing, hanging or raising target costs one error row; the sweep goes on."""
import json
import sys
import time

import pytest

from oracle.compare.cli import main
from oracle.compare.isolation.processes import MemoryLimitExceeded, run_child

CASE = "adamw/fp32/wd0.1/single/normal"


def sweep(tmp_path, *impls, timeout="60"):
    args = ["--optimizer", "adamw", "--case", CASE, "--timeout", timeout, "--report-dir", str(tmp_path), "--quiet"]
    for impl in impls:
        args += ["--impl", impl]
    code = main(args)
    doc = json.loads((tmp_path / "report.json").read_text())
    return code, {r["target"].split(":")[-1]: r for r in doc["results"]}, (tmp_path / "report.md").read_text()


def test_segfault_is_an_error_row_and_the_sweep_continues(tmp_path):
    code, rows, md = sweep(tmp_path, "tests.broken.crashing:SegfaultAdamW", "tests.broken.adamw:CorrectAdamW")
    assert code == 1
    assert rows["SegfaultAdamW"]["status"] == "error" and "SIGSEGV" in rows["SegfaultAdamW"]["reason"]
    assert rows["CorrectAdamW"]["status"] == "pass"
    assert "## Errors" in md and "SIGSEGV" in md


# The hang costs this twice (the first inference probe, then the case). A correct case of CASE takes
# under a second in a warm worker; 15 s leaves a 15x margin for a loaded 2-core machine (it was 30 s,
# which made this the third slowest test of CI).
HANG_TIMEOUT_S = 15


def test_hang_is_killed_at_the_time_limit(tmp_path, capsys):
    t0 = time.monotonic()
    code, rows, _ = sweep(tmp_path, "tests.broken.crashing:HangingAdamW", "tests.broken.adamw:CorrectAdamW",
                          timeout=str(HANG_TIMEOUT_S))
    assert code == 1
    assert rows["HangingAdamW"]["status"] == "error"
    assert f"timed out after {HANG_TIMEOUT_S} s" in rows["HangingAdamW"]["reason"]
    assert rows["CorrectAdamW"]["status"] == "pass"
    # the undeclared targets were fingerprinted first: the hanging one's first probe gave up at --timeout
    # (not at the inference's whole budget, 10 x --timeout), and the sweep went on
    err = capsys.readouterr().err
    assert f"ran past {HANG_TIMEOUT_S} s" in err and "judging it by its declarations" in err
    assert time.monotonic() - t0 < 8 * HANG_TIMEOUT_S, "the inference waited out its whole budget"


def test_exception_mid_step_is_reported_with_its_cause(tmp_path):
    code, rows, _ = sweep(tmp_path, "tests.broken.crashing:RaisingAdamW")
    row = rows["RaisingAdamW"]
    assert code == 1 and row["status"] == "error"
    assert "RuntimeError: kernel launch failed" in row["reason"]
    assert "kernel launch failed" in row["checks"]["error"]["note"]


def test_memory_limit_kills_the_worker_and_costs_one_row(tmp_path, capsys):
    args = ["--optimizer", "adamw", "--case", CASE, "--timeout", "120", "--report-dir", str(tmp_path), "--quiet",
            "--memory-limit", "1000", "--impl", "tests.broken.crashing:MemoryHogAdamW",
            "--impl", "tests.broken.adamw:CorrectAdamW"]
    assert main(args) == 1
    rows = {r["target"].split(":")[-1]: r for r in json.loads((tmp_path / "report.json").read_text())["results"]}
    assert rows["MemoryHogAdamW"]["status"] == "error"
    assert "exceeded the memory limit of 1000 MB" in rows["MemoryHogAdamW"]["reason"]
    assert rows["CorrectAdamW"]["status"] == "pass"
    # its inference, too, was stopped by the limit rather than by its time budget
    err = capsys.readouterr().err
    assert "inferring impl:tests.broken.crashing:MemoryHogAdamW exceeded the memory limit of 1000 MB" in err


def test_the_memory_limit_holds_for_a_child_interpreter():
    """procs.run_child (the inference, the --impl import probe) kills a child whose resident memory
    passes the limit, instead of waiting for its timeout."""
    code = "b = bytearray(600 << 20); import time; time.sleep(60)"
    t0 = time.monotonic()
    with pytest.raises(MemoryLimitExceeded, match="memory limit of 300 MB"):
        run_child([sys.executable, "-c", code], timeout=60, memory_limit_mb=300)
    assert time.monotonic() - t0 < 30
    done = run_child([sys.executable, "-c", "print('ok')"], timeout=60, memory_limit_mb=300)
    assert done.returncode == 0 and done.stdout.strip() == "ok"


def test_a_worker_that_dies_starting_is_replaced(tmp_path, monkeypatch, capsys):
    """A fresh clone on a loaded machine once took longer than the start-up limit to import torch, and
    the first slow worker ended the whole run: a failed start is now retried."""
    from oracle.compare.running import workers as isolate
    start = isolate.Pool._start

    def first_one_dies(self):
        start(self)
        if self.started == 1:
            self.workers[-1].proc.kill()  # before it could import anything

    monkeypatch.setattr(isolate.Pool, "_start", first_one_dies)
    code, rows, _ = sweep(tmp_path, "tests.broken.adamw:CorrectAdamW")
    assert rows["CorrectAdamW"]["status"] == "pass"
    assert not [r for r in rows.values() if r["status"] == "error"]
    err = capsys.readouterr().err
    assert "warning: worker process did not start: worker died with signal SIGKILL; starting another (1 of 3" in err


def test_workers_that_never_start_end_the_run_with_a_clear_error(tmp_path, monkeypatch, capsys):
    """Each retry doubles the limit; after STARTUP_ATTEMPTS the run stops, saying why, without a traceback."""
    from oracle.compare.running import workers as isolate
    start = isolate.Pool._start

    def too_short(self):
        self.startup_timeout = 0.01  # nothing imports torch that fast
        start(self)

    monkeypatch.setattr(isolate.Pool, "_start", too_short)
    code = main(["--optimizer", "adamw", "--case", CASE, "--target", "torch.adamw.forloop", "--report-dir",
                 str(tmp_path), "--quiet"])
    err = capsys.readouterr().err
    assert code == 130
    assert ("error: 3 worker processes in a row did not start: worker process did not start within 0.01 s; "
            "worker process did not start within 0.02 s; worker process did not start within 0.04 s") in err
    assert "no report written" in err and not (tmp_path / "report.json").exists()


def test_a_worker_started_before_the_plan_gets_the_environment_the_plan_leaves(tmp_path, monkeypatch):
    """The first worker starts before the plan (its imports overlap it); what the plan puts in the
    environment reaches it before its first job, and a variable the plan removes is removed there too."""
    from oracle.compare import cli
    from oracle.compare.running import workers as isolate
    from tests.broken.environment import PLANNED
    order = []
    prestart, plan = isolate.Pool.prestart, cli.plan

    def planned(args, optimizers, pool=None, judge=None):
        order.append("plan")
        monkeypatch.setenv("ORACLE_TEST_PLANNED", PLANNED)
        return plan(args, optimizers, pool, judge)

    monkeypatch.setattr(isolate.Pool, "prestart", lambda self, n=1: order.append("prestart") or prestart(self, n))
    monkeypatch.setattr(cli, "plan", planned)
    code, rows, _ = sweep(tmp_path, "tests.broken.environment:PlannedEnvAdamW")
    # started before the arguments are parsed (cli.early_workers), topped up after: both before the plan
    assert order[-1] == "plan" and set(order[:-1]) == {"prestart"}, order
    assert rows["PlannedEnvAdamW"]["status"] == "pass", rows["PlannedEnvAdamW"]["reason"]


def test_a_sweep_starts_every_worker_before_the_plan_and_a_narrow_run_one():
    from oracle.compare import cli
    assert cli.prestarted(cli.parser().parse_args(["--optimizer", "adamw"])) == 2
    for narrow in (["--target", "torch.adamw.forloop"], ["--case", "adamw/fp32/wd0.1/single/normal"],
                   ["--impl", "torch.optim:AdamW"]):
        assert cli.prestarted(cli.parser().parse_args(["--optimizer", "adamw", *narrow])) == 1, narrow


def test_workers_start_before_the_arguments_are_parsed_unless_the_run_may_need_none():
    from oracle.compare import cli
    assert cli.early_workers(["--optimizer", "adamw"]) == (2, None)
    assert cli.early_workers(["--optimizer", "adamw", "--jobs", "1"]) == (2, 1)
    assert cli.early_workers(["--target=torch.adamw.forloop"]) == (1, None)
    assert cli.early_workers(["--case", "x", "--jobs=3"]) == (1, 3)
    for none in (["--list"], ["--no-isolate"], ["-h"], ["--help"], ["--version"], ["--no-iso"], ["--li"],
                 ["--jobs", "two"]):
        assert cli.early_workers(["--optimizer", "adamw", *none]) == (0, None), none


@pytest.mark.parametrize("bad", [["--dtype", "int3"], ["--report-dir", "/proc/version"]])
def test_workers_started_early_end_with_a_usage_error(bad, capsys):
    import multiprocessing

    from oracle.compare import cli
    before = set(multiprocessing.active_children())
    try:
        code = cli.main(["--optimizer", "adamw", *bad])
    except SystemExit as exc:  # argparse's own exit
        code = exc.code
    assert code == 2
    assert set(multiprocessing.active_children()) <= before  # the early workers were closed


def test_a_pool_started_early_takes_the_parsed_limits_and_closes_workers_beyond_jobs():
    from oracle.compare.running.workers import Pool
    pool = Pool(2).prestart(2)
    try:
        assert len(pool.workers) == 2
        extra = pool.workers[1]
        pool.configure(1, 12.5, 100.0)
        assert (pool.jobs, pool.timeout, pool.memory_limit_mb, len(pool.workers)) == (1, 12.5, 100.0, 1)
        assert extra.proc.exitcode is not None  # the closed one is gone, not left running
    finally:
        pool.close()


def test_environment_changes_name_what_differs_but_a_workers_own_variables():
    from oracle.compare.running.workers import OWN_ENV, env_changes
    then = {"A": "1", "B": "2", "TMPDIR": "/mine", **{k: "1" for k in OWN_ENV}}
    now = {"A": "1", "B": "3", "C": "4", "TMPDIR": "/cli's"}
    assert env_changes(then, now) == {"B": "3", "C": "4"}
    assert env_changes({"A": "1", "D": "5"}, {"A": "1"}) == {"D": None}
