"""FusedSGD (CPU path) against the float64 oracle, and its bookkeeping.

Lockstep, as tests/test_fused_oracle.py: every step the oracle starts from the
optimizer's own state (the fp32 param or master, the buffers) and takes one step
with the same grads. The tolerance is derived, not tuned: the oracle's own update
evaluated on error-bounded arrays (oracle.compare.measuring.errmodel.Bounded, float32 unit
roundoff) gives each element's bound, oracle.compare.measuring.checks.tolerance doubles it
for reordering and adds the store rounding of a bf16 buffer.

Layout: three groups; shapes of rank 1-3, a param that never has a grad, one whose
grad is missing on the first steps (its buffer starts later, in the same bucket as
started ones: the kernel's first-step call and its later-step call in one step), an
empty group, and a zero-numel tensor last.
"""
from __future__ import annotations

import copy
import io
import math

import numpy as np
import pytest
import torch

import oracle
from fused import CONVENTIONS, OPTIMIZERS, FusedAdagrad, FusedAdam, FusedLAMB, FusedLion, FusedSGD, convention_of
from fused.testing import as_f64
from oracle import GradScaling, OptState
from oracle.compare.measuring.checks import tolerance
from oracle.compare.measuring.errmodel import Bounded, unit_roundoff
from oracle.sgd import SGDConvention

U = unit_roundoff("float32")
SHAPES = [[(37, 5), (1000,), (3, 4, 5)], [], [(64,), (0,)]]
NEVER = (0, 3)  # an extra param of group 0 that never has a grad
LATE = (2, 0)  # no grad on steps 1-2: its buffer starts on step 3
STEPS = 5
HP_KEYS = ("lr", "momentum", "dampening", "weight_decay", "nesterov", "maximize")

CASES = {
    "plain_l2": dict(lr=0.1, weight_decay=0.1),
    "momentum_dampening": dict(lr=0.1, momentum=0.9, dampening=0.1, weight_decay=0.1),
    "nesterov": dict(lr=0.05, momentum=0.9, nesterov=True, weight_decay=0.05),
    "maximize_momentum": dict(lr=0.1, momentum=0.5, maximize=True),
    "maximize_plain": dict(lr=0.1, maximize=True, weight_decay=0.01),
}
WORST: dict[str, float] = {}


def make_params(dtype, seed=0):
    gen = torch.Generator().manual_seed(seed)
    groups = [[torch.randn(s, generator=gen).to(dtype).requires_grad_() for s in shapes] for shapes in SHAPES]
    groups[NEVER[0]].append(torch.randn(7, generator=gen).to(dtype).requires_grad_())
    return groups


def set_grads(groups, gen, step, inv_scale=None):
    for gi, ps in enumerate(groups):
        for i, p in enumerate(ps):
            g = torch.randn(p.shape, generator=gen)
            if inv_scale is not None:  # scaled grads, as a GradScaler leaves them
                g = g / inv_scale
            missing = (gi, i) == NEVER or ((gi, i) == LATE and step <= 2)
            p.grad = None if missing else g.to(p.dtype)


def math_copy(opt, p):
    """What the kernels update: the fp32 master, or the param itself."""
    return opt.state[p].get("master_param", p) if opt.state.get(p) else p


def bounded_oracle_step(opt, groups, inv_scale):
    """The oracle's step from the optimizer's state now, on float32-error-bounded arrays."""
    name, conv = convention_of(opt)
    exact = lambda t: Bounded(as_f64(t), None, U)  # noqa: E731 (values the kernel holds exactly)
    params = [[exact(math_copy(opt, p)) for p in ps] for ps in groups]
    grads = [[None if p.grad is None else exact(p.grad) for p in ps] for ps in groups]
    state = OptState([int(g["step"]) for g in opt.param_groups],
                     [[{k: exact(v) for k, v in opt.state.get(p, {}).items() if k != "master_param"} for p in ps]
                      for ps in groups])
    hps = [{k: g[k] for k in HP_KEYS} for g in opt.param_groups]
    scaling = GradScaling(1.0 if inv_scale is None else inv_scale)
    with np.errstate(all="ignore"):
        return oracle.step(name, params, grads, state, hps, conv, scaling)


def check_close(what, got, exp: Bounded, storage):
    """|got - expected| within the derived tolerance, element by element; returns the worst ratio."""
    g = as_f64(got) if isinstance(got, torch.Tensor) else np.asarray(got, np.float64)
    assert g.shape == exp.v.shape, f"{what}: shape {g.shape} != {exp.v.shape}"
    if g.size == 0:
        return 0.0
    tol = tolerance(exp.e, exp.v, storage, "float32")
    diff = np.abs(g - exp.v)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(diff == 0, 0.0, np.where(tol > 0, diff / tol, np.inf))
    worst = float(ratio.max())
    k = int(np.argmax(ratio))
    assert worst <= 1.0, (f"{what}: {int(np.sum(ratio > 1))}/{g.size} elements out of bound; worst at flat {k}: "
                          f"got {g.flat[k]!r}, expected {exp.v.flat[k]!r}, tolerance {tol.flat[k]!r}")
    return worst


def run_lockstep(kwargs, dtype, moment_dtype=torch.float32, inv_scale=None, steps=STEPS, desc=""):
    groups = make_params(dtype)
    opt = FusedSGD([{"params": ps} for ps in groups], moment_dtype=moment_dtype, **kwargs)
    gen = torch.Generator().manual_seed(1)
    moments = "float32" if moment_dtype == torch.float32 else "bfloat16"
    for t in range(1, steps + 1):
        set_grads(groups, gen, t, inv_scale)
        before = [[as_f64(math_copy(opt, p)) for p in ps] for ps in groups]
        had_buffer = {id(p): "momentum_buffer" in opt.state.get(p, {}) for ps in groups for p in ps}
        exp_params, exp_state = bounded_oracle_step(opt, groups, inv_scale)
        opt.step(inv_scale=inv_scale)
        assert [g["step"] for g in opt.param_groups] == [t] * len(groups), "group counters"
        for gi, ps in enumerate(groups):
            for i, p in enumerate(ps):
                where = f"{desc} {dtype} step {t} group {gi} param {i}"
                st = opt.state.get(p, {})
                if p.grad is None:
                    assert np.array_equal(as_f64(math_copy(opt, p)), before[gi][i]), f"{where}: changed without grad"
                    assert had_buffer[id(p)] == ("momentum_buffer" in st), f"{where}: state changed without grad"
                    continue
                worst = check_close(f"{where} param", math_copy(opt, p), exp_params[gi][i], "float32")
                if "master_param" in st:
                    assert torch.equal(p.detach(), st["master_param"].to(p.dtype)), f"{where}: param != master"
                exp_st = exp_state.params[gi][i]
                assert set(st) - {"master_param"} == set(exp_st), f"{where}: state keys {set(st)}"
                if "momentum_buffer" in exp_st:
                    assert st["momentum_buffer"].dtype == moment_dtype
                    worst = max(worst, check_close(f"{where} momentum_buffer", st["momentum_buffer"],
                                                   exp_st["momentum_buffer"], moments))
                WORST[desc] = max(WORST.get(desc, 0.0), worst)
    return opt, groups


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("case", list(CASES))
def test_lockstep_with_oracle(case, dtype):
    run_lockstep(CASES[case], dtype, desc=case)


@pytest.mark.parametrize("case", ["momentum_dampening", "nesterov"])
def test_bf16_buffers(case):
    opt, groups = run_lockstep(CASES[case], torch.bfloat16, moment_dtype=torch.bfloat16, desc=f"{case}/bf16 buffers")
    assert opt.state[groups[0][0]]["momentum_buffer"].dtype == torch.bfloat16


@pytest.mark.parametrize("inv_scale", [2.0 ** -10, 0.3], ids=["pow2", "inexact"])
def test_inv_scale(inv_scale):
    run_lockstep(CASES["momentum_dampening"], torch.float32, inv_scale=inv_scale, desc="inv_scale")


def test_late_param_takes_the_first_step_form():
    """The param whose grad first comes at step 3 starts its buffer as buf = g exactly
    (torch's first step), while its neighbours are on their third step."""
    groups = make_params(torch.float32)
    opt = FusedSGD([{"params": ps} for ps in groups], lr=0.1, momentum=0.9, dampening=0.5)
    gen = torch.Generator().manual_seed(1)
    for t in range(1, 4):
        set_grads(groups, gen, t)
        opt.step()
    late = groups[LATE[0]][LATE[1]]
    assert torch.equal(opt.state[late]["momentum_buffer"], late.grad)


def test_zz_report_worst():
    if not WORST:
        pytest.skip("run with the whole module to collect the figures")
    print("\nFusedSGD worst error / derived tolerance: " + ", ".join(f"{k} {v:.4f}" for k, v in sorted(WORST.items())))
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


def test_registry_and_conventions():
    assert CONVENTIONS["sgd"] == SGDConvention(decay="l2", first_step="copy", counter="group")
    assert OPTIMIZERS == {"adamw": (FusedAdam, {"adam_w_mode": True}), "adam": (FusedAdam, {"adam_w_mode": False}),
                          "adagrad": (FusedAdagrad, {}), "lamb": (FusedLAMB, {}), "sgd": (FusedSGD, {}),
                          "lion": (FusedLion, {})}
    for name, (cls, flags) in OPTIMIZERS.items():
        assert name in oracle.SPECS
        assert convention_of(cls(model(), **flags))[0] == name


@pytest.mark.parametrize("bad,match", [
    (dict(lr=-1.0), "group 1: lr"), (dict(lr=math.nan), "group 1: lr"), (dict(momentum=-0.1), "group 1: momentum"),
    (dict(weight_decay=-0.1), "group 1: weight_decay"), (dict(dampening=math.nan), "group 1: dampening"),
    (dict(nesterov=True), "group 1: nesterov requires"),
    (dict(nesterov=True, momentum=0.9, dampening=0.1), "group 1: nesterov requires"),
])
def test_bad_hyperparameters_name_the_group(bad, match):
    with pytest.raises(ValueError, match=match):
        FusedSGD([{"params": model()}, {"params": model(seed=1), **bad}])


def test_torch_accepts_any_dampening():
    FusedSGD(model(), momentum=0.9, dampening=-0.5)
    torch.optim.SGD(model(), momentum=0.9, dampening=-0.5)


def test_amsgrad_is_refused_and_maximize_kept():
    with pytest.raises(ValueError, match="group 0: FusedSGD does not support amsgrad=True"):
        FusedSGD([{"params": model(), "amsgrad": True}])
    opt = FusedSGD(model(), maximize=True)
    assert opt.param_groups[0]["maximize"] is True


def test_maximize_is_descent_on_the_negated_grad():
    a, b = model(), model()
    opt_a = FusedSGD(a, lr=0.1, momentum=0.9, weight_decay=0.1, maximize=True)
    opt_b = FusedSGD(b, lr=0.1, momentum=0.9, weight_decay=0.1)
    for s in range(3):
        fill_grads(a, s)
        fill_grads(b, s)
        for p in b:
            p.grad.neg_()
        opt_a.step()
        opt_b.step()
    for p, q in zip(a, b):
        assert torch.equal(p, q)


def test_no_momentum_no_buffer_and_fp32_master():
    params = model(torch.bfloat16)
    opt = FusedSGD(params, lr=0.1)
    run(opt, params, range(2))
    st = opt.state[params[0]]
    assert set(st) == {"master_param"} and st["master_param"].dtype == torch.float32
    assert torch.equal(params[0].detach(), st["master_param"].to(torch.bfloat16))
    fp32 = model()
    opt = FusedSGD(fp32, lr=0.1)
    run(opt, fp32, range(2))
    assert not opt.state.get(fp32[0])


def test_momentum_raised_from_zero_starts_buffers_like_torch():
    """A group whose momentum goes 0 -> 0.9 starts each buffer with buf = g (torch: no buffer yet)."""
    params = model()
    ref = [p.detach().clone().double().requires_grad_() for p in params]
    opt = FusedSGD(params, lr=0.1, dampening=0.5)
    topt = torch.optim.SGD(ref, lr=0.1, dampening=0.5)
    for s in range(4):
        if s == 2:
            opt.param_groups[0]["momentum"] = topt.param_groups[0]["momentum"] = 0.9
        fill_grads(params, s)
        for p, q in zip(params, ref):
            q.grad = p.grad.double()
        opt.step()
        topt.step()
        if s == 2:
            assert torch.equal(opt.state[params[0]]["momentum_buffer"], params[0].grad)
    for p, q in zip(params, ref):
        torch.testing.assert_close(p.double(), q.detach(), rtol=1e-5, atol=1e-6)


def test_momentum_dropped_to_zero_keeps_the_buffer_unchanged():
    params = model()
    opt = FusedSGD(params, lr=0.1, momentum=0.9)
    run(opt, params, range(2))
    buf = opt.state[params[0]]["momentum_buffer"].clone()
    opt.param_groups[0]["momentum"] = 0.0
    before = params[0].detach().clone()
    run(opt, params, [5])
    assert torch.equal(opt.state[params[0]]["momentum_buffer"], buf)
    # plain SGD: the kernel's two float32 operations, lr*g and the difference
    assert torch.equal(params[0].detach(), before - 0.1 * params[0].grad)


def test_counters_found_inf_and_state_creation():
    a, b = model(), model(seed=1)
    fill_grads(a, 0)  # b has no grads
    opt = FusedSGD([{"params": a}, {"params": []}, {"params": b}], momentum=0.9)
    opt.step(found_inf=True)
    assert len([s for s in opt.state.values() if s]) == 0 and [g["step"] for g in opt.param_groups] == [0, 0, 0]
    for _ in range(3):
        opt.step()
    assert [g["step"] for g in opt.param_groups] == [3, 3, 3]
    assert all(not opt.state.get(p) for p in b)
    values = [p.detach().clone() for p in a]
    bufs = [opt.state[p]["momentum_buffer"].clone() for p in a]
    opt.step(found_inf=torch.tensor(1.0), inv_scale=0.5)
    assert [g["step"] for g in opt.param_groups] == [3, 3, 3]
    assert all(torch.equal(p, v) for p, v in zip(a, values))
    assert all(torch.equal(opt.state[p]["momentum_buffer"], v) for p, v in zip(a, bufs))


@pytest.mark.parametrize("moment_dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
def test_checkpoint_round_trip_continues_bit_exactly(dtype, moment_dtype):
    def make():
        params = model(dtype)
        groups = [{"params": params[:1]}, {"params": []}, {"params": params[1:], "lr": 3e-3, "nesterov": True}]
        return params, FusedSGD(groups, lr=0.1, momentum=0.9, weight_decay=0.1, moment_dtype=moment_dtype)

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


def test_checkpoint_with_a_bad_buffer_is_refused_whole():
    params = model()
    opt = FusedSGD(params, momentum=0.9)
    run(opt, params, range(2))
    sd = copy.deepcopy(opt.state_dict())
    sd["state"][1]["momentum_buffer"] = sd["state"][1]["momentum_buffer"].double()
    before = copy.deepcopy(opt.state_dict())
    with pytest.raises(ValueError, match="group 0 param 1: state 'momentum_buffer' dtype"):
        opt.load_state_dict(sd)
    after = opt.state_dict()
    assert all(torch.equal(after["state"][k]["momentum_buffer"], v["momentum_buffer"])
               for k, v in before["state"].items() if v)
    sd = copy.deepcopy(before)
    sd["state"][0]["exp_avg"] = sd["state"][0]["momentum_buffer"]
    with pytest.raises(ValueError, match="unknown state keys"):
        opt.load_state_dict(sd)


def test_bad_grad_raises_before_anything_changes():
    params = model()
    opt = FusedSGD([{"params": params[:1]}, {"params": params[1:]}], momentum=0.9, lr=0.1)
    run(opt, params, [0])
    values = [p.detach().clone() for p in params]
    bufs = {p: opt.state[p]["momentum_buffer"].clone() for p in params if opt.state.get(p)}
    fill_grads(params, 1)
    params[1].grad = params[1].grad.to_sparse()
    with pytest.raises(RuntimeError, match="group 1 param 0: sparse"):
        opt.step()
    assert all(torch.equal(p, v) for p, v in zip(params, values))
    assert all(torch.equal(opt.state[p]["momentum_buffer"], v) for p, v in bufs.items())
    assert [g["step"] for g in opt.param_groups] == [1, 1]


def nonfinite_class(x: np.ndarray) -> np.ndarray:
    """0 finite, 1 NaN, 2 +inf, 3 -inf."""
    return np.select([np.isnan(x), x == np.inf, x == -np.inf], [1, 2, 3], 0)


@pytest.mark.parametrize("wd", [0.0, 0.1])
@pytest.mark.parametrize("poison", [math.nan, math.inf, -math.inf], ids=["nan", "inf", "-inf"])
def test_nonfinite_values_land_where_the_oracle_says(poison, wd):
    """A poisoned grad element and an infinite param: NaN/Inf placement in the params and
    buffers is the oracle's, element by element (wd = 0: the infinite param stays out of
    the grad and the buffer, as torch skips the L2 term)."""
    params = model()
    opt = FusedSGD(params, lr=0.1, momentum=0.9, dampening=0.1, weight_decay=wd)
    run(opt, params, [0])
    fill_grads(params, 1)
    with torch.no_grad():
        params[0].view(-1)[3] = math.inf
    params[1].grad[7] = poison
    groups = [params]
    exp_params, exp_state = bounded_oracle_step(opt, groups, None)
    opt.step()
    for i, p in enumerate(params):
        for what, got, exp in [("param", p, exp_params[0][i]),
                               ("momentum_buffer", opt.state[p]["momentum_buffer"],
                                exp_state.params[0][i]["momentum_buffer"])]:
            g, e = as_f64(got), exp.v
            assert np.array_equal(nonfinite_class(g), nonfinite_class(e)), f"param {i} {what}"
            finite = nonfinite_class(e) == 0
            check_close(f"param {i} {what}", g[finite], Bounded(e[finite], exp.e[finite], U), "float32")
