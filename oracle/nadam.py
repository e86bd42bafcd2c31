"""NAdam in float64: the specification (torch.optim.NAdam).

Per element, for a param p with grad g at step t (t counts from 1; psi = momentum_decay; P = the
state mu_product, 1 before the first step), in torch's order of operations (torch/optim/nadam.py,
_single_tensor_nadam; Dozat 2016, "Incorporating Nesterov Momentum into Adam", section 3 with its
momentum schedule):

    g   <- -g                                  if maximize
    p   <- p * (1 - lr*wd)                     decoupled_weight_decay (NAdamW; only when wd != 0)
    g   <- g + wd*p                            otherwise (L2; only when wd != 0: torch's `if weight_decay != 0`)
    mu   = b1*(1 - 0.5*0.96^(t*psi))           the momentum coefficient of this step
    mu'  = b1*(1 - 0.5*0.96^((t+1)*psi))       and of the next
    P   <- P * mu
    m   <- b1*m + (1-b1)*g                     (torch: exp_avg.lerp_(g, 1 - b1): the same in exact arithmetic)
    v   <- b2*v + (1-b2)*g^2
    denom = sqrt(v/bc2) + eps,  bc2 = 1 - b2^t  eps_mode="outside_corrected" (torch's forloop path)
          = sqrt(v)/sqrt(bc2) + eps            eps_mode="outside" (torch's foreach path)
    p   <- p - lr*(1 - mu)/(1 - P)     * g/denom
    p   <- p - lr*mu'/(1 - P*mu')      * m/denom

The scalar coefficients (mu, mu', the two step sizes) are host floats (float64) in torch's forloop
and foreach paths; P is a 0-dim tensor in the default dtype (float32 in the engine's runs), so it is
state here (a scalar, oracle.common.SCALAR_STATE) and its rounding is the implementation's.
Under torch.compile (and capturable) t is the float32 step tensor itself, so bc2, mu, mu' and
the two step sizes are float32 tensor operations: `schedule_precision="compute"` forms them as
array operations (the same values in exact arithmetic; the derived tolerance counts their
roundings). The two eps forms are the same in exact arithmetic; they differ by where a float32 or bfloat16
kernel rounds, so each is its own option. The math is oracle.adam's (moments, denominator,
nadam_apply: torch.optim.Adam's nadam option is this update), held here as an optimizer of its own.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .adam import denominator, moments, nadam_apply
from .common import GradScaling, OptState, ascent, check_counter, decay_by_flag, drive, held
from .forms import DEVIATION, EQUIVALENT, FP32_HPARAMS, VARIANT, Form, ref
from .hparams import validated
from .spec import DECAY, FIRST_MOMENT_RATE, GUARD, NO_PRECISION_ROLE, SECOND_MOMENT_RATE, STEP_SIZE, OptimizerSpec, Role

EPS_MODES = ("outside_corrected", "outside")
SCHEDULE_PRECISIONS = ("float64", "compute")


@dataclass(frozen=True)
class NAdamConvention:
    """Defaults: torch.optim.NAdam (its forloop path)."""

    eps_mode: str = "outside_corrected"
    counter: str = "param"
    counter_format: str = "exact"
    fp32_hparams: bool = False
    # bc2 and the mu schedule: "float64" host floats, "compute" array operations in the compute dtype
    schedule_precision: str = "float64"

    def __post_init__(self):
        if self.eps_mode not in EPS_MODES:
            raise ValueError(f"eps_mode must be one of {EPS_MODES}, got {self.eps_mode!r}")
        if self.schedule_precision not in SCHEDULE_PRECISIONS:
            raise ValueError(f"schedule_precision must be one of {SCHEDULE_PRECISIONS}, "
                             f"got {self.schedule_precision!r}")
        check_counter(self.counter, self.counter_format)


TORCH_NADAM = NAdamConvention()
# torch's foreach path: sqrt(v) / sqrt(bc2) + eps (torch._foreach_div_ by the host's sqrt(bc2))
TORCH_NADAM_FOREACH = NAdamConvention(eps_mode="outside")

DEFAULTS = {"lr": 2e-3, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 0.0, "momentum_decay": 4e-3,
            "decoupled_weight_decay": False, "maximize": False}
# psi only shapes the schedule 0.96 ** (t * psi): nothing held near 0 or 1
ROLES = {"lr": Role(STEP_SIZE), "betas": (Role(FIRST_MOMENT_RATE, "beta1"), Role(SECOND_MOMENT_RATE, "beta2")),
         "eps": Role(GUARD), "weight_decay": Role(DECAY, "wd"), "momentum_decay": Role(NO_PRECISION_ROLE, "psi"),
         "decoupled_weight_decay": Role(NO_PRECISION_ROLE), "maximize": Role(NO_PRECISION_ROLE)}


def validate(hparams: list[dict]) -> list[dict]:
    """Fill defaults and hold each hyperparameter to its role (oracle.hparams); ValueError naming the group."""
    return validated(hparams, DEFAULTS, ROLES)


def init_state(p) -> dict:
    return {"exp_avg": np.zeros_like(p), "exp_avg_sq": np.zeros_like(p), "mu_product": np.float64(1.0)}


def update(p, g, st, hp, t, conv: NAdamConvention):
    """One NAdam update of one param; returns (new p, new state entry)."""
    lr, eps, wd, psi, (b1, b2) = held(hp, conv, "lr", "eps", "weight_decay", "momentum_decay", "betas")
    st = {**init_state(p), **st}
    p, g = decay_by_flag(p, ascent(g, hp), lr, wd, hp["decoupled_weight_decay"])
    m, v = st["exp_avg"], st["exp_avg_sq"] = moments(st, g, b1, b2, 1.0 - b1)
    if conv.schedule_precision == "compute":
        like = np.full_like(p, 0.0, shape=())
        denom = denominator(v, 1.0 - np.full_like(like, b2) ** t, eps, conv.eps_mode)
        return nadam_apply(p, g, m, denom, st, lr, b1, psi, t, like), st
    denom = denominator(v, 1.0 - b2 ** t, eps, conv.eps_mode)
    return nadam_apply(p, g, m, denom, st, lr, b1, psi, t), st


def step(params, grads, state: OptState, hparams, conv: NAdamConvention = TORCH_NADAM,
         scaling: GradScaling | None = None):
    """One optimizer step over all groups; returns (new params, new state)."""
    hps = validate(hparams)
    return drive(params, grads, state, hps, conv.counter, scaling,
                 lambda g, i, p, grad, st, t: update(p, grad, st, hps[g], t, conv), conv.counter_format,
                 elementwise=True)


# Every value of every option, classified against the reference form (oracle.forms; checked in
# float64 by tests/test_forms.py).
FORMS = {
    "eps_mode": {
        "outside_corrected": ref("Dozat 2016 with eps outside sqrt(v_hat): torch.optim.NAdam's forloop path"),
        "outside": Form(EQUIVALENT, "sqrt(v)/sqrt(bc2) = sqrt(v/bc2): the same update, other rounding "
                                    "(torch.optim.NAdam's foreach path)"),
    },
    "schedule_precision": {
        "float64": ref("bc2 and the mu schedule as host floats (torch's eager paths)"),
        "compute": Form(EQUIVALENT, "bc2 and the mu schedule formed in the compute dtype from the float32 step "
                                    "tensor: the same values, other rounding (torch.compile'd and capturable "
                                    "torch.optim.NAdam)"),
    },
    "counter": {
        "param": ref("one counter per param, advanced when it has a grad (torch.optim)"),
        "group": Form(VARIANT, "one counter per param group advanced on every step, as per-group kernels and "
                               "Keras (its `iterations`) keep: a param without a grad on some steps sees a later "
                               "t in its schedule mu_t and its bias correction"),
        "none": Form(DEVIATION, "no step counter: the schedule mu_t and the bias correction need t"),
    },
    "counter_format": {
        "exact": ref("an exact integer counter"),
        "float32": Form(EQUIVALENT, "a float32 counter: exact up to 2**24 steps (torch keeps per-param counters "
                                    "as float32 tensors); its saturation is judged by the long-horizon scenario",
                        steps=300),
        "bfloat16": Form(DEVIATION, "a bfloat16 counter stops at 256: the schedule and bias correction frozen "
                                    "from there", steps=300),
    },
    "fp32_hparams": {False: ref("hyperparameters as given"),
                     True: Form(EQUIVALENT, "lr, betas, eps, wd, psi held as float32: rounding of the inputs only",
                                 roundoff=FP32_HPARAMS)},
}

SPECS = (OptimizerSpec(name="nadam", step=step, validate=validate, convention=TORCH_NADAM, forms=FORMS,
                       state_keys=("exp_avg", "exp_avg_sq"), defaults=DEFAULTS, roles=ROLES,
                       options=frozenset({"maximize", "momentum_decay", "decoupled_weight_decay"}),
                       summary="NAdam, Nesterov momentum with Dozat's schedule (torch.optim.NAdam)",
                       presets={"torch.nadam.forloop": TORCH_NADAM, "torch.nadam.foreach": TORCH_NADAM_FOREACH},
                       complex_form="components"),)
