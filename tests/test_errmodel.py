"""The derived tolerances bound what a real low-precision evaluation does.

An independent float32 NumPy AdamW step (the order of torch's kernel) must lie
within the running error bound the oracle's own expression yields with
u = 2**-24, element by element; and the bound must not be vacuous.
"""
import numpy as np
import pytest

from oracle.compare.measuring.errmodel import Bounded, unit_roundoff
from oracle import adam

U = unit_roundoff("float32")


def fp32_adamw(p, g, m, v, lr, wd, b1, b2, eps, t, bc_in_fp32=False):
    f = np.float32
    p, g, m, v = (x.astype(f) for x in (p, g, m, v))
    p = p * f(1 - lr * wd)
    m = m + (g - m) * f(1 - b1)
    v = v * f(b2) + g * g * f(1 - b2)
    if bc_in_fp32:
        bc1, bc2 = f(1) - f(b1) ** f(t), f(1) - f(b2) ** f(t)
    else:
        bc1, bc2 = f(1 - b1 ** t), f(1 - b2 ** t)
    denom = np.sqrt(v) / np.sqrt(bc2) + f(eps)
    return (p - f(lr / bc1) * (m / denom)).astype(np.float64)


def bounded_step(p, g, m, v, hp, t, conv):
    hp = adam.validate([hp])[0]
    st = {"exp_avg": Bounded(m, None, U), "exp_avg_sq": Bounded(v, None, U)}
    new_p, _ = adam.update(Bounded(p, None, U), Bounded(g, None, U), st, hp, t, conv)
    return new_p


@pytest.mark.parametrize("t", [1, 2, 5, 20])
@pytest.mark.parametrize("bc", ["float64", "compute"])
def test_fp32_evaluation_lies_within_the_derived_bound(t, bc):
    rng = np.random.default_rng(t)
    n = 4096
    p = rng.standard_normal(n).astype(np.float32).astype(np.float64)
    g = (rng.standard_normal(n) * 1e-3).astype(np.float32).astype(np.float64)
    m = (rng.standard_normal(n) * 1e-3).astype(np.float32).astype(np.float64)
    v = (rng.random(n) * 1e-6).astype(np.float32).astype(np.float64)
    hp = {"lr": 1e-2, "weight_decay": 0.1, "eps": 1e-8}
    conv = adam.AdamConvention(bias_correction_precision=bc)
    bound = bounded_step(p, g, m, v, hp, t, conv)
    got = fp32_adamw(p, g, m, v, 1e-2, 0.1, 0.9, 0.999, 1e-8, t, bc_in_fp32=(bc == "compute"))
    err = np.abs(got - bound.v)
    assert np.all(err <= bound.e), float(np.max(err / bound.e))
    # not vacuous: for the typical element a 0.1% error in its update exceeds the bound
    # (where decay and the Adam term cancel, the update is ~0 and no relative bound is small)
    update = np.abs(bound.v - p)
    assert np.median(bound.e / update) < 1e-3


def test_fp32_bias_correction_widens_the_early_bound_only():
    rng = np.random.default_rng(0)
    p, g = np.zeros(64), rng.standard_normal(64) * 1e-3  # zero params: the bound is the update's
    m, v = np.zeros(64), np.zeros(64)
    hp = {"lr": 1e-2, "weight_decay": 0.0}
    host = bounded_step(p, g, m, v, hp, 1, adam.AdamConvention())
    kern = bounded_step(p, g, m, v, hp, 1, adam.AdamConvention(bias_correction_precision="compute"))
    np.testing.assert_allclose(host.v, kern.v, rtol=1e-15)  # same values: only the tolerance differs
    ratio = np.median(kern.e / host.e)
    assert ratio > 20  # 1 - 0.999**1 cancels: float32 rounding of 0.999 amplified ~1000x, halved by sqrt
    late = [bounded_step(p, g, m, v, hp, 10_000, c) for c in (adam.AdamConvention(),
            adam.AdamConvention(bias_correction_precision="compute"))]
    assert np.median(late[1].e / late[0].e) < 2


def test_unknown_bias_correction_precision_is_refused():
    with pytest.raises(ValueError, match="bias_correction_precision"):
        adam.AdamConvention(bias_correction_precision="float16")


def test_sign_is_exact_where_settled_and_open_where_not():
    """sign() of a value whose interval straddles zero may be any of -1, 0, 1."""
    x = Bounded(np.array([0.5, -0.5, 1e-9, 0.0, 0.0]), np.array([0.1, 0.1, 1e-8, 0.0, 1e-9]))
    r = np.sign(x)
    np.testing.assert_array_equal(r.v, [1.0, -1.0, 1.0, 0.0, 0.0])
    np.testing.assert_array_equal(r.e, [0.0, 0.0, 2.0, 0.0, 1.0])
    c = np.copysign(1.0, x)
    np.testing.assert_array_equal(c.v, [1.0, -1.0, 1.0, 1.0, 1.0])
    assert c.e[0] == c.e[1] == c.e[3] == 0.0 and c.e[2] >= 2.0 and c.e[4] >= 2.0


def test_exact_zeros_stay_exact_so_sign_of_zero_is_settled():
    """x*0 (x finite) and 0 + 0 are exactly 0 in any order: no rounding floor, so
    sign() of a Lion c computed from a zero momentum and a zero grad is settled
    (sign(0) = 0 against copysign(1, +0) = +1), while a rounded tiny value stays open."""
    m = Bounded(np.zeros(3), None, U)
    g = Bounded(np.array([0.0, 1e-3, 0.0]), None, U)
    c = m * 0.9 + g * (1 - 0.9)
    np.testing.assert_array_equal(c.e == 0, [True, False, True])
    assert np.sign(c).e[0] == 0.0 and np.copysign(1.0, c).e[0] < 1e-6  # settled: only 1.0 held in fp32
    assert (np.sign(c).v[0], np.copysign(1.0, c).v[0]) == (0.0, 1.0)
    # a zero with an error, or times something unbounded, keeps its interval
    z = Bounded(np.array([0.0, 0.0]), np.array([1e-9, 0.0]), U)
    w = z * Bounded(np.array([2.0, np.inf]), None, U)
    assert w.e[0] > 0 and not w.e[1] == 0


def test_where_takes_the_chosen_operands_value_and_error():
    x = Bounded(np.array([1.0, 2.0, 3.0]), np.array([1e-7, 2e-7, 3e-7]), U)
    r = np.where(np.array([True, False, True]), x, 0.0)
    assert isinstance(r, Bounded)
    assert r.v.tolist() == [1.0, 0.0, 3.0] and r.e.tolist() == [1e-7, 0.0, 3e-7]  # a literal 0 is exact


def fp32_optax_adagrad(p, g, h, lr, eps):
    """optax scale_by_rss in float32: where(h > 0, rsqrt(h + eps), 0) * g."""
    f = np.float32
    p, g, h = (x.astype(f) for x in (p, g, h))
    h = g * g + h
    with np.errstate(divide="ignore"):
        scale = np.where(h > 0, f(1) / np.sqrt(h + f(eps)), f(0))
    return (p - f(lr) * (scale * g)).astype(np.float64)


def test_fp32_optax_adagrad_lies_within_the_derived_bound():
    from oracle import adagrad
    rng = np.random.default_rng(5)
    n = 2048
    p = rng.standard_normal(n).astype(np.float32).astype(np.float64)
    g = (rng.standard_normal(n) * 1e-2).astype(np.float32).astype(np.float64)
    g[:64] = 0.0  # with h = 0: the where() branch
    h = (rng.random(n) * 1e-3).astype(np.float32).astype(np.float64)
    h[:32] = 0.0
    hp = adagrad.validate([{"lr": 0.1, "eps": 1e-7}])[0]
    bound, _ = adagrad.update(Bounded(p, None, U), Bounded(g, None, U), {"sum": Bounded(h, None, U)}, hp, 1,
                              adagrad.OPTAX_ADAGRAD)
    got = fp32_optax_adagrad(p, g, h, 0.1, 1e-7)
    assert np.all(np.abs(got - bound.v) <= bound.e)
    assert np.array_equal(bound.v[:32], p[:32]) and np.all(bound.e[:32] <= U * np.abs(p[:32]))


def fp32_optax_nadam_eps_root(p, g, m, v, lr, b1, b2, eps, eps_root, t):
    """optax scale_by_adam(nesterov=True, eps_root) + scale_by_learning_rate, in float32."""
    f = np.float32
    p, g, m, v = (x.astype(f) for x in (p, g, m, v))
    m = f(1 - b1) * g + f(b1) * m
    v = f(1 - b2) * (g * g) + f(b2) * v
    m_hat = f(b1) * (m / f(1 - b1 ** (t + 1))) + f(1 - b1) * (g / f(1 - b1 ** t))
    v_hat = v / f(1 - b2 ** t)
    return (p - f(lr) * (m_hat / (np.sqrt(v_hat + f(eps_root)) + f(eps)))).astype(np.float64)


@pytest.mark.parametrize("t", [1, 3, 30])
def test_fp32_optax_nadam_with_eps_root_lies_within_the_derived_bound(t):
    rng = np.random.default_rng(t)
    n = 4096
    p = rng.standard_normal(n).astype(np.float32).astype(np.float64)
    g = (rng.standard_normal(n) * 1e-3).astype(np.float32).astype(np.float64)
    m = (rng.standard_normal(n) * 1e-3).astype(np.float32).astype(np.float64)
    v = (rng.random(n) * 1e-6).astype(np.float32).astype(np.float64)
    hp = adam.validate([{"lr": 1e-2, "eps": 1e-8, "eps_root": 1e-9}])[0]
    st = {"exp_avg": Bounded(m, None, U), "exp_avg_sq": Bounded(v, None, U)}
    bound, _ = adam.update(Bounded(p, None, U), Bounded(g, None, U), st, hp, t, adam.OPTAX_NADAM)
    got = fp32_optax_nadam_eps_root(p, g, m, v, 1e-2, 0.9, 0.999, 1e-8, 1e-9, t)
    err = np.abs(got - bound.v)
    assert np.all(err <= bound.e), float(np.max(err / bound.e))
    assert np.median(bound.e / np.abs(bound.v - p)) < 1e-3  # not vacuous


def test_absolute_keeps_the_error_and_a_max_of_it_covers_float32():
    """|x| is exact, so it carries x's error unchanged (Adamax's max(b2*u, |g| + eps)): a float32
    evaluation of max(b2*u, |g| + eps) lies within the bound derived through np.abs and np.maximum."""
    rng = np.random.default_rng(3)
    # inputs a float32 kernel holds exactly
    g = rng.standard_normal(64).astype(np.float32).astype(np.float64)
    u = np.abs(rng.standard_normal(64)).astype(np.float32).astype(np.float64)
    x = Bounded(g, None, U) * 1.5
    assert np.array_equal(np.abs(x).v, np.abs(x.v)) and np.array_equal(np.abs(x).e, x.e)
    bound = np.maximum(Bounded(u, None, U) * 0.999, np.abs(Bounded(g, None, U)) + 1e-3)
    f = np.float32
    got = np.maximum(u.astype(f) * f(0.999), np.abs(g.astype(f)) + f(1e-3)).astype(np.float64)
    assert np.all(np.abs(got - bound.v) <= bound.e)
    assert np.all(bound.e > 0)


def test_asgd_compute_schedule_covers_both_torch_paths():
    """torch ASGD's foreach path forms eta = lr/((1 + lambd*lr*step)**alpha) in float32 tensor ops
    (step a float32 tensor, `lr / x` as reciprocal times lr); its forloop rounds the float64 value
    once. Both lie within the bound of schedule_precision="compute", which is not vacuous."""
    import torch
    from oracle import asgd
    worst = 0.0
    for lr, lambd, alpha in ((1e-2, 0.5, 0.75), (5e-2, 0.1, 0.5), (1e-2, 1e-4, 0.75), (0.3, 2.0, 0.7)):
        for t in range(1, 400, 7):
            like = Bounded(np.zeros(3), None, U)
            eta, _ = asgd.schedule(lr, lambd, alpha, 1e6, t, like, "compute")
            assert eta.v.shape == ()  # a 0-dim scalar, as torch's state
            step = torch.tensor(float(t), dtype=torch.float32)
            foreach = float(lr / ((1 + lambd * lr * step) ** alpha))
            forloop = float(torch.as_tensor(lr / ((1 + lambd * lr * float(t)) ** alpha), dtype=torch.float32))
            for got in (foreach, forloop):
                assert abs(got - eta.v) <= eta.e, (lr, lambd, alpha, t, got, float(eta.v), float(eta.e))
                worst = max(worst, abs(got - eta.v) / eta.e)
            assert eta.e < 16 * U * abs(eta.v)  # a handful of roundings, not vacuous
    assert worst > 0.05  # the bound is reached in part: it is not loose by orders of magnitude


def test_power_with_a_non_integer_exponent_carries_its_error_and_a_faithful_rounding():
    a = Bounded(np.array([1.5]), np.array([0.0]), U)
    whole = a ** 3  # an integer exponent (a counter): exact, one rounding
    np.testing.assert_allclose(whole.e, U * 1.5 ** 3)
    frac = a ** 0.7  # a hyperparameter held in float32: its rounding propagates through ln a
    r = 1.5 ** 0.7
    np.testing.assert_allclose(frac.e, abs(r * np.log(1.5)) * U * 0.7 + 2 * U * r)


def test_state_filled_in_a_narrower_format_carries_its_rounding():
    """Rprop's step_size starts as lr. A float32-math kernel keeping bf16 state (torch.rprop.compiled
    on bf16 params: inductor computes in fp32, the state is bf16) steps with lr rounded to bf16 at
    step 1; the bound must see that rounding, and does only when the param says its state is bf16."""
    from oracle import rprop
    from oracle.storage import round_to
    lr = 0.0103  # bf16(lr) is 0.24 of a bf16 ULP (1.5e-5) away: far beyond a float32 rounding
    p = np.array([1e-3, -2e-3, 5e-4])  # small params: the update dominates
    g = np.array([1.0, -1.0, 1.0])
    hp = rprop.validate([{"lr": lr}])[0]
    off = abs(float(round_to(np.array([lr]), "bfloat16")[0]) - lr)
    got = p - np.sign(g) * float(round_to(np.array([lr]), "bfloat16")[0])  # what the kernel computes, exactly
    same, _ = rprop.update(Bounded(p, None, U), Bounded(g, None, U), {}, hp, rprop.TORCH_RPROP)
    assert np.all(same.e < off)  # float32 state: the fill is one float32 rounding, the bf16 one is not covered
    narrow, st = rprop.update(Bounded(p, None, U, state_u=unit_roundoff("bfloat16")), Bounded(g, None, U), {}, hp,
                              rprop.TORCH_RPROP)
    assert np.all(np.abs(got - narrow.v) <= narrow.e)
    assert np.all(narrow.e < 4 * off)  # and no more than a few such roundings
    assert np.all(st["step_size"].e >= off)


def test_radam_compute_schedule_covers_torch_float32_step_tensor():
    """Compiled torch RAdam forms bc1, bc2, rho_t and r from the float32 step tensor (_single_tensor_radam
    with a tensor step); each lies within the bound of schedule_precision="compute"."""
    import torch
    from oracle import radam
    for b1, b2 in ((0.9, 0.999), (0.8, 0.95)):
        for t in list(range(1, 40)) + [100, 1000, 10_000]:
            bc1, bc2, r = radam.compute_schedule(b1, b2, t, Bounded(np.zeros(2), None, U))
            step = torch.tensor(float(t))
            tb1, tb2 = 1 - b1 ** step, 1 - b2 ** step
            rho_inf = 2 / (1 - b2) - 1
            rho_t = rho_inf - 2 * step * (b2 ** step) / tb2
            for got, want in ((tb1, bc1), (tb2, bc2)):
                assert abs(float(got) - want.v) <= want.e
            assert (r is None) == (not float(rho_t) > 5.0)
            if r is not None:
                tr = ((rho_t - 4) * (rho_t - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho_t)) ** 0.5
                assert abs(float(tr) - r.v) <= r.e, (b1, b2, t, float(tr), float(r.v), float(r.e))
                host = radam.rectification(b2, t)
                # the same value in exact arithmetic (float64 cancels too: rho_t loses ~5 digits at t = 7)
                assert abs(host - r.v) < 1e-9 * host


def test_rprop_etas_held_in_the_state_format_are_covered():
    """Compiled torch Rprop on bf16 params writes etaplus into sign's bf16 tensor (1.2 -> 1.203125) and
    multiplies in fp32: the step size it keeps lies within the bound once the param says its state
    format is bf16, and not with a float32 one (0.6 of a bf16 ULP was measured against a 0.5 bound)."""
    from oracle import rprop
    from oracle.storage import round_to
    bf = "bfloat16"
    step_size = round_to(np.array([0.0120, 0.0144, 0.0300]), bf)  # a stored bf16 step size
    prev, g = np.array([1.0, 1.0, 1.0]), np.array([1.0, 2.0, 0.5])  # same signs: eta = etaplus
    p = np.array([0.5, -0.25, 0.125])
    hp = rprop.validate([{"lr": 1e-2}])[0]
    eta_bf16 = float(round_to(np.array([1.2]), bf)[0])
    got = (step_size.astype(np.float32) * np.float32(eta_bf16)).astype(np.float64)  # fp32 math, before the store
    st = {"prev": Bounded(prev, None, U), "step_size": Bounded(step_size, None, U)}
    for state_u, covered in ((unit_roundoff(bf), True), (None, False)):
        _, new = rprop.update(Bounded(p, None, U, state_u=state_u), Bounded(g, None, U), dict(st), hp,
                              rprop.TORCH_RPROP)
        ss = new["step_size"]
        assert np.all(np.abs(got - ss.v) <= ss.e) == covered


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_row_and_column_means_cover_torch_in_the_compute_dtype(dtype):
    """Reductions along one axis (Adafactor's row and column means of g^2) are bounded per output
    element by their own terms: torch's two forms in float32 and bfloat16 (norm(g, dim)^2 / n, as
    torch.optim.Adafactor forms them, and (g*g).mean(dim)) lie within the derived bound, and the
    bound is not vacuous: (log2 n + 10) roundings of the mean, no more."""
    import torch
    u = unit_roundoff(dtype)
    tdt = getattr(torch, dtype)
    g64 = np.random.default_rng(3).standard_normal((3, 40, 24))
    g = torch.tensor(g64, dtype=tdt)
    exact_g = g.double().numpy()
    b = Bounded(exact_g, None, u)
    for axis in (-1, -2):
        bound = np.mean(b * b, axis=axis, keepdims=True)
        assert bound.v.shape == np.mean(exact_g, axis=axis, keepdims=True).shape
        got_norm = (torch.norm(g, dim=axis, keepdim=True).square() / g.shape[axis]).double().numpy()
        got_mean = (g * g).mean(dim=axis, keepdim=True).double().numpy()
        for got in (got_norm, got_mean):
            # torch's own order differs: REORDER_FACTOR = 2 on the first-order bound, as checks.tolerance
            assert np.all(np.abs(got - bound.v) <= 2 * bound.e), float(np.max(np.abs(got - bound.v) / bound.e))
        assert np.all(bound.e <= 20 * u * bound.v)


def test_a_sum_over_all_axes_is_unchanged_and_a_row_sum_reads_its_row_only():
    """np.sum without axis keeps its one bound; along an axis each output's bound grows with its own
    terms only: a row of zeros sums exactly."""
    u = unit_roundoff("float32")
    x = np.ones((4, 8))
    x[0] = 0.0
    b = Bounded(x, None, u)
    whole = np.sum(b)
    assert whole.v == 24.0 and whole.e == pytest.approx((5 + 8) * (u * 24.0 + b.eta))  # 32 terms: depth 5 + 8
    rows = np.sum(b, axis=-1, keepdims=True)
    assert rows.v.shape == (4, 1) and rows.v[0, 0] == 0.0  # 8 terms a row: depth 3 + 8
    assert rows.e[0, 0] <= (3 + 8) * b.eta and rows.e[1, 0] == pytest.approx((3 + 8) * (u * 8.0 + b.eta))

# --- matrix products (Muon's Newton-Schulz iteration) -------------------------------------------------

MATMUL_SHAPES = [(8, 8, 8), (16, 64, 16), (4, 4096, 4), (3, 1, 5)]


def _matrices(rng, dtype, m, n, k, adversarial):
    """A (m x n) and B (n x k), exactly representable in dtype. Adversarial: each dot product is a
    sum of pairs that cancel to 2**-6 of their size (the result's rounding relative to |A||B| is
    then far below u, so only the accumulation bound can hold it), with one row and column zero."""
    from oracle.storage import round_to
    a, b = rng.standard_normal((m, n)), rng.standard_normal((n, k))
    if adversarial and n % 2 == 0:
        h = n // 2
        a[:, h:] = -a[:, :h] * (1 + 2.0 ** -6)
        b[h:, :] = b[:h, :]
        a[0, :], b[:, 0] = 0.0, 0.0
    return round_to(a, dtype), round_to(b, dtype)


def _torch_matmul(a, b, dtype):
    import torch
    t = getattr(torch, dtype)
    return (torch.from_numpy(a).to(t) @ torch.from_numpy(b).to(t)).double().numpy()


@pytest.mark.parametrize("dtype", ["bfloat16", "float32", "float16"])
@pytest.mark.parametrize("shape", MATMUL_SHAPES)
@pytest.mark.parametrize("adversarial", [False, True])
def test_torch_matmul_lies_within_the_derived_bound(dtype, shape, adversarial):
    """torch's CPU matmul in dtype against the exact product: within gamma_n(fp32)|A||B| and one
    rounding into dtype (errmodel.ACCUMULATOR). Observed/bound, max over elements, as measured on these
    inputs (random / adversarial): bf16 0.93/0.89 at n = 8, 0.96/0.75 at n = 64, 0.20/0.002 at
    n = 4096 (the result's rounding dominates: tight); fp16 0.93/0.82, 0.88/0.24, 0.04/3e-4; fp32
    0.22/0.12, 0.05/0.02, 3e-4/1e-4 (gamma_n is a worst case over every summation order, where
    random rounding errors add as sqrt(n)); n = 1: 0.5-0.95. Exact zeros stay exact."""
    rng = np.random.default_rng(sum(shape) + adversarial)
    a, b = _matrices(rng, dtype, *shape, adversarial)
    u = unit_roundoff(dtype)
    bound = Bounded(a, None, u) @ Bounded(b, None, u)
    err = np.abs(_torch_matmul(a, b, dtype) - a @ b)
    assert np.all(err <= bound.e)
    if adversarial and shape[1] % 2 == 0:
        assert np.all(bound.e[0, :] == 0) and np.all(bound.e[:, 0] == 0)
    ratio = float(np.max(err / np.where(bound.e > 0, bound.e, np.inf)))
    tight = {"bfloat16": 0.5, "float16": 0.2, "float32": 0.01}[dtype] if shape[1] <= 64 else 5e-5
    assert ratio > tight, f"bound vacuous: observed/bound = {ratio:.3g}"


def test_matmul_propagates_input_errors():
    """Inputs carrying error (float64 values rounded to bf16 on the way in): the product of the
    rounded inputs, computed in bf16 by torch, lies within |A||dB| + |dA||B| + |dA||dB| plus the
    product's own rounding, against the exact product of the unrounded inputs; and without the
    propagated terms it does not (the propagation is what holds it)."""
    from oracle.storage import round_to
    rng = np.random.default_rng(7)
    a, b = rng.standard_normal((12, 24)), rng.standard_normal((24, 10))
    u = unit_roundoff("bfloat16")
    ab, bb = (Bounded(x, None, U).converted("bfloat16") for x in (a, b))
    got = _torch_matmul(round_to(a, "bfloat16"), round_to(b, "bfloat16"), "bfloat16")
    err = np.abs(got - a @ b)
    assert np.all(err <= (ab @ bb).e)
    alone = Bounded(a, None, u) @ Bounded(b, None, u)
    assert np.any(err > alone.e)


def test_addmm_as_the_oracle_writes_it_covers_torch_bf16_addmm():
    """torch.addmm(C, A, B, beta=b, alpha=c) in bf16 rounds once (fp32 math); the oracle writes it as
    b*C + c*(A@B), three bf16 roundings more: a bound above the single rounding, and still within
    4x of what torch's addmm errs (observed/bound 0.3 here)."""
    import torch
    from oracle.storage import round_to
    rng = np.random.default_rng(3)
    a, b, c = (round_to(rng.standard_normal(s), "bfloat16") for s in ((16, 16), (16, 16), (16, 16)))
    u = unit_roundoff("bfloat16")
    bound = -4.7750 * Bounded(c, None, u) + 2.0315 * (Bounded(a, None, u) @ Bounded(b, None, u))
    tb = lambda x: torch.from_numpy(x).bfloat16()  # noqa: E731
    got = torch.addmm(tb(c), tb(a), tb(b), beta=-4.7750, alpha=2.0315).double().numpy()
    err = np.abs(got - (-4.7750 * c + 2.0315 * (a @ b)))
    assert np.all(err <= bound.e)
    assert float(np.max(err / bound.e)) > 0.25


def test_conversion_rounds_into_a_narrower_format_only():
    x = Bounded(np.array([1.0 + 2.0 ** -12, 0.0]), None, U)
    narrow = x.converted("bfloat16")
    assert narrow.u == unit_roundoff("bfloat16") and narrow.e[1] == 0.0
    assert narrow.e[0] >= 2.0 ** -12  # the bf16 rounding of 1 + 2**-12 loses it whole
    back = narrow.converted(x)
    np.testing.assert_array_equal(back.e, narrow.e)  # bf16 -> fp32 is exact
    assert back.u == U
