"""Adafactor in float64: the specification.

Per param p with grad g, at its step t (Shazeer & Stern 2018, "Adafactor: Adaptive Learning Rates
with Sublinear Memory Cost", Algorithms 4 and 5 with update clipping, sec. 6, and relative step
sizes, sec. 8; torch.optim.Adafactor's documented form and order of operations,
_single_tensor_adafactor), in this order:

    g       <- -g                                   if maximize
    beta2_t  = 1 - t^c                              c = beta2_decay <= 0 (the paper's -0.8, sec. 7.2)
    rho_t    = min(lr, 1/sqrt(t))                   the relative step size (the paper fixes 0.01 for lr)
    alpha_t  = max(eps2, RMS(p)) * rho_t            RMS(x) = ||x||_2 / sqrt(numel x), p before decay
    p       <- p * (1 - lr*wd)                      decoupled decay (torch; only when wd != 0)
    p with >= 2 dims, factored over its last two (state row_var [..., R, 1], col_var [..., 1, C]):
        r     <- beta2_t r + (1 - beta2_t) mean_{-1}(g^2)       mean over each row
        c     <- beta2_t c + (1 - beta2_t) mean_{-2}(g^2)       mean over each column
        v_hat  = r c / max(mean_{-2}(r), eps1)                 outer product over the rows' mean
    p with 0 or 1 dims (state variance, p's shape):
        v     <- beta2_t v + (1 - beta2_t) g^2
        v_hat  = v
    u        = g / sqrt(max(v_hat, eps1^2))         torch: rsqrt(clamp(v_hat, eps1^2)) * g
    u_hat    = u / max(1, RMS(u)/d)                 update clipping at threshold d
    p       <- p - alpha_t u_hat

eps = (eps1, eps2); eps1 = None is the machine epsilon of the param's own format
(torch.finfo(param.dtype).eps; oracle.common.machine_epsilon). Means, not the paper's sums: the
paper's R C / (1^T R) with row and column sums is r c / mean(r) with means (torch's docs say so;
PyTorch #154862); they differ only where the eps1 guard on the rows' mean acts.

Where eps1 enters (eps1_mode) is the convention implementations legitimately differ on, and torch's
documentation states both forms:
    "torch"  the clamps above: the factors are left alone, eps1 bounds mean(r) and v_hat
             (torch.optim.Adafactor, whose docs call it a deviation from the paper)
    "paper"  eps1 added to every squared grad before the statistics, no clamps: the paper's
             Algorithms 4/5 (G^2 + eps1 1 1^T), as fairseq, HF transformers and torch-optimizer's
             Adafactor (_approx_sq_grad) compute it:
        r <- beta2_t r + (1 - beta2_t) mean_{-1}(g^2 + eps1);   c likewise over -2
        v <- beta2_t v + (1 - beta2_t) (g^2 + eps1)
        v_hat = r c / mean_{-2}(r) (factored) or v;   u = g / sqrt(v_hat)

A param with no elements has nothing to update: p is returned as it is and its state entries are
created empty (torch raises ZeroDivisionError there: RMS divides by sqrt(0);
reports/known/torch_adafactor_zero_numel.py). torch's foreach path (_multi_tensor_adafactor)
performs the same operations per param; it differs from the forloop path in rounding only.
torch keeps a per-param float32 step tensor, read by beta2_t and rho_t.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .common import (GradScaling, OptState, ascent, check_counter, decay_decoupled, drive, ema, held,
                     machine_epsilon, maybe_fp32, state_shape)
from .forms import DEVIATION, EQUIVALENT, FP32_HPARAMS, VARIANT, Form, ref
from .hparams import check_range, is_real, short, validated
from .spec import DECAY, GUARD, NO_PRECISION_ROLE, STEP_SIZE, OptimizerSpec, Role

EPS1_MODES = ("torch", "paper")
FACTORED = ("row_var", "col_var")
UNFACTORED = ("variance",)


@dataclass(frozen=True)
class AdafactorConvention:
    """Defaults: torch.optim.Adafactor."""

    eps1_mode: str = "torch"
    counter: str = "param"
    fp32_hparams: bool = False
    # how the counter is stored: torch's float32 tensor stops at 2**24 (oracle.common.COUNTER_FORMATS)
    counter_format: str = "exact"

    def __post_init__(self):
        if self.eps1_mode not in EPS1_MODES:
            raise ValueError(f"eps1_mode must be one of {EPS1_MODES}, got {self.eps1_mode!r}")
        check_counter(self.counter, self.counter_format)


TORCH_ADAFACTOR = AdafactorConvention()
# Shazeer & Stern 2018, Algorithms 4/5: eps1 added to the squared grads (fairseq, HF transformers,
# torch-optimizer's Adafactor), with torch's lr, schedule and decay around it.
PAPER_EPS_ADAFACTOR = AdafactorConvention(eps1_mode="paper")

DEFAULTS = {"lr": 1e-2, "beta2_decay": -0.8, "eps": (None, 1e-3), "d": 1.0, "weight_decay": 0.0,
            "maximize": False}
# eps1 guards the denominator (None: the param format's machine epsilon, checked in validate); eps2 is
# the floor of the param scale: for params with RMS below it, alpha_t = eps2 * rho_t, a step size.
# beta2_decay is an exponent (1 - t^c near 1 is formed on the host in float64), d a clip threshold.
ROLES = {"lr": Role(STEP_SIZE), "beta2_decay": Role(NO_PRECISION_ROLE, "c", low=None, checked=False),
         "eps": (Role(GUARD, "eps1", checked=False), Role(STEP_SIZE, "eps2")),
         "d": Role(NO_PRECISION_ROLE, low=1.0), "weight_decay": Role(DECAY, "wd"),
         "maximize": Role(NO_PRECISION_ROLE)}


def validate(hparams: list[dict]) -> list[dict]:
    """Fill defaults and hold each hyperparameter to its role (oracle.hparams); beta2_decay <= 0 and
    eps1 None or >= 0 (torch's constructor refuses the rest). ValueError naming the group."""
    return validated(hparams, DEFAULTS, ROLES, check_extra)


def check_extra(g: int, hp: dict) -> None:
    check_range(g, "beta2_decay", hp["beta2_decay"], low=None)
    if hp["beta2_decay"] > 0:
        raise ValueError(f"group {g}: beta2_decay={short(hp['beta2_decay'])} must be <= 0")
    eps1 = hp["eps"][0]
    if eps1 is not None and not is_real(eps1):
        raise ValueError(f"group {g}: eps[0]={short(eps1)} must be None or a real number")
    if eps1 is not None:
        check_range(g, "eps[0]", eps1)


def rms(x):
    """||x||_2 / sqrt(numel x); 0 for an empty x."""
    n = math.prod(np.shape(x))
    return np.linalg.norm(x) / math.sqrt(n) if n else 0.0


def second_moment(st, g2, rate, shape):
    """The factored (row/col means) or plain moving average of g2, in `st`; returns v_hat's factors
    (r, c) or (v, None)."""
    if len(shape) < 2:
        st["variance"] = ema(st.get("variance", np.zeros_like(g2)), g2, rate)
        return st["variance"], None
    r = st["row_var"] = ema(st.get("row_var", _zeros(g2, "row_var")), np.mean(g2, axis=-1, keepdims=True), rate)
    c = st["col_var"] = ema(st.get("col_var", _zeros(g2, "col_var")), np.mean(g2, axis=-2, keepdims=True), rate)
    return r, c


def _zeros(like, key):
    return np.zeros_like(like, shape=state_shape(key, np.shape(like)))


def direction(g, st, rate, eps1, mode: str):
    """u = g / sqrt(v_hat) with eps1 where `mode` puts it; updates the second moment in `st`."""
    shape = np.shape(g)
    if mode == "paper":
        r, c = second_moment(st, g * g + eps1, rate, shape)
        v_hat = r if c is None else r * c / np.mean(r, axis=-2, keepdims=True)
        return g / np.sqrt(v_hat)
    r, c = second_moment(st, g * g, rate, shape)
    v_hat = r if c is None else r * c / np.maximum(np.mean(r, axis=-2, keepdims=True), eps1)
    return g / np.sqrt(np.maximum(v_hat, eps1 * eps1))


def empty_state(g):
    shape = np.shape(g)
    return {k: _zeros(g, k) for k in (FACTORED if len(shape) >= 2 else UNFACTORED)}


def update(p, g, st, hp, t, conv: AdafactorConvention):
    """One Adafactor update of one param at its step t; returns (new p, new state entry)."""
    lr, wd, d, c = held(hp, conv, "lr", "weight_decay", "d", "beta2_decay")
    eps1, eps2 = (None if e is None else maybe_fp32(e, conv.fp32_hparams) for e in hp["eps"])
    eps1 = machine_epsilon(p) if eps1 is None else eps1
    st = dict(st)
    if math.prod(np.shape(p)) == 0:
        return p, {**empty_state(g), **{k: v for k, v in st.items()}}
    g = ascent(g, hp)
    rate = 1.0 - math.pow(t, c)
    rho = min(lr, 1.0 / math.sqrt(t))
    alpha = np.maximum(eps2, rms(p)) * rho
    if float(wd) != 0.0:
        p = decay_decoupled(p, lr, wd)
    u = direction(g, st, rate, eps1, conv.eps1_mode)
    return p - (alpha / np.maximum(1.0, rms(u) / d)) * u, st


def step(params, grads, state: OptState, hparams, conv: AdafactorConvention = TORCH_ADAFACTOR,
         scaling: GradScaling | None = None):
    """One optimizer step over all groups; returns (new params, new state)."""
    hps = validate(hparams)
    return drive(params, grads, state, hps, conv.counter, scaling,
                 lambda g, i, p, grad, st, t: update(p, grad, st, hps[g], t, conv), conv.counter_format)


def layout(shape) -> tuple:
    """The state a param of this shape carries: the row and column factors from 2 dims on."""
    return FACTORED if len(shape) >= 2 else UNFACTORED


# Every value of every option, classified against the reference form (oracle.forms; checked in
# float64 by tests/test_forms.py).
FORMS = {
    "eps1_mode": {
        "torch": ref("eps1 clamps mean(r) and v_hat, the factors left alone (torch.optim.Adafactor, documented)"),
        "paper": Form(VARIANT, "eps1 added to every squared grad before the row and column means: Shazeer & Stern "
                               "2018, Algorithms 4/5 (torch's docs state this form too)",
                      probe={"eps": (1e-2, 1e-3)}),
    },
    "counter": {
        "param": ref("one counter per param, advanced when it has a grad (torch.optim)"),
        "group": Form(VARIANT, "one step count for every param, advanced on every step: the paper's t "
                               "(optax.adafactor's count)"),
        "none": Form(DEVIATION, "no step counter: beta2_t and rho_t need t"),
    },
    "fp32_hparams": {False: ref("hyperparameters as given"),
                     True: Form(EQUIVALENT, "hyperparameters held as float32: rounding of the inputs only",
                                 roundoff=FP32_HPARAMS)},
    "counter_format": {
        "exact": ref("an exact integer counter"),
        "float32": Form(EQUIVALENT, "a float32 counter: exact up to 2**24 steps (torch); its saturation is judged "
                                    "by the long-horizon scenario", steps=300),
        "bfloat16": Form(DEVIATION, "a bfloat16 counter stops at 256: beta2_t frozen from there", steps=300),
    },
}

SPECS = (OptimizerSpec(name="adafactor", step=step, validate=validate, convention=TORCH_ADAFACTOR,
                       state_keys=FACTORED + UNFACTORED, layout=layout, reduces=True, forms=FORMS, defaults=DEFAULTS,
                       roles=ROLES, options=frozenset({"maximize"}), counter_hparams=("beta2_decay",),
                       summary="Adafactor, factored second moments (Shazeer & Stern 2018; torch.optim.Adafactor)",
                       presets={"torch.adafactor": TORCH_ADAFACTOR, "paper_eps.adafactor": PAPER_EPS_ADAFACTOR}),)
