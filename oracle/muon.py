"""Muon in float64: the specification (torch.optim.Muon).

For a 2-D param P (A x B) with grad G, in torch's order of operations (torch/optim/_muon.py,
_single_tensor_muon; K. Jordan, "Muon: An optimizer for hidden layers in neural networks", 2024,
https://kellerjordan.github.io/posts/muon/, and its code github.com/KellerJordan/Muon muon.py):

    B   <- mu*B + (1-mu)*G                     momentum_form="ema" (torch: buf.lerp_(grad, 1-mu);
                                               Jordan's muon.py); state momentum_buffer, starts at 0
           mu*B + G                            momentum_form="sum" (the equation in torch's docstring;
                                               Moonshot's Moonlight muon.py)
    M   <- mu*B + (1-mu)*G                     nesterov, ema (torch: grad.lerp(buf, mu))
           G + mu*B                            nesterov, sum
           B                                   otherwise
    X   <- M, transposed if A > B              gram_side="short": the Gram matrix X X^T is the smaller
                                               one (torch, Jordan)
    X   <- X / max(||X||_F, eps)               eps_mode="clamp" (torch: norm().clamp(min=eps));
           X / (||X||_F + eps)                 eps_mode="add" (Jordan's and Moonlight's muon.py)
    k times (ns_steps), with (a, b, c) = ns_coefficients:
        S <- X X^T
        X <- a*X + (b*S + c*S S) X             the quintic Newton-Schulz step: on each singular value
                                               s -> a*s + b*s^3 + c*s^5 (torch: two addmm)
    O   <- X, transposed back if A > B
    P   <- P * (1 - lr*wd)                     decoupled weight decay (torch: always, 1 at wd = 0)
    P   <- P - lr*r(A, B) * O                  r = sqrt(max(1, A/B))   adjust_lr_fn "original" or None
                                                                       (Jordan's muon.py)
                                               r = 0.2*sqrt(max(A, B)) adjust_lr_fn "match_rms_adamw"
                                               (Liu et al. 2025, "Muon is Scalable for LLM Training",
                                               arXiv:2502.16982, eq. 4: the update's RMS matches AdamW's)

The Newton-Schulz iteration does not produce U V^T of G's SVD but U S' V^T with S' ~ 0.7..1.2
(Jordan): what the polynomial gives is the update, so the coefficients and the step count are
hyperparameters and the spec applies exactly that polynomial. Since X (X^T X)^j = (X X^T)^j X, which
side the Gram matrix is formed on changes rounding only (gram_side), and since NS normalizes by the
norm, the two momentum forms give the same update wherever the norm is far above eps (the "sum"
buffer is the "ema" buffer divided by 1 - mu; the state differs).

Where it runs: torch and Jordan's code cast M to bfloat16 before the normalization and run the
whole iteration there (ns_dtype="bfloat16"); the result is added to the param in the param's dtype.
The spec is exact arithmetic whatever ns_dtype says; the option tells the derived tolerance where
the rounding happens (oracle.common.computed_in; oracle.compare.measuring.errmodel's matmul rule).
ns_dtype="compute" keeps the iteration in the param's compute dtype.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .common import GradScaling, OptState, check_counter, computed_in, decay_decoupled, drive, ema, held
from .forms import EQUIVALENT, FP32_HPARAMS, VARIANT, Form, ref
from .hparams import check_range, validated
from .spec import DECAY, GUARD, MOMENTUM_RATE, NO_PRECISION_ROLE, STEP_SIZE, OptimizerSpec, Role

MOMENTUM_FORMS = ("ema", "sum")
EPS_MODES = ("clamp", "add")
GRAM_SIDES = ("short", "rows")
NS_DTYPES = ("bfloat16", "compute")
ADJUST_LR_FNS = (None, "original", "match_rms_adamw")
# Jordan's quintic coefficients, torch's defaults (torch/optim/_muon.py DEFAULT_A/B/C)
JORDAN_COEFFICIENTS = (3.4445, -4.7750, 2.0315)
MAX_NS_STEPS = 100  # torch refuses ns_steps >= 100


@dataclass(frozen=True)
class MuonConvention:
    """Defaults: torch.optim.Muon."""

    momentum_form: str = "ema"
    eps_mode: str = "clamp"
    gram_side: str = "short"
    ns_dtype: str = "bfloat16"
    counter: str = "none"
    fp32_hparams: bool = False

    def __post_init__(self):
        for name, allowed in (("momentum_form", MOMENTUM_FORMS), ("eps_mode", EPS_MODES),
                              ("gram_side", GRAM_SIDES), ("ns_dtype", NS_DTYPES)):
            if getattr(self, name) not in allowed:
                raise ValueError(f"{name} must be one of {allowed}, got {getattr(self, name)!r}")
        check_counter(self.counter)


TORCH_MUON = MuonConvention()
# Jordan's muon.py (github.com/KellerJordan/Muon): X / (||X|| + eps), otherwise torch's
JORDAN_MUON = MuonConvention(eps_mode="add")
# Moonshot's Moonlight muon.py: buf = mu*buf + g, nesterov g + mu*buf, X / (||X|| + eps)
MOONLIGHT_MUON = MuonConvention(momentum_form="sum", eps_mode="add")

DEFAULTS = {"lr": 1e-3, "weight_decay": 0.1, "momentum": 0.95, "nesterov": True,
            "ns_coefficients": JORDAN_COEFFICIENTS, "eps": 1e-7, "ns_steps": 5, "adjust_lr_fn": None}
# torch takes any momentum >= 0 (a decay rate held near 1: its complement carries the grad);
# the coefficients are any finite numbers; ns_steps and adjust_lr_fn are checked by check_ns
ROLES = {"lr": Role(STEP_SIZE), "weight_decay": Role(DECAY, "wd"), "momentum": Role(MOMENTUM_RATE, "mu"),
         "nesterov": Role(NO_PRECISION_ROLE),
         "ns_coefficients": tuple(Role(NO_PRECISION_ROLE, s, low=None) for s in ("a", "b", "c")),
         "eps": Role(GUARD), "ns_steps": Role(NO_PRECISION_ROLE, checked=False),
         "adjust_lr_fn": Role(NO_PRECISION_ROLE, checked=False)}


def check_ns(g: int, hp: dict) -> None:
    """torch's rules: ns_steps an integer below 100 (refused at the first step), adjust_lr_fn one
    of None, "original", "match_rms_adamw" (refused by the constructor)."""
    n = hp["ns_steps"]
    if isinstance(n, (bool, np.bool_)) or not isinstance(n, (int, np.integer)):
        raise ValueError(f"group {g}: ns_steps={n!r} must be an integer")
    check_range(g, "ns_steps", n, low=0, high=MAX_NS_STEPS, high_open=True)
    if hp["adjust_lr_fn"] not in ADJUST_LR_FNS:
        raise ValueError(f"group {g}: adjust_lr_fn={hp['adjust_lr_fn']!r} must be one of {ADJUST_LR_FNS}")


def validate(hparams: list[dict]) -> list[dict]:
    """Fill defaults and hold each hyperparameter to its role (oracle.hparams); ValueError naming the group."""
    return validated(hparams, DEFAULTS, ROLES, check_ns)


def adjusted_lr(lr: float, shape, adjust_lr_fn) -> float:
    """lr scaled for an A x B param: sqrt(max(1, A/B)) (Jordan) or 0.2*sqrt(max(A, B)) (Moonshot)."""
    rows, cols = shape
    if adjust_lr_fn == "match_rms_adamw":
        return lr * (0.2 * math.sqrt(max(rows, cols)))
    return lr * math.sqrt(max(1.0, rows / cols))


def newton_schulz(x, coefficients, steps: int):
    """`steps` quintic Newton-Schulz steps on a normalized X (rows <= cols)."""
    a, b, c = coefficients
    for _ in range(steps):
        s = x @ x.T
        x = a * x + (b * s + c * (s @ s)) @ x
    return x


def orthogonalize(m, hp, eps, conv: MuonConvention, like):
    """O = NS(M): normalized, iterated in conv.ns_dtype, back in like's format (the param's)."""
    tall = conv.gram_side == "short" and m.shape[0] > m.shape[1]
    x = computed_in(m.T if tall else m, like if conv.ns_dtype == "compute" else conv.ns_dtype)
    norm = np.linalg.norm(x)
    x = x / (np.maximum(norm, eps) if conv.eps_mode == "clamp" else norm + eps)
    x = newton_schulz(x, hp["ns_coefficients"], hp["ns_steps"])
    return computed_in(x.T if tall else x, like)


def momentum_update(g, st, mu, nesterov: bool, conv: MuonConvention):
    """(the new buffer, what NS orthogonalizes)."""
    buf = st.get("momentum_buffer", np.zeros_like(g))
    if conv.momentum_form == "ema":
        buf = ema(buf, g, mu)
        return buf, ema(buf, g, mu) if nesterov else buf
    buf = mu * buf + g
    return buf, g + mu * buf if nesterov else buf


def update(p, g, st, hp, conv: MuonConvention):
    """One Muon update of one 2-D param; returns (new p, new state entry)."""
    if len(np.shape(p)) != 2:
        raise ValueError(f"Muon takes 2-D params only, got shape {np.shape(p)}")
    lr, wd, mu, eps = held(hp, conv, "lr", "weight_decay", "momentum", "eps")
    st = dict(st)
    st["momentum_buffer"], m = momentum_update(g, st, mu, hp["nesterov"], conv)
    o = orthogonalize(m, hp, eps, conv, like=p)
    p = decay_decoupled(p, lr, wd)
    return p - adjusted_lr(lr, np.shape(p), hp["adjust_lr_fn"]) * o, st


def step(params, grads, state: OptState, hparams, conv: MuonConvention = TORCH_MUON,
         scaling: GradScaling | None = None):
    """One optimizer step over all groups; returns (new params, new state)."""
    hps = validate(hparams)
    return drive(params, grads, state, hps, conv.counter, scaling,
                 lambda g, i, p, grad, st, t: update(p, grad, st, hps[g], conv))


# Every value of every option, classified against the reference form (oracle.forms; checked in
# float64 by tests/test_forms.py).
FORMS = {
    "momentum_form": {
        "ema": ref("buf = mu*buf + (1-mu)*g, nesterov (1-mu)*g + mu*buf (torch.optim.Muon's code: lerp; "
                   "Jordan's muon.py)"),
        "sum": Form(VARIANT, "buf = mu*buf + g, nesterov g + mu*buf: the equation of torch.optim.Muon's "
                             "docstring and Moonshot's Moonlight muon.py; the same update where ||M|| >> eps "
                             "(NS normalizes), a buffer 1/(1-mu) times larger; apart where eps is near ||M||",
                    probe={"eps": 10.0}),
    },
    "eps_mode": {
        "clamp": ref("X / max(||X||_F, eps) (torch.optim.Muon)"),
        "add": Form(VARIANT, "X / (||X||_F + eps): Jordan's muon.py and Moonlight's zeropower_via_newtonschulz5",
                    probe={"eps": 1e-1}),
    },
    "gram_side": {
        "short": ref("tall matrices transposed so X X^T is the smaller Gram matrix (torch, Jordan)"),
        "rows": Form(EQUIVALENT, "X X^T on the rows whatever the shape: X (X^T X)^j = (X X^T)^j X, the same "
                                 "update, more work and other rounding"),
    },
    "ns_dtype": {
        "bfloat16": ref("the Newton-Schulz iteration in bfloat16 (torch, Jordan, Moonlight)"),
        "compute": Form(EQUIVALENT, "the iteration in the param's compute dtype: the same update, other rounding"),
    },
    "counter": {
        "none": ref("no counter: nothing reads one (torch.optim.Muon keeps none)"),
        "param": Form(EQUIVALENT, "a per-param counter that nothing reads"),
        "group": Form(EQUIVALENT, "a per-group counter that nothing reads"),
    },
    "fp32_hparams": {False: ref("hyperparameters as given"),
                     True: Form(EQUIVALENT, "hyperparameters held as float32: rounding of the inputs only",
                                 roundoff=FP32_HPARAMS)},
}

SPECS = (OptimizerSpec(name="muon", step=step, validate=validate, convention=TORCH_MUON, forms=FORMS,
                       state_keys=("momentum_buffer",), defaults=DEFAULTS, roles=ROLES,
                       options=frozenset({"nesterov", "ns_coefficients", "ns_steps", "adjust_lr_fn"}),
                       param_ranks=(2,), reduces=True,
                       summary="Muon, momentum orthogonalized by Newton-Schulz, 2-D params only (torch.optim.Muon)",
                       presets={"torch.muon": TORCH_MUON, "jordan.muon": JORDAN_MUON,
                                "moonlight.muon": MOONLIGHT_MUON}),)
