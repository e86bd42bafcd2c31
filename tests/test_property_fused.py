"""Property tests: the fused optimizers against the float64 oracle, one step
at a time, over drawn shapes, dtypes, hyperparameters, grad scaling and
NaN/Inf placement (hypothesis; a failure shrinks to a minimal case).

Lockstep: before every step the oracle starts from the optimizer's own
state (the fp32 master or the param, the moments as stored, the group
counters), so each step is judged alone and errors cannot accumulate.

Tolerance, per element, derived rather than tuned (oracle.compare.measuring.errmodel, the
harness's own rule in oracle.compare.measuring.checks.tolerance):
  - The oracle's update runs on `Bounded` arrays with u = 2**-24 (float32):
    every + - * / sqrt of the specification rounds once, |fl(x op y) - x op y|
    <= u|x op y| (plus half of float32's smallest subnormal on underflow), and
    operand errors propagate to first order; hyperparameters and per-step
    scalars (bias corrections, lr/(1 + (t-1)*lr_decay)) enter with error
    u|c|, as the kernels hold them in float32. Inputs read from the optimizer
    (params, masters, moments, grads) are exact: they are its stored values.
    This gives bound(x), the error a float32 evaluation of the oracle's own
    expression, in its order, can have.
  - The kernels evaluate algebraically equal reorderings (lr/bc1 folded into
    one scalar, sqrt(v)*(1/sqrt(bc2)), LAMB's divisions by bc1 and by the clip
    divisor as products by reciprocals rounded once, the LAMB clip divisor and
    norms in double): each moves at most one rounding per operation, covered
    by 2x.
  - What is stored coarser than float32 (bf16 moments, bf16/fp16 params
    without masters) rounds once more: + 0.5 ULP of the stored format at
    the expected value.
  tol = 2*bound + (0.5 ULP of storage if storage is coarser than float32).
Non-finite values are compared by placement: NaN, +Inf and -Inf must sit
exactly where the float64 oracle puts them. Where the bound itself is not
finite (a divisor whose error bound reaches 0, an Inf clip norm) the value
is not determined by float32 precision and is only counted, not compared.
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import oracle
from fused import FusedAdagrad, FusedAdam, FusedLAMB, convention_of
from fused.testing import as_f64
from oracle.compare.measuring.checks import tolerance
from oracle.compare.measuring.errmodel import Bounded, unit_roundoff
from oracle import GradScaling, OptState

# derandomize: the same examples on every run and machine (CI), no example database.
PROFILE = dict(deadline=None, derandomize=True, database=None, print_blob=True,
               suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
U = unit_roundoff("float32")
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


# --------------------------------------------------------------------- strategies

SHAPES = st.sampled_from([(), (1,), (0,), (7,), (3, 4), (2, 0, 3), (5, 1, 2), (40,)])
# Drawn floats stay within float32's normal range: a hyperparameter that
# underflows to 0 in the kernels' float32 turns 0 * Inf into NaN where the
# float64 oracle keeps c * Inf = Inf (a range limit, not a semantic difference).
LR = st.one_of(st.sampled_from([1e-2, 0.0, 1.0, 1e-3]), st.floats(1e-6, 1.0))
BETA = st.one_of(st.sampled_from([0.9, 0.0, 0.999, 0.5]), st.floats(1e-6, 0.9999))
EPS = st.sampled_from([1e-8, 0.0, 1e-3, 1e-6])
WD = st.sampled_from([0.0, 0.1, 0.01, 1.0])


def adam_group():
    return st.fixed_dictionaries({"lr": LR, "betas": st.tuples(BETA, BETA), "eps": EPS, "weight_decay": WD})


def adagrad_group():
    # initial accumulators that bf16 `sum` storage holds exactly: the oracle
    # starts a param's accumulator from the exact value
    return st.fixed_dictionaries({"lr": LR, "eps": st.sampled_from([1e-10, 0.0, 1e-3]), "weight_decay": WD,
                                  "lr_decay": st.sampled_from([0.0, 0.01, 1.0]),
                                  "initial_accumulator_value": st.sampled_from([0.0, 0.125, 1.0, 3.0])})


def lamb_group():
    return st.fixed_dictionaries({"lr": LR, "betas": st.tuples(BETA, BETA), "eps": st.sampled_from([1e-6, 0.0, 1e-3]),
                                  "weight_decay": WD, "grad_averaging": st.booleans()})


# The flags that select the oracle convention are the same for every group:
# one oracle.step call takes one convention (and LAMB's clip couples groups).
FLAGS = {FusedAdam: st.fixed_dictionaries({"adam_w_mode": st.booleans(), "bias_correction": st.booleans(),
                                           "capturable": st.booleans()}),  # CPU capturable: tensor counters
         FusedAdagrad: st.fixed_dictionaries({"adagrad_w_mode": st.booleans(), "capturable": st.booleans()}),
         FusedLAMB: st.fixed_dictionaries({"adam_w_mode": st.booleans(), "bias_correction": st.booleans(),
                                           "use_nvlamb": st.booleans(),
                                           "max_grad_norm": st.sampled_from([1.0, 0.0, 100.0, 0.01])})}
GROUPS = {FusedAdam: adam_group, FusedAdagrad: adagrad_group, FusedLAMB: lamb_group}
POISON = st.tuples(st.integers(0, 1), st.integers(0, 2), st.floats(0.0, 1.0, exclude_max=True),
                   st.sampled_from([math.nan, math.inf, -math.inf]))


@dataclasses.dataclass
class StepSpec:
    seed: int
    magnitude: int               # grads ~ randn * 10**magnitude
    missing: list                # (group, param): no grad this step
    poison: list                 # (group, param, where in [0, 1), value): NaN/Inf in a grad
    inv_scale: float | None
    found_inf: bool


@dataclasses.dataclass
class Scenario:
    cls: type
    dtype: str
    master_weights: bool
    moment_dtype: str
    shapes: list                 # per group, per param
    groups: list                 # per-group hyperparameters
    kwargs: dict                 # constructor options shared by all groups
    steps: list


def step_specs(poison: bool):
    return st.builds(StepSpec, seed=st.integers(0, 2**16), magnitude=st.integers(-3, 3),
                     missing=st.lists(st.tuples(st.integers(0, 1), st.integers(0, 2)), max_size=2),
                     poison=st.lists(POISON, max_size=3) if poison else st.just([]),
                     inv_scale=st.sampled_from([None, 2.0 ** -4, 0.3]),
                     found_inf=st.sampled_from([False, False, True]) if poison else st.just(False))


@st.composite
def scenarios(draw, cls, poison=True):
    n_groups = draw(st.integers(1, 2))
    kwargs = draw(FLAGS[cls])
    return Scenario(cls=cls, dtype=draw(st.sampled_from(list(DTYPES))), master_weights=draw(st.booleans()),
                    moment_dtype=draw(st.sampled_from(["float32", "bfloat16"])),
                    shapes=[draw(st.lists(SHAPES, min_size=0 if g else 1, max_size=3)) for g in range(n_groups)],
                    groups=[draw(GROUPS[cls]()) for _ in range(n_groups)], kwargs=kwargs,
                    steps=draw(st.lists(step_specs(poison), min_size=1, max_size=3)))


# --------------------------------------------------------------------- lockstep

def build(sc: Scenario):
    gen = torch.Generator().manual_seed(12345)
    params = [[torch.randn(s, generator=gen).to(DTYPES[sc.dtype]).requires_grad_() for s in shapes]
              for shapes in sc.shapes]
    opt = sc.cls([{"params": ps, **hp} for ps, hp in zip(params, sc.groups)], master_weights=sc.master_weights,
                 moment_dtype=DTYPES[sc.moment_dtype], **sc.kwargs)
    return params, opt


def set_grads(params, spec: StepSpec):
    gen = torch.Generator().manual_seed(spec.seed)
    for gi, ps in enumerate(params):
        for i, p in enumerate(ps):
            g = torch.randn(p.shape, generator=gen, dtype=torch.float64) * 10.0 ** spec.magnitude
            p.grad = None if (gi, i) in spec.missing else g.to(p.dtype)
    for gi, i, where, value in spec.poison:
        if gi < len(params) and i < len(params[gi]) and params[gi][i].grad is not None and params[gi][i].numel():
            with torch.no_grad():
                params[gi][i].grad.view(-1)[int(where * params[gi][i].numel())] = value


def math_copy(opt, p):
    """What the kernels update: the fp32 master, or the param itself."""
    return opt.state[p].get("master_param", p) if opt.state.get(p) else p


def oracle_step(opt, params, spec: StepSpec):
    """The oracle's step, on Bounded arrays, from the optimizer's state now."""
    name, conv = convention_of(opt)
    module = oracle.SPECS[name]
    bparams = [[Bounded(as_f64(math_copy(opt, p)), None, U) for p in ps] for ps in params]
    bgrads = [[None if p.grad is None else Bounded(as_f64(p.grad), None, U) for p in ps] for ps in params]
    state = OptState([int(g["step"]) for g in opt.param_groups],
                     [[{k: Bounded(as_f64(v), None, U) for k, v in opt.state.get(p, {}).items() if k != "master_param"}
                       for p in ps] for ps in params])
    keys = set(module.defaults) - {"maximize", "amsgrad"}
    hps = [{k: g[k] for k in keys if k in g} for g in opt.param_groups]
    for hp in hps:
        if name == "lamb":  # one optimizer-wide max_grad_norm, the constructor's
            hp["max_grad_norm"] = opt.defaults["max_grad_norm"]
        hp["lr"] = float(hp["lr"])
    scaling = GradScaling(1.0 if spec.inv_scale is None else spec.inv_scale, spec.found_inf)
    with np.errstate(all="ignore"):
        return module.step(bparams, bgrads, state, hps, conv, scaling)


def classes(x: np.ndarray) -> np.ndarray:
    """0 finite, 1 NaN, 2 +Inf, 3 -Inf."""
    return np.select([np.isnan(x), x == np.inf, x == -np.inf], [1, 2, 3], 0)


def compare(got: torch.Tensor, exp: Bounded, storage: str, what: str) -> int:
    """Placement of NaN/Inf exact; finite values within the derived tolerance.
    Returns the number of elements whose bound is not finite (not compared)."""
    g = as_f64(got)
    assert g.shape == exp.v.shape, f"{what}: shape {g.shape} != {exp.v.shape}"
    with np.errstate(all="ignore"):
        tol = tolerance(exp.e, exp.v, storage, "float32")
    bounded = np.isfinite(tol) & np.isfinite(exp.v)
    nonfinite = ~np.isfinite(exp.v)
    wrong = nonfinite & (classes(g) != classes(exp.v))
    if wrong.any():
        k = np.unravel_index(int(np.argmax(wrong)), g.shape)
        raise AssertionError(f"{what}: {int(wrong.sum())} NaN/Inf misplaced; at {k} got {g[k]!r}, oracle {exp.v[k]!r}")
    with np.errstate(all="ignore"):
        over = bounded & ~(np.abs(g - exp.v) <= tol)
    if over.any():
        k = np.unravel_index(int(np.argmax(np.where(over, np.abs(g - exp.v) / np.where(tol > 0, tol, 1.0), -1))),
                             g.shape)
        raise AssertionError(f"{what}: {int(over.sum())}/{g.size} elements out of tolerance; at {k} got {g[k]!r}, "
                             f"oracle {exp.v[k]!r}, |diff| {abs(g[k] - exp.v[k]):.3g} > tol {tol[k]:.3g} "
                             f"(bound {exp.e[k]:.3g}, {storage})")
    return int((~bounded & ~nonfinite).sum())


def bits(t):
    t = t.detach().contiguous()
    return t.view({2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()]).clone() if t.numel() else t


def run_lockstep(sc: Scenario) -> None:
    params, opt = build(sc)
    for k, spec in enumerate(sc.steps, 1):
        set_grads(params, spec)
        exp_params, exp_state = oracle_step(opt, params, spec)
        before = [[(bits(p), {key: bits(v) for key, v in opt.state.get(p, {}).items()}) for p in ps] for ps in params]
        counters = [int(g["step"]) for g in opt.param_groups]
        opt.step(inv_scale=spec.inv_scale, found_inf=spec.found_inf)
        assert [int(g["step"]) for g in opt.param_groups] == exp_state.group_step, f"step {k}: counters"
        for gi, ps in enumerate(params):
            for i, p in enumerate(ps):
                where = f"step {k} group {gi} param {i}"
                if spec.found_inf or p.grad is None:  # nothing may change, bitwise
                    assert torch.equal(bits(p), before[gi][i][0]), f"{where}: param changed"
                    now = {key: bits(v) for key, v in opt.state.get(p, {}).items()}
                    assert now.keys() == before[gi][i][1].keys(), f"{where}: state created or dropped"
                    assert all(torch.equal(now[key], v) for key, v in before[gi][i][1].items()), f"{where}: state"
                    continue
                state = opt.state[p]
                master = "master_param" in state
                storage = "float32" if master else sc.dtype
                compare(math_copy(opt, p), exp_params[gi][i], storage, f"{where} {'master' if master else 'param'}")
                if master:  # NaN sign and payload are unspecified (torch's cast makes every NaN 0x7FC0)
                    rounded = state["master_param"].to(p.dtype)
                    same = (bits(p) == bits(rounded)) | (p.detach().isnan() & rounded.isnan())
                    assert bool(same.all()), f"{where}: param is not its master rounded"
                for key, ev in exp_state.params[gi][i].items():
                    compare(state[key], ev, sc.moment_dtype, f"{where} {key}")
        if spec.found_inf:
            assert [int(g["step"]) for g in opt.param_groups] == counters


# Examples per optimizer: ~0.02 s each on one core (~20 s for the file), well
# under 60 s on 2 cores.
FINITE = settings(max_examples=150, **PROFILE)
POISONED = settings(max_examples=150, **PROFILE)


@pytest.mark.parametrize("cls", [FusedAdam, FusedAdagrad, FusedLAMB], ids=lambda c: c.__name__)
def test_lockstep_finite(cls):
    @FINITE
    @given(scenarios(cls, poison=False))
    def check(sc):
        run_lockstep(sc)
    check()


@pytest.mark.parametrize("cls", [FusedAdam, FusedAdagrad, FusedLAMB], ids=lambda c: c.__name__)
def test_lockstep_nan_inf_and_found_inf(cls):
    @POISONED
    @given(scenarios(cls, poison=True))
    def check(sc):
        run_lockstep(sc)
    check()
