"""FusedLion (CPU path) against the float64 oracle, and its bookkeeping.

Lockstep, as tests/test_fused_oracle.py: every step the oracle (oracle/lion.py) starts from
the optimizer's own state and takes one step with the same grads; its float64 result is
the expected value. Tolerances are derived from the oracle's own pieces evaluated on
error-bounded arrays (oracle.compare.measuring.errmodel.Bounded, float32 unit roundoff;
oracle.compare.measuring.checks.tolerance): oracle.lion.interpolate gives the bounds of c and of the
new exp_avg, and the decayed param's bound gives the param's.

sign() is discontinuous, and Bounded has no rule for it, so the test splits the elements:
  settled    |c| exceeds c's tolerance, or c is exactly 0 because m and g are (their stored
             values are 0, so float32 computes 0 too): the kernel's sign must be the oracle's,
             and the param is held to the bound of p*(1-lr*wd) - lr*sign(c);
  ambiguous  c within rounding of 0: any of the three signs is a correct float32 result,
             and the param must be within bound of one of them.
The float32 case plants elements with c ~ 1e-8 |g| so that the second branch is exercised.
"""
from __future__ import annotations

import copy
import io
import math

import numpy as np
import pytest
import torch

import oracle
from fused import CONVENTIONS, OPTIMIZERS, FusedLion, convention_of
from fused.testing import as_f64
from oracle import GradScaling, OptState
from oracle.compare.measuring.checks import tolerance
from oracle.compare.measuring.errmodel import Bounded, unit_roundoff
from oracle.lion import LionConvention

U = unit_roundoff("float32")
SHAPES = [[(37, 5), (1000,), (3, 4, 5)], [], [(64,), (0,)]]
NEVER = (0, 3)  # an extra param of group 0 that never has a grad
ZEROS = 16  # the first elements of group 0 param 0's grads are exactly 0 on every step: c = 0
PLANTED = 8  # float32 only: elements of group 2 param 0 whose c nearly cancels
STEPS = 5
HP_KEYS = ("lr", "betas", "weight_decay", "maximize")
CASES = {
    "wd": dict(lr=1e-2, weight_decay=0.5),
    "no_wd_betas": dict(lr=3e-3, betas=(0.95, 0.98)),
    "maximize": dict(lr=1e-2, weight_decay=0.1, maximize=True),
}
WORST: dict[str, float] = {}
AMBIGUOUS: dict[str, int] = {}


def make_params(dtype, seed=0):
    gen = torch.Generator().manual_seed(seed)
    groups = [[torch.randn(s, generator=gen).to(dtype).requires_grad_() for s in shapes] for shapes in SHAPES]
    groups[NEVER[0]].append(torch.randn(7, generator=gen).to(dtype).requires_grad_())
    return groups


def set_grads(opt, groups, gen, inv_scale=None):
    for gi, ps in enumerate(groups):
        for i, p in enumerate(ps):
            if (gi, i) == NEVER:
                p.grad = None
                continue
            g = torch.randn(p.shape, generator=gen, dtype=torch.float64)
            if (gi, i) == (0, 0):
                g.view(-1)[:ZEROS] = 0.0
            m = opt.state.get(p, {}).get("exp_avg")
            if (gi, i) == (2, 0) and p.dtype == torch.float32 and m is not None:
                # g = -b1*m/(1-b1) in float64, rounded to float32: c = b1*m + (1-b1)*g ~ 2^-24 |m|
                b1 = opt.param_groups[gi]["betas"][0]
                sign = -1.0 if opt.param_groups[gi]["maximize"] else 1.0
                g.view(-1)[:PLANTED] = sign * -b1 * m.view(-1)[:PLANTED].double() / (1 - b1)
            if inv_scale is not None:
                g = g / inv_scale
            p.grad = g.to(p.dtype)


def math_copy(opt, p):
    return opt.state[p].get("master_param", p) if opt.state.get(p) else p


def snapshot(opt, groups):
    """The oracle's inputs from the optimizer now."""
    params = [[as_f64(math_copy(opt, p)) for p in ps] for ps in groups]
    grads = [[None if p.grad is None else as_f64(p.grad) for p in ps] for ps in groups]
    state = OptState([int(g["step"]) for g in opt.param_groups],
                     [[{k: as_f64(v) for k, v in opt.state.get(p, {}).items() if k != "master_param"} for p in ps]
                      for ps in groups])
    hps = [{k: g[k] for k in HP_KEYS} for g in opt.param_groups]
    return params, grads, state, hps


def bounds(p, grad, m, hp, inv_scale):
    """c, the new m and the decayed p on Bounded arrays, through the oracle's own functions."""
    exact = lambda x: Bounded(x, None, U)  # noqa: E731 (values the kernel holds exactly)
    g = exact(grad) * inv_scale if inv_scale != 1.0 else exact(grad)
    if hp["maximize"]:
        g = -g
    b1, b2 = hp["betas"]
    mb = exact(m)
    decayed = exact(p) * (1.0 - hp["lr"] * hp["weight_decay"])
    return oracle.lion.interpolate(mb, g, b1), oracle.lion.interpolate(mb, g, b2), decayed


def ratio(got, expected, tol):
    diff = np.abs(got - expected)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(diff == 0, 0.0, np.where(tol > 0, diff / tol, np.inf))


def check_param(where, got, p, grad, m, expected, hp, inv_scale, storage_m, got_m, exp_m):
    """Worst error/bound of one param and its exp_avg, and its number of ambiguous elements."""
    if got.size == 0:
        return 0.0, 0
    c, new_m, decayed = bounds(p, grad, m, hp, inv_scale)
    tol_c = tolerance(c.e, c.v, "float32", "float32")
    exact_zero = (m == 0) & (grad == 0)
    settled = (np.abs(c.v) > tol_c) | exact_zero
    lr = hp["lr"]
    # the oracle's param is the decayed p minus lr*sign(c) (same float64 operations)
    pb = decayed - lr * np.sign(c.v)
    assert np.array_equal(pb.v, expected), f"{where}: the bound's value is not the oracle's"
    r = ratio(got, expected, tolerance(pb.e, pb.v, "float32", "float32"))
    worst = float(np.max(r[settled], initial=0.0))
    k = int(np.argmax(np.where(settled, r, 0.0)))
    assert worst <= 1.0, (f"{where} param: {int(np.sum(r[settled] > 1))} settled elements out of bound; worst at "
                          f"flat {k}: got {got.flat[k]!r}, expected {expected.flat[k]!r}, c {c.v.flat[k]!r}")
    amb = ~settled
    if amb.any():
        best = np.min([ratio(got, (decayed - lr * s).v, tolerance((decayed - lr * s).e, (decayed - lr * s).v,
                                                                  "float32", "float32"))
                       for s in (-1.0, 0.0, 1.0)], axis=0)
        assert np.all(best[amb] <= 1.0), f"{where}: an ambiguous element matches no sign"
    rm = ratio(got_m, exp_m, tolerance(new_m.e, new_m.v, storage_m, "float32"))
    assert np.array_equal(new_m.v, exp_m)
    assert rm.max(initial=0.0) <= 1.0, f"{where} exp_avg: worst {rm.max():.3g} of the bound"
    return max(worst, float(rm.max(initial=0.0))), int(amb.sum())


def run_lockstep(kwargs, dtype, moment_dtype=torch.float32, inv_scale=None, steps=STEPS, desc=""):
    groups = make_params(dtype)
    opt = FusedLion([{"params": ps} for ps in groups], moment_dtype=moment_dtype, **kwargs)
    name, conv = convention_of(opt)
    gen = torch.Generator().manual_seed(1)
    storage_m = "float32" if moment_dtype == torch.float32 else "bfloat16"
    scaling = GradScaling(1.0 if inv_scale is None else inv_scale)
    for t in range(1, steps + 1):
        set_grads(opt, groups, gen, inv_scale)
        params, grads, state, hps = snapshot(opt, groups)
        exp_params, exp_state = oracle.step(name, params, grads, state, hps, conv, scaling)
        opt.step(inv_scale=inv_scale)
        assert [g["step"] for g in opt.param_groups] == [t] * len(groups)
        hp_full = [oracle.lion.validate([h])[0] for h in hps]
        for gi, ps in enumerate(groups):
            for i, p in enumerate(ps):
                where = f"{desc} {dtype} step {t} group {gi} param {i}"
                if p.grad is None:
                    assert not opt.state.get(p) and np.array_equal(as_f64(p), params[gi][i]), where
                    continue
                st = opt.state[p]
                m_old = state.params[gi][i].get("exp_avg", np.zeros_like(params[gi][i]))
                worst, amb = check_param(where, as_f64(math_copy(opt, p)), params[gi][i], grads[gi][i], m_old,
                                         exp_params[gi][i], hp_full[gi], scaling.inv_scale, storage_m,
                                         as_f64(st["exp_avg"]), exp_state.params[gi][i]["exp_avg"])
                if "master_param" in st:
                    assert torch.equal(p.detach(), st["master_param"].to(p.dtype)), f"{where}: param != master"
                assert st["exp_avg"].dtype == moment_dtype
                WORST[desc] = max(WORST.get(desc, 0.0), worst)
                AMBIGUOUS[desc] = AMBIGUOUS.get(desc, 0) + amb
    return opt, groups


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("case", list(CASES))
def test_lockstep_with_oracle(case, dtype):
    desc = f"{case}/{str(dtype)[6:]}"
    opt, groups = run_lockstep(CASES[case], dtype, desc=desc)
    if dtype == torch.float32:  # the planted near-cancellations reach the ambiguous branch
        assert AMBIGUOUS[desc] > 0
    # the exact zeros of c: the param only decays ("zero" convention), every step
    assert opt.state[groups[0][0]]["exp_avg"].view(-1)[:ZEROS].eq(0).all()


def test_bf16_moments():
    opt, groups = run_lockstep(CASES["wd"], torch.bfloat16, moment_dtype=torch.bfloat16, desc="wd/bf16 exp_avg")
    assert opt.state[groups[0][0]]["exp_avg"].dtype == torch.bfloat16


@pytest.mark.parametrize("inv_scale", [2.0 ** -10, 0.3], ids=["pow2", "inexact"])
def test_inv_scale(inv_scale):
    run_lockstep(CASES["wd"], torch.float32, inv_scale=inv_scale, desc="inv_scale")


def test_zz_report_worst():
    if not WORST:
        pytest.skip("run with the whole module to collect the figures")
    print("\nFusedLion worst error / derived tolerance (ambiguous-sign elements): "
          + ", ".join(f"{k} {v:.4f} ({AMBIGUOUS.get(k, 0)})" for k, v in sorted(WORST.items())))
    assert all(v <= 1.0 for v in WORST.values())


# ---------------------------------------------------------------- bookkeeping

def model(dtype=torch.float32, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(s, generator=gen).to(dtype).requires_grad_() for s in [(10, 3), (100,), (0,)]]


def fill_grads(params, seed):
    gen = torch.Generator().manual_seed(seed)
    for p in params:
        p.grad = torch.randn(p.shape, generator=gen).to(p.dtype)


def run(opt, params, seeds):
    for s in seeds:
        fill_grads(params, s)
        opt.step()


def test_convention_and_registry():
    assert CONVENTIONS["lion"] == LionConvention(sign_zero="zero", counter="group")
    assert OPTIMIZERS["lion"] == (FusedLion, {})
    assert convention_of(FusedLion(model())) == ("lion", CONVENTIONS["lion"])
    assert FusedLion(model()).defaults["lr"] == oracle.SPECS["lion"].defaults["lr"]
    assert tuple(FusedLion(model()).defaults["betas"]) == oracle.SPECS["lion"].defaults["betas"]


@pytest.mark.parametrize("bad,match", [
    (dict(lr=-1.0), "group 1: lr"), (dict(lr=math.nan), "group 1: lr"), (dict(weight_decay=-0.1), "group 1: weight_decay"),
    (dict(betas=(1.0, 0.99)), r"group 1: betas\[0\]"), (dict(betas=(0.9, -0.1)), r"group 1: betas\[1\]"),
    (dict(betas=(math.nan, 0.9)), r"group 1: betas\[0\]"), (dict(betas=(0.9,)), "group 1: betas must be a pair"),
    (dict(amsgrad=True), "group 1: FusedLion does not support amsgrad"),
    (dict(moment_dtype=torch.float16), "group 1: moment_dtype"),
])
def test_bad_hyperparameters_name_the_group(bad, match):
    with pytest.raises(ValueError, match=match):
        FusedLion([{"params": model()}, {"params": model(seed=1), **bad}])


def test_exact_zero_grad_only_decays():
    """c = 0 (m = 0, g = 0): sign 0, so p <- p*(1 - lr*wd), one float32 rounding, bit for bit."""
    params = model()
    before = [p.detach().clone() for p in params]
    opt = FusedLion(params, lr=0.1, weight_decay=0.3)
    for p in params:
        p.grad = torch.zeros_like(p)
    opt.step()
    factor = torch.tensor(1.0 - 0.1 * 0.3, dtype=torch.float32)
    for p, b in zip(params, before):
        assert torch.equal(p.detach(), b * factor)
        assert opt.state[p]["exp_avg"].eq(0).all()


def test_nan_momentum_makes_a_nan_param():
    """np.sign semantics (NaN stays NaN), not torch.sign's (NaN -> 0)."""
    params = model()
    opt = FusedLion(params, lr=0.1)
    run(opt, params, [0])
    opt.state[params[1]]["exp_avg"][5] = math.nan
    run(opt, params, [1])
    assert torch.isnan(params[1][5]) and torch.isfinite(params[1][:5]).all()


def test_maximize_is_descent_on_the_negated_grad():
    a, b = model(), model()
    opt_a, opt_b = FusedLion(a, lr=0.1, weight_decay=0.1, maximize=True), FusedLion(b, lr=0.1, weight_decay=0.1)
    for s in range(3):
        fill_grads(a, s)
        fill_grads(b, s)
        for p in b:
            p.grad.neg_()
        opt_a.step()
        opt_b.step()
    assert all(torch.equal(p, q) for p, q in zip(a, b))


def test_master_weights():
    params = model(torch.bfloat16)
    opt = FusedLion(params, lr=0.1)
    run(opt, params, range(2))
    st = opt.state[params[0]]
    assert set(st) == {"master_param", "exp_avg"}
    assert st["master_param"].dtype == torch.float32 and st["exp_avg"].dtype == torch.float32
    assert torch.equal(params[0].detach(), st["master_param"].to(torch.bfloat16))
    plain = model(torch.bfloat16)
    opt = FusedLion(plain, lr=0.1, master_weights=False)
    run(opt, plain, range(2))
    assert set(opt.state[plain[0]]) == {"exp_avg"}


def test_counters_found_inf_and_state_creation():
    a, b = model(), model(seed=1)
    fill_grads(a, 0)
    opt = FusedLion([{"params": a}, {"params": []}, {"params": b}])
    opt.step(found_inf=True)
    assert not any(opt.state.values()) and [g["step"] for g in opt.param_groups] == [0, 0, 0]
    for _ in range(3):
        opt.step()
    assert [g["step"] for g in opt.param_groups] == [3, 3, 3]
    assert all(not opt.state.get(p) for p in b)
    values = [p.detach().clone() for p in a]
    moments = [opt.state[p]["exp_avg"].clone() for p in a]
    opt.step(found_inf=torch.tensor(1.0), inv_scale=0.5)
    assert [g["step"] for g in opt.param_groups] == [3, 3, 3]
    assert all(torch.equal(p, v) for p, v in zip(a, values))
    assert all(torch.equal(opt.state[p]["exp_avg"], v) for p, v in zip(a, moments))


def test_capturable_on_cpu_keeps_tensor_counters_and_the_same_result():
    params, ref_params = model(), model()
    opt = FusedLion([{"params": params}, {"params": []}], capturable=True, lr=0.1, weight_decay=0.1)
    ref = FusedLion(ref_params, lr=0.1, weight_decay=0.1)
    run(opt, params, range(2))
    run(ref, ref_params, range(2))
    assert all(isinstance(g["step"], torch.Tensor) and int(g["step"]) == 2 for g in opt.param_groups)
    assert all(torch.equal(p, q) for p, q in zip(params, ref_params))


@pytest.mark.parametrize("moment_dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
def test_checkpoint_round_trip_continues_bit_exactly(dtype, moment_dtype):
    def make():
        params = model(dtype)
        groups = [{"params": params[:1]}, {"params": []}, {"params": params[1:], "lr": 3e-3}]
        return params, FusedLion(groups, lr=1e-2, weight_decay=0.1, moment_dtype=moment_dtype)

    ref_params, ref = make()
    run(ref, ref_params, range(5))
    params, opt = make()
    run(opt, params, range(2))
    buf = io.BytesIO()
    torch.save({"model": [p.detach() for p in params], "optim": opt.state_dict()}, buf)
    buf.seek(0)
    saved = torch.load(buf, map_location="cpu")
    params2, opt2 = make()
    with torch.no_grad():
        for p, v in zip(params2, saved["model"]):
            p.copy_(v)
    opt2.load_state_dict(saved["optim"])
    assert [g["step"] for g in opt2.param_groups] == [2, 2, 2]
    for p, q in zip(params, params2):
        for key, v in opt.state[p].items():
            assert opt2.state[q][key].dtype == v.dtype and torch.equal(opt2.state[q][key], v), key
    run(opt2, params2, range(2, 5))
    for p, q in zip(ref_params, params2):
        assert torch.equal(p, q)
        for key, v in ref.state[p].items():
            assert torch.equal(opt2.state[q][key], v), key


def test_checkpoint_missing_moment_is_refused_whole():
    params = model()
    opt = FusedLion(params)
    run(opt, params, range(2))
    sd = copy.deepcopy(opt.state_dict())
    before = copy.deepcopy(opt.state_dict())
    del sd["state"][1]["exp_avg"]
    sd["state"][1]["momentum_buffer"] = before["state"][1]["exp_avg"]
    with pytest.raises(ValueError, match=r"group 0 param 1: state is missing \['exp_avg'\]"):
        opt.load_state_dict(sd)
    after = opt.state_dict()
    assert all(torch.equal(after["state"][k]["exp_avg"], v["exp_avg"]) for k, v in before["state"].items())


def test_bad_grad_raises_before_anything_changes():
    params = model()
    opt = FusedLion([{"params": params[:1]}, {"params": params[1:]}], lr=0.1)
    run(opt, params, [0])
    values = [p.detach().clone() for p in params]
    moments = {p: opt.state[p]["exp_avg"].clone() for p in params}
    fill_grads(params, 1)
    params[1].grad = params[1].grad.to_sparse()
    with pytest.raises(RuntimeError, match="group 1 param 0: sparse"):
        opt.step()
    assert all(torch.equal(p, v) for p, v in zip(params, values))
    assert all(torch.equal(opt.state[p]["exp_avg"], v) for p, v in moments.items())
    assert [g["step"] for g in opt.param_groups] == [1, 1]
