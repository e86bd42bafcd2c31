"""RAdam in float64: the specification (torch.optim.RAdam).

Per element, for a param p with grad g at step t (t counts from 1), in torch's order of operations
(torch/optim/radam.py, _single_tensor_radam; Liu et al. 2020, "On the Variance of the Adaptive
Learning Rate and Beyond", Algorithm 2):

    g   <- -g                                  if maximize
    p   <- p * (1 - lr*wd)                     decoupled_weight_decay (only when wd != 0)
    g   <- g + wd*p                            otherwise (L2; only when wd != 0)
    m   <- b1*m + (1-b1)*g                     (torch: exp_avg.lerp_(g, 1 - b1))
    v   <- b2*v + (1-b2)*g^2
    bc1, bc2 = 1 - b1^t, 1 - b2^t
    rho_inf = 2/(1 - b2) - 1
    rho_t   = rho_inf - 2*t*b2^t/bc2           the length of the approximated SMA
    rho_t > 5 (rectified):
        r   = sqrt((rho_t - 4)(rho_t - 2) rho_inf / ((rho_inf - 4)(rho_inf - 2) rho_t))
        p  <- p - (m/bc1) * lr * (sqrt(bc2)/(sqrt(v) + eps)) * r
    otherwise:
        p  <- p - (m/bc1) * lr                 warmup="sgd": SGD with bias-corrected momentum
                                               warmup="skip": no update (the authors' RAdam with
                                               degenerated_to_sgd=False, LiyuanLucasLiu/RAdam radam.py)

eps is added to the uncorrected sqrt(v) and sqrt(bc2) multiplies the quotient: torch's form (the
paper's Algorithm 2 writes sqrt(v_hat) without eps). The threshold 5 is torch's and the authors'
code's (the paper's Algorithm 2 has rho_t > 4; pytorch/pytorch PR #58968 chose 5 "as common practice").
Under torch.compile (and capturable) t is the float32 step tensor itself, so bc1, bc2, rho_t and r
are float32 tensor operations (rho_t cancels: rho_inf - 2t·b2^t/bc2); schedule_precision="compute"
forms them as array operations, so the derived tolerance counts their roundings.
rho_t, r, bc1 and bc2 are host floats (float64) in torch's forloop and foreach paths; the foreach path
folds them into one per-tensor factor ((sqrt(v) + eps)/(sqrt(bc2)*lr*r/bc1))^-1 before multiplying
by m: the same value, other rounding.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .adam import moments
from .common import GradScaling, OptState, ascent, check_counter, decay_by_flag, drive, held
from .forms import DEVIATION, EQUIVALENT, FP32_HPARAMS, VARIANT, Form, ref
from .hparams import validated
from .spec import DECAY, FIRST_MOMENT_RATE, GUARD, NO_PRECISION_ROLE, SECOND_MOMENT_RATE, STEP_SIZE, OptimizerSpec, Role

WARMUPS = ("sgd", "skip")
SCHEDULE_PRECISIONS = ("float64", "compute")
THRESHOLD = 5.0  # torch's rectification threshold on rho_t


@dataclass(frozen=True)
class RAdamConvention:
    """Defaults: torch.optim.RAdam."""

    warmup: str = "sgd"
    counter: str = "param"
    counter_format: str = "exact"
    fp32_hparams: bool = False
    # bc1, bc2, rho_t and r: "float64" host floats, "compute" array operations in the compute dtype
    schedule_precision: str = "float64"

    def __post_init__(self):
        if self.warmup not in WARMUPS:
            raise ValueError(f"warmup must be one of {WARMUPS}, got {self.warmup!r}")
        if self.schedule_precision not in SCHEDULE_PRECISIONS:
            raise ValueError(f"schedule_precision must be one of {SCHEDULE_PRECISIONS}, "
                             f"got {self.schedule_precision!r}")
        check_counter(self.counter, self.counter_format)


TORCH_RADAM = RAdamConvention()
# LiyuanLucasLiu/RAdam's RAdam(degenerated_to_sgd=False): no update before rectification starts
NO_WARMUP_STEP_RADAM = RAdamConvention(warmup="skip")

DEFAULTS = {"lr": 1e-3, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 0.0, "decoupled_weight_decay": False,
            "maximize": False}
ROLES = {"lr": Role(STEP_SIZE), "betas": (Role(FIRST_MOMENT_RATE, "beta1"), Role(SECOND_MOMENT_RATE, "beta2")),
         "eps": Role(GUARD), "weight_decay": Role(DECAY, "wd"), "decoupled_weight_decay": Role(NO_PRECISION_ROLE),
         "maximize": Role(NO_PRECISION_ROLE)}


def validate(hparams: list[dict]) -> list[dict]:
    """Fill defaults and hold each hyperparameter to its role (oracle.hparams); ValueError naming the group."""
    return validated(hparams, DEFAULTS, ROLES)


def rectification(b2: float, t: int) -> float | None:
    """r_t when rho_t > 5, else None (the unrectified warmup step); host float64 as in torch."""
    rho_inf = 2.0 / (1.0 - b2) - 1.0
    rho_t = rho_inf - 2.0 * t * math.pow(b2, t) / (1.0 - math.pow(b2, t))
    if not rho_t > THRESHOLD:
        return None
    return math.sqrt((rho_t - 4.0) * (rho_t - 2.0) * rho_inf / ((rho_inf - 4.0) * (rho_inf - 2.0) * rho_t))


def update(p, g, st, hp, t, conv: RAdamConvention):
    """One RAdam update of one param; returns (new p, new state entry)."""
    lr, eps, wd, (b1, b2) = held(hp, conv, "lr", "eps", "weight_decay", "betas")
    st = {"exp_avg": np.zeros_like(p), "exp_avg_sq": np.zeros_like(p), **st}
    p, g = decay_by_flag(p, ascent(g, hp), lr, wd, hp["decoupled_weight_decay"])
    m, v = st["exp_avg"], st["exp_avg_sq"] = moments(st, g, b1, b2, 1.0 - b1)
    if conv.schedule_precision == "compute":
        bc1, bc2, r = compute_schedule(b1, b2, t, p)
        m_hat = m / bc1
        if r is not None:
            return p - m_hat * lr * (np.sqrt(bc2) / (np.sqrt(v) + eps)) * r, st
        return (p if conv.warmup == "skip" else p - m_hat * lr), st
    m_hat = m / (1.0 - math.pow(b1, t))
    r = rectification(b2, t)
    if r is not None:
        return p - m_hat * lr * (math.sqrt(1.0 - math.pow(b2, t)) / (np.sqrt(v) + eps)) * r, st
    return (p if conv.warmup == "skip" else p - m_hat * lr), st


def compute_schedule(b1: float, b2: float, t: int, like):
    """(bc1, bc2, r or None) as 0-dim array operations of `like`'s type on the step t as a tensor,
    in torch's order (_single_tensor_radam with a tensor step; `x ** 0.5` is sqrt there)."""
    step = np.full_like(like, t, shape=())
    bc1, bc2 = 1.0 - b1 ** step, 1.0 - b2 ** step
    rho_inf = 2.0 / (1.0 - b2) - 1.0
    rho_t = rho_inf - 2.0 * step * b2 ** step / bc2
    if not rho_t > THRESHOLD:
        return bc1, bc2, None
    return bc1, bc2, np.sqrt((rho_t - 4.0) * (rho_t - 2.0) * rho_inf / ((rho_inf - 4.0) * (rho_inf - 2.0) * rho_t))


def step(params, grads, state: OptState, hparams, conv: RAdamConvention = TORCH_RADAM,
         scaling: GradScaling | None = None):
    """One optimizer step over all groups; returns (new params, new state)."""
    hps = validate(hparams)
    return drive(params, grads, state, hps, conv.counter, scaling,
                 lambda g, i, p, grad, st, t: update(p, grad, st, hps[g], t, conv), conv.counter_format,
                 elementwise=True)


# Every value of every option, classified against the reference form (oracle.forms; checked in
# float64 by tests/test_forms.py).
FORMS = {
    "warmup": {
        "sgd": ref("before rectification (rho_t <= 5) SGD with the bias-corrected momentum, lr*m/bc1: Liu et al. "
                   "2020 Algorithm 2 (torch.optim.RAdam; LiyuanLucasLiu/RAdam degenerated_to_sgd=True)"),
        "skip": Form(VARIANT, "no update before rectification: LiyuanLucasLiu/RAdam radam.py with "
                              "degenerated_to_sgd=False (its issue #54)"),
    },
    "schedule_precision": {
        "float64": ref("bc1, bc2, rho_t and r as host floats (torch's eager paths)"),
        "compute": Form(EQUIVALENT, "bc1, bc2, rho_t and r formed in the compute dtype from the float32 step "
                                    "tensor: the same values, other rounding (torch.compile'd and capturable "
                                    "torch.optim.RAdam)"),
    },
    "counter": {
        "param": ref("one counter per param, advanced when it has a grad (torch.optim)"),
        "group": Form(VARIANT, "one counter per param group advanced on every step (per-group kernels; optax's "
                               "`count`): a param without a grad on some steps sees a later t in rho_t and the "
                               "bias corrections"),
        "none": Form(DEVIATION, "no step counter: rho_t and the bias corrections need t"),
    },
    "counter_format": {
        "exact": ref("an exact integer counter"),
        "float32": Form(EQUIVALENT, "a float32 counter: exact up to 2**24 steps (torch keeps per-param counters "
                                    "as float32 tensors); its saturation is judged by the long-horizon scenario",
                        steps=300),
        "bfloat16": Form(DEVIATION, "a bfloat16 counter stops at 256: rho_t and the bias corrections frozen "
                                    "from there", steps=300),
    },
    "fp32_hparams": {False: ref("hyperparameters as given"),
                     True: Form(EQUIVALENT, "lr, betas, eps, wd held as float32: rounding of the inputs only",
                                 roundoff=FP32_HPARAMS)},
}

SPECS = (OptimizerSpec(name="radam", step=step, validate=validate, convention=TORCH_RADAM, forms=FORMS,
                       state_keys=("exp_avg", "exp_avg_sq"), defaults=DEFAULTS, roles=ROLES,
                       options=frozenset({"maximize", "decoupled_weight_decay"}),
                       summary="RAdam, Adam with its adaptive step rectified (torch.optim.RAdam)",
                       presets={"torch.radam": TORCH_RADAM, "liyuanlucasliu.radam.no_sgd": NO_WARMUP_STEP_RADAM},
                       complex_form="components"),)
