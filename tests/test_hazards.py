"""Precision hazards, the finite check and guarded buffers, against hand-computed roundings."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from oracle.adam import TORCH_ADAMW
from oracle.compare.checking import hazards as H
from oracle.compare.measuring.checks import CheckResult
from oracle.compare.checking.finite import check_finite, culprit
from oracle.compare.checking.guards import PAD, allocate
from oracle.common import OptState


def _by_name(found):
    return {h.quantity: h for h in found}


def test_eps_1e8_rounds_to_zero_in_float16_only():
    # float16's smallest subnormal is 2^-24 = 5.96e-8; 1e-8 is below half of it
    found = _by_name(H.analyze("adam", [{"lr": 1e-3, "eps": 1e-8}], TORCH_ADAMW, "float16", 20))
    assert found["eps"].kind == "rounds to 0" and found["eps"].stored == 0.0
    assert "eps" not in _by_name(H.analyze("adam", [{"eps": 1e-8}], TORCH_ADAMW, "bfloat16", 20))


def test_decoupled_decay_lost_in_bfloat16():
    # 1 - 1e-5: bfloat16's spacing just below 1 is 2^-8, so 1 - 1e-5 rounds to 1
    found = _by_name(H.analyze("adamw", [{"lr": 1e-3, "weight_decay": 1e-2}], TORCH_ADAMW, "bfloat16", 20))
    h = found["1 - lr*wd"]
    assert h.kind == "rounds to 1" and h.stored == 1.0 and h.affects == "decay"
    assert "decoupled decay is lost" in h.consequence and "bfloat16" in h.consequence
    # beta2 = 0.999 = 1 - 0.001 < 1 - 2^-9: rounds to 1 too
    assert found["beta2"].kind == "rounds to 1"


def test_half_the_bits_lost():
    # float16 holds 0.999 as 1 - 2^-10 = 0.9990234375: 1 - beta2 keeps log2(0.001 / 2^-11) + 1 = 2 bits of 11
    found = _by_name(H.analyze("adam", [{"betas": (0.9, 0.999)}], TORCH_ADAMW, "float16", 20))
    assert found["beta2"].kind == "loses more than half its bits"
    assert found["beta2"].stored == 0.9990234375
    assert H.complement_bits(0.999, "float16") == pytest.approx(np.log2(0.001 / 2 ** -11) + 1)
    # eps = 1e-6 in float16: a subnormal (exponent -20 < -14) with 11 - 6 = 5 significand bits
    assert H.significand_bits(1e-6, "float16") == 5
    # float32 holds 1e-8 with every bit: no hazard
    assert "eps" not in _by_name(H.analyze("adam", [{"eps": 1e-8}], TORCH_ADAMW, "float32", 20))


def test_measured_decay_fraction_of_a_path_losing_decay():
    from oracle.compare.checking import cases as C
    from oracle.compare.registry import builtin_targets
    from oracle.compare.checking.case_run import free_run
    target = next(t for t in builtin_targets() if t.name == "torch.adamw.forloop")
    case = C.find_case("adamw/bf16/defaults/single/zero_grads", steps=5)
    effect = H.measure(target, case, 0, "cpu", "decay", free_run)
    # bfloat16 p * (1 - 1e-5) rounds back to p: none of the oracle's decay is applied
    assert effect["of"] == "weight decay" and effect["fraction"] == pytest.approx(0.0, abs=1e-6)
    ok = C.find_case("adamw/fp32/wd0.1/empty_group/large_decay", steps=5)
    assert H.measure(target, ok, 0, "cpu", "decay", free_run)["fraction"] == pytest.approx(1.0, rel=1e-3)


class _Snap:
    def __init__(self, params, state):
        self.params, self.state = params, state


def test_finite_names_the_operation():
    import oracle
    spec = oracle.SPECS["adamw"]
    hp = spec.validate([{"lr": 1e-3, "eps": 1e-8, "weight_decay": 0.0}])
    p, g = [[np.array([0.5, 1.0])]], [[np.array([0.0, 0.5])]]
    why = culprit(spec, TORCH_ADAMW, hp, p, g, OptState.empty(p), "float16", (0, 0, (0,)))
    assert why is not None and "eps=1e-08 -> 0 in float16" in why and " / " in why and "nan" in why
    # float32 keeps eps: the same evaluation stays finite
    assert culprit(spec, TORCH_ADAMW, hp, p, g, OptState.empty(p), "float32", (0, 0, (0,))) is None
    res = CheckResult("finite")
    before = _Snap(p, [[{}]])
    after = _Snap([[np.array([np.nan, 0.9])]], [[{"exp_avg": np.zeros(2)}]])
    check_finite(res, 1, before, after, g, lambda gi, i, idx: why)
    assert not res.passed and res.findings[0].index == (0,) and "p=0.5, g=0" in res.findings[0].detail
    assert why in res.findings[0].detail
    # non-finite inputs: nothing to judge
    res2 = CheckResult("finite")
    check_finite(res2, 1, _Snap([[np.array([np.inf, 1.0])]], [[{}]]), after, g, lambda *a: None)
    assert res2.passed


@pytest.mark.parametrize("layout", ["contiguous", "strided", "transposed"])
def test_guard_catches_a_planted_write(layout):
    x = np.arange(12, dtype=np.float64).reshape(3, 4) if layout == "transposed" else np.arange(5.0)
    view, guard = allocate(x, torch.float32, "cpu", "group 0 param 0 param", layout)
    assert torch.equal(view, torch.tensor(x, dtype=torch.float32))
    res = CheckResult("bounds")
    with torch.no_grad():
        view.mul_(2.0)  # in bounds: no finding
    guard.check(res, 1)
    assert res.passed and res.compared >= 2 * PAD
    span = view.storage_offset() + sum((n - 1) * s for n, s in zip(view.shape, view.stride())) + 1
    with torch.no_grad():
        guard.buffer[span] = 7.0  # one past the view's last element
    guard.check(res, 2)
    assert not res.passed and res.findings[0].step == 2 and "wrote outside the tensor's view" in res.findings[0].detail
    assert res.findings[0].index == (span - view.storage_offset(),)


def test_guards_of_one_layout_share_their_reference_and_each_sees_only_its_own_writes():
    (a, ga), (b, gb) = (allocate(np.ones(4), torch.bfloat16, "cpu", n, "strided") for n in ("a", "b"))
    assert ga.reference is gb.reference  # read once per layout and dtype (every guard holds SENTINEL)
    with torch.no_grad():
        ga.buffer[a.storage_offset() + 1] = 0.0  # a's gap only
    res_a, res_b = CheckResult("bounds"), CheckResult("bounds")
    ga.check(res_a, 1)
    gb.check(res_b, 1)
    assert not res_a.passed and res_b.passed
    (c, gc), = [allocate(np.ones(4), torch.float32, "cpu", "c", "strided")]
    assert gc.reference is not ga.reference and not gc.changed()  # another dtype: its own bits


def test_guard_sees_a_write_into_a_gap_and_a_changed_input():
    view, guard = allocate(np.ones(4), torch.bfloat16, "cpu", "g", "strided")
    assert view.stride() == (2,)
    before = view.clone()
    res = CheckResult("bounds")
    with torch.no_grad():
        guard.buffer[view.storage_offset() + 1] = 0.0  # the gap after element 0
    guard.check(res, 1)
    assert not res.passed and res.findings[0].index == (1,)
    res2 = CheckResult("inputs_unchanged")
    with torch.no_grad():
        view[2] = 3.0
    guard.check_view(res2, 1, before)
    assert not res2.passed and res2.findings[0].index == (2,) and res2.findings[0].got == 3.0


def test_relative_error_of_a_constant_near_one_by_hand():
    # float32 spacing just below 1 is 2^-24; 1e-5 = 167.77 of them, held as 168: 1 - lr*wd is 168 * 2^-24
    found = _by_name(H.analyze("adamw", [{"lr": 1e-3, "weight_decay": 1e-2}], TORCH_ADAMW, "float32", 20))
    h = found["1 - lr*wd"]
    assert h.kind == "loses more than half its bits" and not h.changes_results
    assert 1.0 - h.stored == 168 * 2.0 ** -24
    # 1 - lr*wd is itself a float64 sum, within 2^-53 of 1 - 1e-5: about 1e-11 relative to 1e-5
    assert h.relative_error == pytest.approx(168 * 2.0 ** -24 / 1e-5 - 1, abs=1e-10)
    assert "off by 0.14%" in h.consequence and "8 of 24 bits kept" in h.consequence
    # a constant that rounds away has lost all of it
    assert _by_name(H.analyze("adamw", [{"lr": 1e-3, "weight_decay": 1e-2}], TORCH_ADAMW, "bfloat16",
                              20))["1 - lr*wd"].relative_error == 1.0


def _results(targets, dtype, compute, hparams, effect=None):
    """Result dicts as report.json holds them: one case per target, its hazards in `compute`."""
    rows = []
    for t in targets:
        hz = [h.as_dict() for h in H.analyze("adamw", [hparams], TORCH_ADAMW, compute, 20)]
        for h in hz:
            if effect is not None and h["changes_results"]:
                h["effect"] = {"of": "weight decay", "steps": 20, "fraction": effect[t]}
        rows.append({"target": t, "optimizer": "adamw", "dtype": dtype, "case": f"adamw/{dtype}/defaults/single/x",
                     "hazards": hz})
    return rows


def _md_hazard_lines(results):
    from oracle.compare.reporting.report import markdown
    from oracle.compare.checking.summary import jsonable
    doc = {"created": "now", "complete": True, "versions": {}, "argv": [], "summary": [], "results": [],
           "hazards": jsonable(H.summarize(results))}
    md = markdown(doc)
    section = md[md.index("## Precision hazards"):].split("\n## ")[0]
    return [ln for ln in section.splitlines() if ln.startswith("- ")]


def test_report_md_folds_small_precision_losses_across_targets():
    defaults = {"lr": 1e-3, "weight_decay": 1e-2, "betas": (0.9, 0.999), "eps": 1e-8}
    names = [f"path{i}" for i in range(6)]
    results = _results(names, "fp32", "float32", defaults)
    assert len(H.summarize(results)) == 6  # one entry per target in report.json
    lines = _md_hazard_lines(results)
    assert len(lines) == 1 and "1 more constant(s) in 6 target(s)" in lines[0] and "off by 0.14%" in lines[0]


def test_report_md_one_line_per_lost_constant_with_every_targets_effect():
    defaults = {"lr": 1e-3, "weight_decay": 1e-2, "betas": (0.9, 0.999), "eps": 1e-8}
    results = _results(["a", "b"], "bf16", "bfloat16", defaults, effect={"a": 0.0, "b": 0.25})
    lines = _md_hazard_lines(results)
    decay = [ln for ln in lines if "1 - lr*wd = 0.99999 rounds to 1 in bfloat16" in ln]
    assert len(decay) == 1 and "2 target(s): a, b" in decay[0]
    assert "applied 0 to 0.25 of the oracle's weight decay over 20 steps" in decay[0]
    # beta2 = 0.999 rounds to 1 in bfloat16 too: its own line, and nothing is folded
    assert any("beta2 = 0.999 rounds to 1" in ln for ln in lines) and not any("more constant(s)" in ln for ln in lines)


def _float64_control_results():
    """Float64AdamW (float64 math, one rounding on store, declared as float32 math) on the library
    defaults in every dtype (where the hazards are) and the scenarios that hold guarded buffers."""
    from oracle.compare.running.driver import jobs_for, rows, run_job
    from oracle.mutants import target_for
    from oracle.mutants.base import Float64AdamW
    target = target_for(Float64AdamW)
    jobs = jobs_for(target, ("float32", "bfloat16", "float16"), 20, [0], "*/defaults/*", (), matrix=True)
    jobs += jobs_for(target, (), 20, [0], None, ("inputs_unchanged", "irregular"), matrix=False)
    return [r for _, job, _ in jobs for r in rows(run_job(target, job.name, 0, 20, "cpu", teach=False))]


def test_float64_internal_control_passes_every_check():
    results = _float64_control_results()
    checks = {name for r in results for name in r.checks}
    assert {"lockstep", "finite", "bounds", "trajectory"} <= checks
    assert {"float32", "bfloat16", "float16"} <= {r.dtype for r in results if r.case.startswith("adamw/")}
    for name in ("finite", "bounds"):
        assert sum(r.checks[name].compared for r in results if name in r.checks) > 0, name
    for r in results:
        failing = {name: c.findings[:1] or c.note for name, c in r.checks.items() if not c.passed}
        assert r.status == "pass" and not failing, (r.case, r.reason, failing)
    # the declared float32 math has hazards (1 - lr*wd keeps 8 of 24 bits): reported, failing nothing
    hazards = [h for r in results for h in r.hazards]
    assert any(h["quantity"] == "1 - lr*wd" and h["compute"] == "float32" for h in hazards)


def test_hazards_follow_declared_roles_not_names(monkeypatch):
    """A second moment's decay rate is held alike whatever the optimizer calls it: a toy spec naming it
    alpha (as RMSprop does) gets beta2's hazards, under its own name."""
    import dataclasses

    import oracle
    from oracle.spec import GUARD, NO_PRECISION_ROLE, SECOND_MOMENT_RATE, STEP_SIZE, Role
    adam = oracle.SPECS["adam"]
    toy = dataclasses.replace(adam, name="toy", defaults={"lr": 1e-2, "alpha": 0.99, "eps": 1e-8, "centered": False},
                              roles={"lr": Role(STEP_SIZE), "alpha": Role(SECOND_MOMENT_RATE), "eps": Role(GUARD),
                                     "centered": Role(NO_PRECISION_ROLE)},
                              validate=lambda hps: [{"lr": 1e-2, "alpha": 0.99, "eps": 1e-8, "centered": False, **h}
                                                    for h in hps])
    monkeypatch.setitem(oracle.SPECS, "toy", toy)
    found = _by_name(H.analyze("toy", [{"alpha": 0.9999}], TORCH_ADAMW, "bfloat16", 20))
    assert found["alpha"].kind == "rounds to 1" and "second moment stops following" in found["alpha"].consequence
    assert "1 - alpha" not in found  # 1e-4 is a normal bfloat16 number
    assert set(found) == {"alpha"}
    adam_found = _by_name(H.analyze("adam", [{"betas": (0.9, 0.9999)}], TORCH_ADAMW, "bfloat16", 20))
    assert adam_found["beta2"].kind == found["alpha"].kind and adam_found["beta2"].stored == found["alpha"].stored


def test_every_hyperparameter_has_a_role():
    import dataclasses

    import oracle
    from oracle.spec import ROLES, Role
    for spec in oracle.SPECS.values():
        for name, role in spec.roles.items():
            assert all(r.what in ROLES for r in (role if isinstance(role, tuple) else (role,))), (spec.name, name)
    adam = oracle.SPECS["adam"]
    with pytest.raises(ValueError, match="no role for eps"):
        dataclasses.replace(adam, roles={k: v for k, v in adam.roles.items() if k != "eps"})
    with pytest.raises(ValueError, match="unknown hyperparameter role"):
        Role("decay of the second moment")


def test_decoupled_decay_is_a_hazard_wherever_the_convention_decouples_it():
    # LAMB's decoupled form multiplies p by (1 - lr*wd) like AdamW's (oracle.lamb); the L2 form does not
    from oracle.lamb import APEX_LAMB, PYTORCH_OPTIMIZER_LAMB
    hp = [{"lr": 1e-3, "weight_decay": 1e-2}]
    assert "1 - lr*wd" in _by_name(H.analyze("lamb", hp, PYTORCH_OPTIMIZER_LAMB, "bfloat16", 20))
    assert "1 - lr*wd" not in _by_name(H.analyze("lamb", hp, APEX_LAMB, "bfloat16", 20))
