"""Complex params in the oracle (complex_form "components", oracle.common.on_components) against
torch.optim itself on complex128, forloop and foreach: every optimizer whose spec declares a complex
form, with maximize and weight decay, two groups differing in every hyperparameter, a param without a
grad on some steps, 0-dim and empty params. torch's default dtype is float64 here, so the scalar state
it keeps (ASGD's eta and mu, NAdam's mu_product) is float64 as the oracle's is.

Also: what the components form means where it is not obvious (a second moment per component, not
|g|^2; LAMB's trust-ratio norms are the complex norms), the real/complex round trip, and refusals."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import oracle
from oracle import OptState
from oracle.common import on_components
from oracle.storage import as_complex, as_pairs

TOL = 1e-13
SHAPES = [(3, 4), (5,), (), (0,)]
NONE_STEPS = {2, 5}  # the last non-empty param has no grad on these steps

# torch class, and per optimizer two groups' hyperparameters: maximize in one group, weight decay in
# the other (where the optimizer has one), the rest differing too.
TORCH = {
    "adam": ("Adam", {"lr": 0.01, "weight_decay": 0.1, "amsgrad": True}, {"lr": 0.03, "maximize": True, "betas": (0.8, 0.99)}),
    "adamw": ("AdamW", {"lr": 0.01, "weight_decay": 0.5}, {"lr": 0.02, "maximize": True, "amsgrad": True, "weight_decay": 0.0}),
    "adagrad": ("Adagrad", {"lr": 0.1, "weight_decay": 0.1, "lr_decay": 0.01}, {"lr": 0.05, "maximize": True}),
    "sgd": ("SGD", {"lr": 0.1, "momentum": 0.9, "nesterov": True, "weight_decay": 0.1},
            {"lr": 0.05, "momentum": 0.5, "dampening": 0.3, "maximize": True}),
    "rmsprop": ("RMSprop", {"lr": 0.01, "centered": True, "momentum": 0.9, "weight_decay": 0.1},
                {"lr": 0.02, "maximize": True, "alpha": 0.9}),
    "adamax": ("Adamax", {"lr": 0.01, "weight_decay": 0.1}, {"lr": 0.02, "maximize": True}),
    "adadelta": ("Adadelta", {"lr": 1.0, "weight_decay": 0.1}, {"lr": 0.5, "rho": 0.8, "maximize": True}),
    "asgd": ("ASGD", {"lr": 0.01, "lambd": 0.5, "t0": 3.0, "weight_decay": 0.1},
             {"lr": 0.1, "alpha": 0.5, "maximize": True}),
    "nadam": ("NAdam", {"lr": 0.01, "weight_decay": 0.1}, {"lr": 0.02, "maximize": True, "decoupled_weight_decay": True}),
    "radam": ("RAdam", {"lr": 0.01, "weight_decay": 0.1}, {"lr": 0.02, "maximize": True, "decoupled_weight_decay": True}),
    "rprop": ("Rprop", {"lr": 0.01}, {"lr": 0.02, "etas": (0.3, 1.5), "maximize": True}),
}
COMPLEX = sorted(name for name, s in oracle.SPECS.items() if s.complex_form is not None)


@pytest.fixture(autouse=True)
def float64_scalars():
    before = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(before)


def random_complex(rng, shape, scale=1.0):
    return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)) * scale


def grads_at(rng, step):
    """Per group, per param a complex grad; the first elements of param 0 exactly 0 (both components)
    and one with only an imaginary part; None for the last non-empty param on NONE_STEPS."""
    out = []
    for _ in range(2):
        gs = [random_complex(rng, s, 0.1) for s in SHAPES]
        gs[0].ravel()[:2] = 0.0
        gs[0].ravel()[2] = 0.05j
        if step in NONE_STEPS:
            gs[2] = None
        out.append(gs)
    return out


def worst_error(got: np.ndarray, want: np.ndarray) -> float:
    """max|got - want| / max|want| over the (re, im) components; a tensor of zeros must match exactly."""
    assert got.shape == want.shape, (got.shape, want.shape)
    if got.size == 0:
        return 0.0
    peak, diff = float(np.max(np.abs(want))), float(np.max(np.abs(got - want)))
    assert peak > 0 or diff == 0
    return diff / peak if peak else 0.0


def components(x) -> np.ndarray:
    """A torch tensor or NumPy array, complex or real, as float64 (re, im) components (reals as is)."""
    if isinstance(x, torch.Tensor):
        x = torch.view_as_real(x.detach()).numpy() if x.is_complex() else x.detach().numpy()
        return np.asarray(x, dtype=np.float64)
    return as_pairs(x) if np.iscomplexobj(x) else np.asarray(x, dtype=np.float64)


def compare(where: str, tparam, tstate: dict, param, state: dict) -> float:
    assert set(tstate) == set(state), f"{where}: torch keys {sorted(tstate)}, oracle {sorted(state)}"
    assert np.iscomplexobj(param) and tparam.is_complex()
    worst = worst_error(components(tparam), components(param))
    for key, value in state.items():
        if key == "step":
            assert int(tstate[key].item()) == value, where
            continue
        assert tstate[key].is_complex() == np.iscomplexobj(value), f"{where}: {key} complex in one only"
        worst = max(worst, worst_error(components(tstate[key]), components(value)))
    return worst


def run(name: str, foreach: bool, steps: int = 10, seed: int = 0) -> float:
    cls_name, *groups = TORCH[name]
    rng = np.random.default_rng(seed)
    params = [[random_complex(rng, s) for s in SHAPES] for _ in groups]
    tparams = [[torch.tensor(p, dtype=torch.complex128) for p in ps] for ps in params]
    opt = getattr(torch.optim, cls_name)([{"params": tps, **hp} for tps, hp in zip(tparams, groups)], foreach=foreach)
    state, worst = None, 0.0
    for t in range(1, steps + 1):
        grads = grads_at(rng, t)
        for tps, gs in zip(tparams, grads):
            for tp, g in zip(tps, gs):
                tp.grad = None if g is None else torch.tensor(g, dtype=torch.complex128)
        opt.step()
        params, state = oracle.step(name, params, grads, state, [dict(hp) for hp in groups])
        for g, tps in enumerate(tparams):
            for i, tp in enumerate(tps):
                where = f"{name} foreach={foreach} step {t} group {g} param {i}"
                e = compare(where, tp, opt.state.get(tp, {}), params[g][i], state.params[g][i])
                assert e <= TOL, f"{where}: relative error {e:.3g}"
                worst = max(worst, e)
    return worst


def test_every_complex_spec_is_checked_here():
    """The specs that take complex params are exactly those torch.optim takes them on, of ours."""
    assert COMPLEX == sorted(TORCH)


@pytest.mark.parametrize("foreach", [False, True], ids=["forloop", "foreach"])
@pytest.mark.parametrize("name", sorted(TORCH))
def test_matches_torch_complex128(name, foreach):
    worst = run(name, foreach)
    print(f"\n{name} foreach={foreach}: worst relative error vs torch complex128 {worst:.3g}")
    assert worst <= TOL


def test_second_moment_is_per_component_not_modulus():
    """Adam's v after one step from 0 is (1 - beta2)*(re^2, im^2) in the two components of a complex
    state, as torch keeps it; not (1 - beta2)*|g|^2 = g*conj(g) (optax's abs_sq), nor g*g."""
    g = np.array([3.0 + 4.0j])
    _, state = oracle.step("adam", [[np.array([1.0 + 1.0j])]], [[g]], hparams=[{"betas": (0.9, 0.5)}])
    v = state.params[0][0]["exp_avg_sq"]
    assert np.iscomplexobj(v)
    assert v[0] == 0.5 * 9.0 + 0.5 * 16.0j  # not 0.5*25 (|g|^2), nor 0.5*(-7 + 24j) (g*g)


def test_lamb_trust_ratio_norms_are_complex_norms():
    """Through the components view LAMB's ||p|| and ||u|| are sums of re^2 + im^2 = |z|^2: the complex
    norms. Checked on one step from 0 with wd = 0 and trust always: the update is then the Adam
    direction per component scaled by ||p||/||u||, both norms taken here on the complex arrays."""
    rng = np.random.default_rng(3)
    p, g = random_complex(rng, (4, 3)), random_complex(rng, (4, 3), 0.1)
    conv = oracle.lamb.PAPER_LAMB
    hp = [{"lr": 0.1, "weight_decay": 0.0, "eps": 1e-6}]
    new, _ = on_components(oracle.SPECS["lamb"].step, [[p]], [[g]], OptState.empty([[p]]), hp, conv, None)
    direction = as_complex(as_pairs(g) / (np.abs(as_pairs(g)) + 1e-6))  # m_hat/(sqrt(v_hat) + eps) at step 1
    ratio = np.linalg.norm(p) / np.linalg.norm(direction)  # NumPy's complex norm: sqrt(sum |z|^2)
    assert np.allclose(new[0][0], p - 0.1 * ratio * direction, rtol=1e-14, atol=0)


def test_pairs_round_trip_keeps_infinities_and_signed_zeros():
    z = np.array([complex(np.inf, -0.0), complex(-0.0, np.nan), 1.5 - 2j])
    back = as_complex(as_pairs(z))
    assert np.array_equal(as_pairs(back), as_pairs(z), equal_nan=True)
    assert np.signbit(back[0].imag) and np.signbit(back[1].real)


@pytest.mark.parametrize("name", sorted(n for n, s in oracle.SPECS.items() if s.complex_form is None))
def test_optimizers_without_a_complex_form_refuse_complex(name):
    with pytest.raises(ValueError, match=r"group 0 param 0: complex values are not supported"):
        oracle.step(name, [[np.array([1.0 + 1j])]], [[np.array([0.1 + 0j])]])


def test_a_real_grad_for_a_complex_param_is_refused():
    with pytest.raises(ValueError, match=r"group 0 param 0: a complex param needs a complex grad"):
        oracle.step("adam", [[np.array([1.0 + 1j])]], [[np.array([0.1])]])


def test_real_state_for_a_complex_param_is_refused():
    state = OptState([0], [[{"step": 1, "exp_avg": np.zeros(1), "exp_avg_sq": np.zeros(1)}]])
    with pytest.raises(ValueError, match=r"group 0 param 0: state 'exp_avg' of a complex param must be complex"):
        oracle.step("adam", [[np.array([1.0 + 1j])]], [[np.array([0.1 + 0j])]], state)


def test_a_large_complex_param_runs_sliced_as_its_pieces_run_whole():
    """A complex param larger than drive's slice (its pairs run in cache-sized pieces) gets, bit for
    bit, what its pieces get stepped one by one as small params."""
    from oracle.common import SLICE
    rng = np.random.default_rng(5)
    p, g = random_complex(rng, (SLICE + 7,)), random_complex(rng, (SLICE + 7,), 0.1)
    hp = [{"lr": 0.01, "weight_decay": 0.1}]
    whole, _ = oracle.step("adamw", [[p]], [[g]], hparams=hp)
    pieces = [oracle.step("adamw", [[p[k:k + 1000]]], [[g[k:k + 1000]]], hparams=hp)[0][0][0]
              for k in range(0, p.size, 1000)]
    assert np.array_equal(whole[0][0], np.concatenate(pieces))
