"""A library that takes a second to import (bitsandbytes) is imported by one worker of the pool, not by
each: a library's availability checks and jobs go to the worker that imported it while the others have
other work, and different libraries go to different workers (oracle.compare.running.workers._Todo.take).
The order jobs run in never changes the rows, which come back in work order."""
from __future__ import annotations

from pathlib import Path

import pytest

from oracle.compare import registry
from oracle.compare.checking import cases as C
from oracle.compare.running import workers
from oracle.compare.running.workers import _Todo, library_of

from tests.test_availability_in_workers import shadow_in_workers

CASE = "adamw/fp32/wd0.1/single/normal"


def test_a_worker_takes_its_own_library_first_then_plain_jobs_then_a_library_nobody_has():
    todo = _Todo([None, None, "a", "b", "a", None, "b"])
    assert todo.take(set(), []) == 0                 # nothing imported anywhere: work order
    assert todo.take({"a"}, []) == 2                 # its own library's first job, ahead of plain ones
    assert todo.take({"a"}, []) == 4
    assert todo.take(set(), [({"b"}, True)]) == 1    # "b" is another worker's: a plain job instead
    assert todo.take(set(), [({"b"}, True)]) == 5
    assert len(todo) == 2
    assert todo.take(set(), [({"b"}, True)], wait=True) is None  # checks: leave it to b's worker
    assert todo.take(set(), [({"b"}, True)]) == 3    # jobs: nothing else left, so it imports "b" too
    assert todo.take({"b"}, []) == 6
    assert todo.take(set(), []) is None and not todo


def test_libraries_spread_over_workers_while_one_has_none():
    todo = _Todo(["a", "a", "b", "b"])
    starting = (set(), False)
    assert todo.take(set(), [starting], wait=True) == 0
    assert todo.take({"a"}, [starting], wait=True) == 1
    # "b" is nobody's yet, but this worker has a library and the other none: the other one takes it
    assert todo.take({"a"}, [starting], wait=True) is None
    assert todo.take(set(), [({"a"}, True)], wait=True) == 2
    # without waiting (jobs), a worker never idles while there is work
    assert todo.take({"a"}, [(set(), True)]) == 3


def test_an_item_put_back_is_next_again():
    todo = _Todo([None, "a", None])
    first = todo.take(set(), [])
    todo.appendleft(first)
    assert todo.take(set(), []) == first == 0


def stand_ins(tmp_path: Path, names) -> Path:
    """Packages that append the importing process's pid to <name>.pids, then fail to import (their
    targets are unusable, saying so)."""
    folder = tmp_path / "shadow"
    for name in names:
        (folder / name).mkdir(parents=True)
        (folder / name / "__init__.py").write_text(
            f"import os\nwith open({str(tmp_path / (name + '.pids'))!r}, 'a') as fh:\n"
            f"    fh.write(f'{{os.getpid()}}\\n')\nraise ImportError('stand-in {name}')\n")
    return folder


def test_each_library_is_imported_by_one_worker_when_checked(tmp_path, monkeypatch):
    folder = stand_ins(tmp_path, ["bitsandbytes", "torchao"])
    shadow_in_workers(monkeypatch, folder)
    targets = [registry.find(n, "adamw") for n in ("bnb.adamw32bit", "bnb.adamw8bit", "torchao.adamw")]
    assert [library_of(t, "cpu") for t in targets] == ["bnb", "bnb", "torchao"]
    pool = workers.Pool(2, timeout=120)
    try:
        reasons = pool.probe(targets, "cpu")
    finally:
        pool.close()
    assert all(reason for reason in reasons.values()), reasons  # every stand-in refused to import
    bnb = (tmp_path / "bitsandbytes.pids").read_text().split()
    torchao = (tmp_path / "torchao.pids").read_text().split()
    # both bnb checks ran in one worker (the check's answer is kept per process: one import there)
    assert len(bnb) == 1, bnb
    assert len(torchao) == 1 and torchao[0] not in bnb, (bnb, torchao)  # the other library in the other


def test_jobs_run_out_of_order_come_back_in_work_order():
    forloop, bnb = registry.find("torch.adamw.forloop", "adamw"), registry.find("bnb.adamw32bit", "adamw")
    case = next(c for c in C.cases("adamw", ("float32",), 3) if c.name == CASE)
    pool = workers.Pool(2, timeout=120)
    try:
        usable = pool.probe([bnb], "cpu")["bnb.adamw32bit"] is None
        work = [(t, case, seed) for seed in (0, 1) for t in ([forloop, bnb] if usable else [forloop])]
        rows = list(pool.run(work, "cpu"))
    finally:
        pool.close()
    assert [(r.target, r.seed) for r in rows] == [(t.name, seed) for t, _, seed in work]
    assert all(r.status == "pass" for r in rows), [(r.target, r.status) for r in rows]


def test_a_worker_lists_the_registry_once_and_finds_what_find_finds(monkeypatch):
    monkeypatch.setattr(workers, "_LISTED", {})
    calls = []
    every = registry.every_target
    monkeypatch.setattr(registry, "every_target", lambda: calls.append(1) or every())
    for name in ("torch.adamw.forloop", "bnb.adamw8bit", "torch.adamw.forloop"):
        got, found = workers.resolve_target(name, "adamw"), registry.find(name, "adamw")
        assert (got.name, got.convention, got.options, got.dtypes) == \
            (found.name, found.convention, found.options, found.dtypes)
    assert len(calls) == 1 + 3  # one listing for the worker; find lists at every call
    with pytest.raises(LookupError, match="no.such.target"):  # an unknown name raises as find does
        workers.resolve_target("no.such.target", "adamw")


def test_jobs_run_while_a_check_imports_its_library_are_not_run_again(tmp_path, monkeypatch):
    """A worker with no check to run takes the run's unchecked jobs (Pool.probe's early); run() then
    hands back their rows, in work order, without sending them again."""
    folder = tmp_path / "shadow"
    (folder / "bitsandbytes").mkdir(parents=True)
    (folder / "bitsandbytes" / "__init__.py").write_text("import time\ntime.sleep(4)\nraise ImportError('slow')\n")
    shadow_in_workers(monkeypatch, folder)
    forloop, bnb = registry.find("torch.adamw.forloop", "adamw"), registry.find("bnb.adamw32bit", "adamw")
    case = next(c for c in C.cases("adamw", ("float32",), 3) if c.name == CASE)
    early = [(forloop, case, seed) for seed in range(4)]
    pool = workers.Pool(2, timeout=120).prestart(2)
    sent = []
    send = workers.Pool._send
    monkeypatch.setattr(workers.Pool, "_send", lambda self, w, job: sent.append(job) or send(self, w, job))
    try:
        assert "slow" in pool.probe([bnb], "cpu", early=early)["bnb.adamw32bit"]
        ran_early = len(pool.early_done)
        assert ran_early >= 1  # the other worker ran jobs while the check slept
        rows = list(pool.run(early, "cpu"))
    finally:
        pool.close()
    jobs = [j for j in sent if j[0] == "torch.adamw.forloop"]
    assert len(jobs) == len(early)  # each job sent once: early or in run(), never both
    assert [(r.target, r.seed, r.status) for r in rows] == [("torch.adamw.forloop", s, "pass") for s in range(4)]
