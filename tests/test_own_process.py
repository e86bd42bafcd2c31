"""A target whose library keeps state per process rather than per optimizer (DeepSpeed's CPU
FusedAdam: one native bias-correction object per mode for every instance) declares `own_process`:
each of its jobs runs in a child forked for it alone, so no job sees another's history and the
verdict does not depend on which jobs a worker ran before (or on --jobs)."""
from __future__ import annotations

import dataclasses
import os
import signal

import pytest
import torch

from oracle.compare.isolation import processes as procs
from oracle.compare.running.driver import run_job
from oracle.compare.registry import find

CASE = "adamw/fp32/wd0.1/single/normal"
STEPPED: list = []  # one entry per step any instance took in this process
ONE_JOB: list = []  # how many steps one job takes (measured first)


class RemembersItsProcess(torch.optim.AdamW):
    """AdamW until this process has taken more steps than one job takes; every instance built after
    that steps with twice its lr: a stand-in for a library whose state outlives the optimizer object."""

    def __init__(self, groups, **kw):
        if ONE_JOB and len(STEPPED) >= ONE_JOB[0]:
            groups = [{**g, "lr": g.get("lr", kw.get("lr", 1e-3)) * 2} for g in groups]
        super().__init__(groups, **kw)

    def step(self, closure=None):
        STEPPED.append(True)
        return super().step(closure)


def target(own_process: str):
    base = find("torch.adamw.forloop", "adamw")
    return dataclasses.replace(base, name="test.remembers", own_process=own_process,
                               make=lambda groups, defaults: RemembersItsProcess(groups, **defaults))


@pytest.fixture(autouse=True)
def fresh_process_state():
    STEPPED.clear()
    if not ONE_JOB:
        assert run_job(target(""), CASE, 0, 20, "cpu", teach=False).status == "pass"
        ONE_JOB.append(len(STEPPED))
        STEPPED.clear()
    yield
    STEPPED.clear()


def test_without_own_process_the_second_job_sees_the_first():
    t = target("")
    first, second = (run_job(t, CASE, 0, 20, "cpu", teach=False) for _ in range(2))
    assert first.status == "pass" and second.status == "fail"  # the check can fail: the stand-in works


def test_own_process_gives_every_job_a_fresh_process():
    t = target("keeps state per process (test)")
    first, second = (run_job(t, CASE, 0, 20, "cpu", teach=False) for _ in range(2))
    assert first.status == second.status == "pass", (first.reason, second.reason)
    assert not STEPPED, "the job stepped in this process, not in its own"
    assert first.checks.keys() == second.checks.keys()
    assert all((first.checks[n].worst_error, first.checks[n].compared) == (second.checks[n].worst_error, second.checks[n].compared) for n in first.checks)


def test_in_own_process_returns_raises_and_reports_a_death():
    assert procs.in_own_process(lambda: {"answer": 42}) == {"answer": 42}
    with pytest.raises(RuntimeError, match="KeyError: 'state1'"):
        procs.in_own_process(lambda: {}["state1"])
    with pytest.raises(procs.OwnProcessDied, match="status 3"):
        procs.in_own_process(lambda: os._exit(3))
    with pytest.raises(procs.OwnProcessDied, match="signal SIGKILL"):
        procs.in_own_process(lambda: os.kill(os.getpid(), signal.SIGKILL))


def test_deepspeed_cpu_fused_adam_declares_it():
    for name, opt in (("deepspeed.fused_adam.cpu.adam", "adam"), ("deepspeed.fused_adam.cpu.adamw", "adamw")):
        assert "process-wide" in find(name, opt).own_process
