"""LAMB in float64: the specification, built from Adam's pieces.

Stages, in order (each a function below, so a mismatch can be pinned to one):

  1. clip   G = ||all grads of all groups||_2 (after inv_scale);
            g <- g / (G/max_grad_norm)  when max_grad_norm > 0 and G > max_grad_norm
            (apex FusedLAMB; the paper has no clipping). max_grad_norm = 0 means
            zero_max_grad_norm="off"         no clipping
            zero_max_grad_norm="zero_grads"  g <- g/inf (0 for finite g, NaN for inf) when G > 0:
                                             apex's kernel divides by G/0 = inf
  2. moments (adam.moments), with b3 = 1-b1 if grad_averaging else 1 (apex);
            decay="l2" adds wd*p to g first (apex adam_w_mode=False);
            decay="decoupled" sets p <- p*(1 - lr*wd) first: the norms below see the
            decayed p and the trust ratio scales the Adam part only
  3. update
       bias_correction="moments"    u = (m/bc1) / (sqrt(v/bc2 + eps_root) + eps)  (paper, apex;
                                    optax with eps_root; eps_root = 0 adds nothing)
       bias_correction="step_size"  u = m / (sqrt(v) + eps), and the step
                                    size becomes lr*sqrt(bc2)/bc1          (DeepSpeed FusedLamb)
       bias_correction="step_size_bc1"  u = m / (sqrt(v) + eps), step size lr/bc1
                                    (m debiased through the step size, v never)
       bias_correction="none"       u = m / (sqrt(v) + eps)
       eps_root != 0 is refused except under "moments" (no implementation has it elsewhere)
       decay="decoupled_update"     u <- u + wd*p                          (paper, apex default, optax)
  4. trust ratio, per tensor: r = phi(||p||) / (||u|| + trust_eps), and r = 1 when
       (trust_eps is the hyperparameter, or the group's eps with trust_eps="eps"; phi's upper
       bound is the smaller of the norm_upper hyperparameter and the convention's norm_upper)
       phi(||p||) or ||u|| is 0; phi(x) = min(max(x, norm_lower), norm_upper) (the
       paper's phi; the defaults 0 and inf make it the identity, and with
       norm_lower > 0 a zero-norm tensor gets norm_lower/||u||, as the paper's formula)
       trust="decay_only"  r is used only when wd != 0 (apex without use_nvlamb); else 1
       trust="always"      r always used (paper Algorithm 2; apex use_nvlamb; optax)
       clamp=True          r <- clip(r, min_coeff, max_coeff) (DeepSpeed FusedLamb)
       clamp=True, clamp_lower=False   r <- min(r, max_coeff) (an upper-only clip)
  5. apply  p <- p - step_size * r * u

Departures from the paper's Algorithm 2: the paper has no grad clipping, no
grad averaging switch, and leaves phi(0)/0 undefined (all implementations
here use r = 1 for a zero norm, so a zero-initialized layer still moves);
DeepSpeed computes the ratio on the uncorrected update and clamps it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .adam import moments
from .common import (GradScaling, OptState, add_l2, as_float64_named, bias_corrections, check_counter,
                     check_inv_scale, check_structure, decay_decoupled, drive, held, maybe_fp32)
from .forms import DEVIATION, EQUIVALENT, FP32_HPARAMS, OTHER, VARIANT, Form, ref
from .hparams import check_range, validated
from .spec import (
    DECAY, FIRST_MOMENT_RATE, GUARD, NO_PRECISION_ROLE, SECOND_MOMENT_RATE, STEP_SIZE, OptimizerSpec, Role)

DECAYS = ("decoupled_update", "l2", "decoupled")
BIAS_CORRECTIONS = ("moments", "step_size", "step_size_bc1", "none")
TRUSTS = ("decay_only", "always")
TRUST_EPS = ("hparam", "eps")
ZERO_MAX_GRAD_NORMS = ("off", "zero_grads")


@dataclass(frozen=True)
class LambConvention:
    """Defaults: apex FusedLAMB."""

    decay: str = "decoupled_update"
    bias_correction: str = "moments"
    trust: str = "decay_only"
    clamp: bool = False
    global_clip: bool = True
    counter: str = "group"
    fp32_hparams: bool = False
    clamp_lower: bool = True  # with clamp: False clips from above only
    zero_max_grad_norm: str = "off"
    counter_format: str = "exact"
    # Where the eps of ||u|| + eps in the trust ratio comes from: "hparam" (the trust_eps
    # hyperparameter, default 0) or "eps" (the group's own eps, as pytorch-optimizer's Lamb).
    trust_eps: str = "hparam"
    # An upper clamp on the weight norm that the implementation fixes itself (pytorch-optimizer's
    # Lamb.clamp = 10, a class constant, not a hyperparameter); the smaller of it and norm_upper applies.
    norm_upper: float = math.inf

    def __post_init__(self):
        for name, allowed in (("decay", DECAYS), ("bias_correction", BIAS_CORRECTIONS), ("trust", TRUSTS),
                              ("zero_max_grad_norm", ZERO_MAX_GRAD_NORMS)):
            if getattr(self, name) not in allowed:
                raise ValueError(f"{name} must be one of {allowed}, got {getattr(self, name)!r}")
        if self.trust_eps not in TRUST_EPS:
            raise ValueError(f"trust_eps must be one of {TRUST_EPS}, got {self.trust_eps!r}")
        if not self.norm_upper > 0:
            raise ValueError(f"norm_upper must be > 0, got {self.norm_upper!r}")
        check_counter(self.counter, self.counter_format)


APEX_LAMB = LambConvention()
NVLAMB = LambConvention(trust="always")
PAPER_LAMB = LambConvention(trust="always", global_clip=False, counter="param")
DEEPSPEED_LAMB = LambConvention(bias_correction="step_size", trust="always", clamp=True,
                                global_clip=False, counter="param")
# optax.lamb 0.2.8: chain(scale_by_adam(eps, eps_root), add_decayed_weights,
# scale_by_trust_ratio(), scale_by_learning_rate): one count for all params, no clipping.
OPTAX_LAMB = LambConvention(trust="always", global_clip=False)
# pytorch-optimizer 4.1.0 Lamb (optimizer/lamb.py, defaults: weight_decouple, no rectify, adam_debias
# off, pre_norm off): p <- p*(1 - lr*wd) after the moments; u = m/(sqrt(v) + eps) with the step size
# lr/bc1 (v never debiased); r = min(||p||, 10)/(||u|| + eps) always, 1 if either norm is 0;
# p <- p - (lr/bc1)*r*u; group['step'] counts; no clipping unless pre_norm.
PYTORCH_OPTIMIZER_LAMB = LambConvention(decay="decoupled", bias_correction="step_size_bc1", trust="always",
                                        global_clip=False, trust_eps="eps", norm_upper=10.0)

DEFAULTS = {"lr": 1e-3, "betas": (0.9, 0.999), "eps": 1e-6, "weight_decay": 0.01,
            "grad_averaging": True, "max_grad_norm": 1.0, "min_coeff": 0.01, "max_coeff": 10.0,
            "eps_root": 0.0, "trust_eps": 0.0, "norm_lower": 0.0, "norm_upper": math.inf}
_BOUND = Role(NO_PRECISION_ROLE)  # a flag, a clip threshold or a bound on the trust ratio
ROLES = {"lr": Role(STEP_SIZE), "betas": (Role(FIRST_MOMENT_RATE, "beta1"), Role(SECOND_MOMENT_RATE, "beta2")),
         "eps": Role(GUARD), "weight_decay": Role(DECAY, "wd"), "eps_root": Role(GUARD),
         "trust_eps": Role(GUARD), "grad_averaging": _BOUND, "max_grad_norm": _BOUND, "min_coeff": _BOUND,
         "max_coeff": Role(NO_PRECISION_ROLE, checked=False), "norm_lower": _BOUND,
         "norm_upper": Role(NO_PRECISION_ROLE, checked=False)}  # both bounded by another (check_bounds)


def validate(hparams: list[dict]) -> list[dict]:
    """Fill defaults and hold each hyperparameter to its role (oracle.hparams); the trust ratio's bounds
    ordered. ValueError naming the group."""
    return validated(hparams, DEFAULTS, ROLES, check_bounds)


def check_bounds(g: int, hp: dict) -> None:
    check_range(g, "max_coeff", hp["max_coeff"], low=hp["min_coeff"])
    if hp["norm_upper"] != math.inf:  # inf (no upper bound) is the default
        check_range(g, "norm_upper", hp["norm_upper"], low=hp["norm_lower"])


def clip_factor(grads, inv_scale: float, max_grad_norm: float, zero_max_grad_norm: str = "off") -> float:
    """Stage 1: divisor for every grad, from the global norm over all groups
    (inf: every grad is zeroed, see zero_max_grad_norm)."""
    norm = np.sqrt(sum(np.sum(np.square(g * inv_scale)) for group in grads for g in group if g is not None))
    if max_grad_norm == 0 and zero_max_grad_norm == "zero_grads":
        return math.inf if norm > 0 else 1.0
    return norm / max_grad_norm if max_grad_norm > 0 and norm > max_grad_norm else 1.0


def raw_update(p, g, st, hp, t, conv: LambConvention):
    """Stages 2-3: new moments and the update direction u, and the step size."""
    lr, eps, wd, (b1, b2) = held(hp, conv, "lr", "eps", "weight_decay", "betas")
    if conv.decay == "l2":
        g = add_l2(g, p, wd, "add")  # apex adds wd*p unconditionally
    b3 = 1.0 - b1 if hp["grad_averaging"] else 1.0
    m, v = moments({"exp_avg": st.get("exp_avg", 0 * p), "exp_avg_sq": st.get("exp_avg_sq", 0 * p)}, g, b1, b2, b3)
    bc1, bc2 = bias_corrections(b1, b2, t, conv.bias_correction != "none")
    if conv.bias_correction == "moments":
        eps_root = held(hp, conv, "eps_root")
        vhat = v / bc2
        u, step_size = (m / bc1) / (np.sqrt(vhat + eps_root if eps_root else vhat) + eps), lr
    elif conv.bias_correction == "step_size_bc1":
        u, step_size = m / (np.sqrt(v) + eps), lr / bc1
    else:
        u, step_size = m / (np.sqrt(v) + eps), lr * math.sqrt(bc2) / bc1
    if conv.decay == "decoupled_update":
        u = u + wd * p
    return {"exp_avg": m, "exp_avg_sq": v}, u, step_size


def trust_ratio(p, u, hp, conv: LambConvention) -> float:
    """Stage 4: per-tensor trust ratio."""
    if conv.trust == "decay_only" and maybe_fp32(hp["weight_decay"], conv.fp32_hparams) == 0:
        return 1.0
    pn, un = phi(np.linalg.norm(p), hp, conv), np.linalg.norm(u)
    trust_eps = hp["eps"] if conv.trust_eps == "eps" else hp["trust_eps"]
    r = pn / (un + trust_eps if trust_eps else un) if pn != 0 and un != 0 else 1.0
    if not conv.clamp:
        return r
    return min(max(r, hp["min_coeff"]), hp["max_coeff"]) if conv.clamp_lower else min(r, hp["max_coeff"])


def phi(norm, hp, conv: LambConvention | None = None):
    """The paper's clamp of the weight norm; the identity at the defaults (0, inf)
    without touching the value, so derived error bounds see no extra operation."""
    upper = min(hp["norm_upper"], conv.norm_upper if conv is not None else math.inf)
    if hp["norm_lower"] > 0 and norm < hp["norm_lower"]:
        return hp["norm_lower"]
    if upper < math.inf and norm > upper:
        return upper
    return norm


def check_eps_root(hparams: list[dict], conv: LambConvention) -> None:
    for g, hp in enumerate(hparams):
        if hp["eps_root"] != 0 and conv.bias_correction != "moments":
            raise ValueError(f"group {g}: eps_root={hp['eps_root']!r} needs bias_correction='moments' "
                             f"(sqrt(v/bc2 + eps_root) + eps); this convention has {conv.bias_correction!r}")


def update(p, g, st, hp, t, conv: LambConvention, clip: float):
    if conv.decay == "decoupled":
        p = decay_decoupled(p, *held(hp, conv, "lr", "weight_decay"))
    # clip = inf zeroes the grads: g*0 is g/inf (0 for finite g, NaN for inf or NaN)
    g = g * 0.0 if clip == math.inf else g / clip
    new_st, u, step_size = raw_update(p, g, st, hp, t, conv)
    # keep the other entries (the per-param "step" counter) alongside the new moments
    return p - step_size * trust_ratio(p, u, hp, conv) * u, {**st, **new_st}


def step(params, grads, state: OptState, hparams, conv: LambConvention = APEX_LAMB,
         scaling: GradScaling | None = None):
    hps = validate(hparams)
    check_structure(params, grads, state, hps)  # before the clip norm reads the grads
    inv_scale = 1.0 if scaling is None else check_inv_scale(scaling.inv_scale)
    # One optimizer-wide max_grad_norm (apex reads its constructor default); group 0 carries it.
    arrays = [[None if g is None else as_float64_named(f"group {k} param {i}: grad", g) for i, g in enumerate(group)]
              for k, group in enumerate(grads)]
    check_eps_root(hps, conv)
    clip = (clip_factor(arrays, inv_scale, hps[0]["max_grad_norm"], conv.zero_max_grad_norm)
            if conv.global_clip and hps else 1.0)
    return drive(params, grads, state, hps, conv.counter, scaling,
                 lambda g, i, p, grad, st, t: update(p, grad, st, hps[g], t, conv, clip), conv.counter_format)


# Every value of every option, classified against the reference form, the paper's Algorithm 2
# (oracle.forms; checked in float64 by tests/test_forms.py).
_CLAMP_PROBE = {"min_coeff": 0.2, "max_coeff": 0.5}
FORMS = {
    "decay": {
        "decoupled_update": ref("You et al. 2020, Algorithm 2: r = m_hat/(sqrt(v_hat) + eps) + wd*p, then the "
                                "trust ratio (apex, optax)"),
        "l2": Form(VARIANT, "L2 decay in the grad: apex FusedLAMB's documented adam_w_mode=False"),
        "decoupled": Form(DEVIATION, "p*(1 - lr*wd) before the update, outside the trust ratio, which then scales "
                                     "the Adam part alone (pytorch-optimizer's Lamb, weight_decouple)"),
    },
    "bias_correction": {
        "moments": ref("You et al. 2020, Algorithm 2: m and v bias-corrected before the ratio"),
        "none": Form(VARIANT, "no bias correction: You et al., arXiv:1904.00962 v3, Algorithm 2; apex FusedLAMB's "
                              "documented bias_correction=False"),
        "step_size": Form(DEVIATION, "the trust ratio taken on the uncorrected update and lr*sqrt(bc2)/bc1 applied "
                                     "after it: the step is not lr*phi(||w||) but sqrt(bc2)/bc1 times that "
                                     "(DeepSpeed's FusedLamb)"),
        "step_size_bc1": Form(DEVIATION, "lr/bc1 applied after the trust ratio has normalised the update: the step "
                                         "is 1/(1 - beta1^t) times lr*phi(||w||), x10 at step 1 "
                                         "(pytorch-optimizer's Lamb)"),
    },
    "trust": {
        "always": ref("You et al. 2020, Algorithm 2: the trust ratio on every layer (apex use_nvlamb, optax)"),
        "decay_only": Form(VARIANT, "the trust ratio only where weight_decay != 0: apex FusedLAMB's documented "
                                    "default (use_nvlamb=False)", probe={"weight_decay": 0.0}),
    },
    "clamp": {False: ref("the ratio unclipped"),
              True: Form(VARIANT, "the trust ratio clipped to [min_coeff, max_coeff]: DeepSpeed FusedLamb's "
                                  "documented min_coeff/max_coeff", probe=_CLAMP_PROBE)},
    "clamp_lower": {True: ref("with clamp: both bounds"),
                    False: Form(VARIANT, "with clamp: the upper bound only (max_coeff)", probe=_CLAMP_PROBE,
                                needs={"clamp": True})},
    "global_clip": {False: ref("no grad clipping (the paper)"),
                    True: Form(VARIANT, "the grads clipped to a global norm first: apex FusedLAMB's documented "
                                        "max_grad_norm", probe={"max_grad_norm": 1.0})},
    "counter": {"param": ref("one counter per param"),
                "group": Form(VARIANT, "one counter per param group, advanced on every step (apex, optax)"),
                "none": Form(DEVIATION, "no step counter: the bias corrections need t")},
    "fp32_hparams": {False: ref("hyperparameters as given"),
                     True: Form(EQUIVALENT, "hyperparameters held as float32: rounding of the inputs only",
                                 roundoff=FP32_HPARAMS)},
    "zero_max_grad_norm": {
        "off": ref("max_grad_norm = 0: no clipping"),
        "zero_grads": Form(DEVIATION, "max_grad_norm = 0 divides every grad by G/0 = inf: the grads become 0 "
                                      "(apex FusedLAMB's kernel)", probe={"max_grad_norm": 0.0},
                           needs={"global_clip": True}),
    },
    "counter_format": {
        "exact": ref("an exact integer counter"),
        "float32": Form(EQUIVALENT, "a float32 counter: exact up to 2**24 steps; its saturation is judged by the "
                                    "long-horizon scenario", steps=300, probe={}),
        "bfloat16": Form(DEVIATION, "a bfloat16 counter: it stops at 256", steps=300, probe={}),
    },
    "trust_eps": {
        "hparam": ref("||u|| + trust_eps (default 0) in the ratio's denominator"),
        "eps": Form(VARIANT, "the group's eps added to ||u||: optax scale_by_trust_ratio's documented eps",
                    probe={"eps": 1e-2}),
    },
    "norm_upper": {
        math.inf: ref("phi the identity from above"),
        OTHER: Form(VARIANT, "phi(z) = min(z, upper): You et al. 2020, section 3 (phi's upper bound gamma_u)",
                    needs={"norm_upper": 10.0}),
    },
}

SPECS = (OptimizerSpec(name="lamb", step=step, validate=validate, convention=APEX_LAMB, reference=PAPER_LAMB, forms=FORMS,
         state_keys=("exp_avg", "exp_avg_sq"),
                       defaults=DEFAULTS, roles=ROLES, reduces=True, summary="LAMB (apex FusedLAMB)",
                       presets={"apex.lamb": APEX_LAMB, "nvlamb": NVLAMB, "paper.lamb": PAPER_LAMB,
                                "deepspeed.lamb": DEEPSPEED_LAMB, "pytorch_optimizer.lamb": PYTORCH_OPTIMIZER_LAMB,
                                "optax.lamb": OPTAX_LAMB}),)
