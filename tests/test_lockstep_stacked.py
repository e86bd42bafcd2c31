"""A checked step and its trajectory share one oracle call (Lockstep._stacked: the trajectory's groups
stacked after the step's, alike groups joined by oracle.common.drive), and a step's state before it is
the previous step's `after` (not read again). Neither may change a row: every check's findings, worst
element, series and histogram are what the separate calls and the second read give, for passing and
failing targets, single and mixed-precision storage, master weights, two groups and every optimizer
the registry's torch targets step."""
import json

import pytest

from oracle.compare.checking import cases as C
from oracle.compare.checking import case_run
from oracle.compare.checking.lockstep import Lockstep
from oracle.compare.registry import find
from oracle.compare.reporting.report import result_dict
from oracle.compare.targets.user_impl import load_impl

CASES = {
    "adamw": ["adamw/fp32/wd0.1/single/normal", "adamw/bf16/wd0.1/single/normal",
              "adamw/fp32/wd0/two_groups/tiny_grads", "adamw/fp16/defaults/single/zero_grads"],
    "adagrad": ["adagrad/fp32/*/single/*", "adagrad/bf16/*/single/*"],
    "rprop": ["rprop/bf16/*/single/*"],
    "lamb": ["lamb/fp32/*/single/*"],
}


def _row(target, case) -> str:
    doc = result_dict(case_run.run_case(target, case, 0), "cpu")
    doc.pop("seconds", None)
    return json.dumps(doc, sort_keys=True, default=str)


def _separately(monkeypatch):
    """The reference path: the step and its trajectory in their own calls, the state read before every step."""
    step = Lockstep.step
    monkeypatch.setattr(Lockstep, "step", lambda self, k, grads, scaling=None, do_step=None, before=None, rider=None:
                        step(self, k, grads, scaling, do_step))


def _cases(optimizer, pattern):
    return C.cases(optimizer, ("float32", "bfloat16", "float16"), 20, pattern)[:2]


@pytest.mark.parametrize("target_name", ["torch.adamw.forloop", "fused.adamw", "impl:tests.broken.adamw:OffByOneAdamW"])
def test_adamw_rows_are_unchanged(target_name, monkeypatch):
    target = (load_impl(target_name[len("impl:"):], optimizer="adamw", inferred=False) if target_name.startswith("impl:")
              else find(target_name, "adamw"))
    for name in CASES["adamw"]:
        case = C.find_case(name, 20)
        stacked = _row(target, case)
        with monkeypatch.context() as m:
            _separately(m)
            assert _row(target, case) == stacked, name


@pytest.mark.parametrize("optimizer,target_name", [("adagrad", "torch.adagrad.forloop"), ("rprop", "torch.rprop.forloop"),
                                                   ("lamb", "fused.lamb")])
def test_other_optimizers_rows_are_unchanged(optimizer, target_name, monkeypatch):
    """LAMB reduces (norms): never stacked, so this also checks the fallback."""
    target = find(target_name, optimizer)
    for pattern in CASES[optimizer]:
        for case in _cases(optimizer, pattern):
            stacked = _row(target, case)
            with monkeypatch.context() as m:
                _separately(m)
                assert _row(target, case) == stacked, case.name


def test_one_call_per_step_and_one_read(monkeypatch):
    """Not vacuous: the trajectory takes the lockstep call's result at every checked step, and the
    target's state is read once per step (and once more at the end)."""
    target = find("torch.adamw.forloop", "adamw")
    case = C.find_case("adamw/fp32/wd0.1/single/normal", 20)
    calls, reads = [], []
    real_step = case_run.Trajectory.step

    def spy(self, *a, **k):
        calls.append(self.stepped is not None)
        return real_step(self, *a, **k)
    monkeypatch.setattr(case_run.Trajectory, "step", spy)
    real_read = Lockstep.read
    monkeypatch.setattr(Lockstep, "read", lambda self: reads.append(1) or real_read(self))
    assert case_run.run_case(target, case, 0).status == "pass"
    assert calls == [True] * case.steps
    assert len(reads) == case.steps + 1


def test_the_trajectory_keeps_the_state_format_of_its_params():
    """Its params carry the state's unit roundoff at every step, not only the first (what Rprop's filled
    etas round in), as the lockstep's do."""
    target = find("torch.rprop.forloop", "rprop")
    case = _cases("rprop", "rprop/bf16/*/single/*")[0]
    traj = case_run.Trajectory(target, case, 0)
    first = {p.state_u for group in traj.params for p in group}
    case_run.run_case(target, case, 0)  # sanity: the case runs
    params, state = traj.spec.step(traj.params, traj.bounded(C.grads_at(case, 0, 1)), traj.state, traj.hps,
                                   traj.convention)
    snap = target.read(case_run.build(target, case, case_run.make_params(case, 0, "cpu")))
    stored, _ = case_run.trajectory_store(params, state, snap, traj.compute, traj.state_u)
    assert first == {traj.state_u} and {p.state_u for group in stored for p in group} == first
