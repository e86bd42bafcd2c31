"""Adam and AdamW in float64: the specification.

Per element, for a param p with grad g at step t (t counts from 1), in this
order (Kingma & Ba 2015, Algorithm 1; Loshchilov & Hutter 2019 for AdamW):

    g  <- -g                                   if maximize
    g  <- g + wd*p                             decay="l2"          (torch Adam); at wd == 0
                                               only with zero_decay="add" (apex; torch skips it)
    p  <- p * (1 - lr*wd)                      decay="decoupled"   (torch AdamW)
    m  <- b1*m + (1-b1)*g
    v  <- b2*v + (1-b2)*g^2
    bc1, bc2 = 1-b1^t, 1-b2^t   (both 1 when bias_correction is off;
                                 bc2 = 1 alone when bias_correction_v is off:
                                 m corrected, v not, optax's bias_correction_nu=False)
    amsgrad (the state max_exp_avg_sq holds vmax):
        amsgrad_form="max_raw"        vmax <- max(vmax, v); v' = vmax, corrected by bc2 below  (torch)
        amsgrad_form="max_corrected"  vmax <- max(vmax, v/bc2); v' = vmax, bc2 := 1 below     (optax)
    denom (eps_root: a hyperparameter, default 0):
        eps_mode="outside"            sqrt(v')/sqrt(bc2) + eps      (torch)
        eps_mode="outside_corrected"  sqrt(v'/bc2 + eps_root) + eps (apex, TE, DeepSpeed FusedAdam;
                                                                     optax with its eps_root)
        eps_mode="inside"             sqrt(v'/bc2 + eps)
        eps_mode="hat"                sqrt(v'') + eps, with the step size lr*sqrt(bc2)/bc1 below
                                      (Kingma & Ba 2015, end of section 2: "epsilon hat"; Keras 3
                                      Adam/AdamW, TF1 tf.train.AdamOptimizer). v'' is v' at v's own,
                                      uncorrected scale: v' itself, or bc2*vmax under max_corrected.
        eps_root != 0 is refused under "outside", "inside" and "hat": no implementation combines
        them, and a combined form would be a guess. With eps_root = 0 nothing is added.
    m' (momentum):
        momentum="plain"              m/bc1
        momentum="nesterov"           b1*m/(1 - b1^(t+1)) + (1-b1)*g/bc1
                                      (Dozat 2016; optax nadam/nadamw: scale_by_adam(nesterov=True))
        momentum="nesterov_bc1"       (b1*m + (1-b1)*g)/bc1: both terms under bc1 (Choi et al. 2019,
                                      Table 1, NAdam; the AlgoPerf NAdamW baseline; timm NAdamW)
    u  <- m' / denom                          (eps_mode="hat": u <- m' * sqrt(bc2) / denom, so
                                               p <- p - alpha_t*m/(sqrt(v) + eps), alpha_t =
                                               lr*sqrt(bc2)/bc1 under momentum="plain")
    u  <- u + wd*p                             decay="decoupled_update" (apex/TE adam_w_mode, optax
                                               adamw: the decay joins the update, scaled by lr with it)
    p  <- p - lr*u
    p  <- p*(1 - lr*wd)                        decay="decoupled_after" (the decay applied after the
                                               update, to the updated p: transformers' AdamW; a
                                               deviation, lr^2*wd*u apart from AdamW per step)

momentum="nadam" is torch.optim.NAdam's momentum-decay schedule (psi =
the hyperparameter momentum_decay; P = the state mu_product, 1 before the
first step, so P_t = mu_1 * ... * mu_t):

    mu_t  = b1*(1 - 0.5*0.96^(t*psi)),  mu_t+1 = b1*(1 - 0.5*0.96^((t+1)*psi))
    P    <- P * mu_t
    p    <- p - lr*(1 - mu_t)/(1 - P)        * g/denom
    p    <- p - lr*mu_t+1/(1 - P*mu_t+1)     * m/denom

with denom as above (torch: eps_mode="outside_corrected"; under "hat" denom/sqrt(bc2))
and g after the decay (decay="l2"; decoupled_weight_decay=True is decay="decoupled").

The two "outside" forms differ only by rounding in exact arithmetic; they are
separate options because a kernel's float32 error differs between them.
"hat" is another algorithm for the same eps value: with eps_hat = eps*sqrt(bc2)
it is "outside" (the paper's remark), so hat with eps is "outside" with
eps/sqrt(bc2) in its place, under every momentum and amsgrad form; it differs
from "outside" at the early steps, where sqrt(bc2) is small, and not at eps = 0.
Counter conventions are in oracle.common.drive; counter_format says how the
counter is stored (a float32 counter saturates at 2**24, see
oracle.common.COUNTER_FORMATS).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .common import (ZERO_DECAYS, GradScaling, OptState, add_l2, ascent, bias_corrections, check_counter,
                     decay_decoupled, drive, held)
from .forms import DEVIATION, EQUIVALENT, FP32_HPARAMS, VARIANT, Form, ref
from .hparams import validated
from .spec import (
    DECAY, FIRST_MOMENT_RATE, GUARD, NO_PRECISION_ROLE, SECOND_MOMENT_RATE, STEP_SIZE, OptimizerSpec, Role)

DECAYS = ("l2", "decoupled", "decoupled_update", "decoupled_after")
EPS_MODES = ("outside", "outside_corrected", "inside", "hat")
BC_PRECISIONS = ("float64", "compute")
AMSGRAD_FORMS = ("max_raw", "max_corrected")
MOMENTA = ("plain", "nesterov", "nesterov_bc1", "nadam")


@dataclass(frozen=True)
class AdamConvention:
    """What an implementation legitimately chooses. Defaults: torch.optim.AdamW."""

    decay: str = "decoupled"
    eps_mode: str = "outside"
    bias_correction: bool = True
    counter: str = "param"
    fp32_hparams: bool = False  # kernel holds lr, betas, eps, wd as float32
    # Where 1 - beta^t is formed: "float64" on the host (torch CPU, apex, TE), or
    # "compute" in the kernel's compute dtype (torch's CUDA fused and capturable
    # paths, torchao). The values are the same in exact arithmetic; with
    # "compute" the derived tolerance carries the rounding of beta^t through the
    # cancellation in 1 - beta2^t (about 1/(1 - beta2^t) times larger early on).
    bias_correction_precision: str = "float64"
    # False: only m is bias-corrected (bc2 = 1); optax's bias_correction_nu=False.
    bias_correction_v: bool = True
    amsgrad_form: str = "max_raw"
    momentum: str = "plain"
    counter_format: str = "exact"
    # decay="l2" at weight_decay == 0: "skip" the term or "add" 0*p (oracle.common.ZERO_DECAYS;
    # they differ only for an infinite or NaN param).
    zero_decay: str = "skip"

    def __post_init__(self):
        for name, allowed in (("bias_correction_precision", BC_PRECISIONS), ("decay", DECAYS),
                              ("eps_mode", EPS_MODES), ("amsgrad_form", AMSGRAD_FORMS), ("momentum", MOMENTA),
                              ("zero_decay", ZERO_DECAYS)):
            if getattr(self, name) not in allowed:
                raise ValueError(f"{name} must be one of {allowed}, got {getattr(self, name)!r}")
        check_counter(self.counter, self.counter_format)


TORCH_ADAM = AdamConvention(decay="l2")
TORCH_ADAMW = AdamConvention(decay="decoupled")
APEX_ADAMW = AdamConvention(decay="decoupled_update", eps_mode="outside_corrected", counter="group",
                            fp32_hparams=True)
# torch.optim.NAdam: decoupled_weight_decay=False / True.
TORCH_NADAM = AdamConvention(decay="l2", eps_mode="outside_corrected", momentum="nadam")
TORCH_NADAMW = AdamConvention(decay="decoupled", eps_mode="outside_corrected", momentum="nadam")
# optax 0.2.8: one int32 count for the whole optimizer, advanced on every update
# (counter="group" with one group); denominator sqrt(v_hat + eps_root) + eps;
# adamw/nadamw add wd*p to the update before the learning rate scales it.
# optax.adam has no decay: chain(add_decayed_weights(wd), adam(lr)) is decay="l2", and
# add_decayed_weights adds wd*p whatever wd is (zero_decay="add").
OPTAX_ADAM = AdamConvention(decay="l2", eps_mode="outside_corrected", counter="group", zero_decay="add")
OPTAX_ADAMW = AdamConvention(decay="decoupled_update", eps_mode="outside_corrected", counter="group")
OPTAX_NADAM = AdamConvention(decay="l2", eps_mode="outside_corrected", counter="group", momentum="nesterov",
                             zero_decay="add")
OPTAX_NADAMW = AdamConvention(decay="decoupled_update", eps_mode="outside_corrected", counter="group",
                              momentum="nesterov")
# optax.amsgrad (scale_by_amsgrad): the running max of the corrected v_hat; with
# bias_correction_nu=False the max of the raw v, never corrected (m still is).
OPTAX_AMSGRAD = AdamConvention(decay="l2", eps_mode="outside_corrected", counter="group",
                               amsgrad_form="max_corrected", zero_decay="add")
OPTAX_AMSGRAD_NU_UNCORRECTED = AdamConvention(decay="l2", eps_mode="outside_corrected", counter="group",
                                              bias_correction_v=False, zero_decay="add")
# Keras 3 keras.optimizers.AdamW (keras/src/optimizers/adamw.py, adam.py, base_optimizer.py):
#   decay     BaseOptimizer._apply_weight_decay: variable - variable*wd*lr, before update_step
#             (applied to the variables left after _filter_empty_gradients)       -> decay="decoupled"
#   eps       Adam.update_step: alpha = lr*sqrt(1 - b2^t)/(1 - b1^t);
#             variable -= m*alpha/(sqrt(v) + epsilon) ("epsilon hat", its docstring) -> eps_mode="hat"
#   amsgrad   v_hat = max(v_hat, v), then sqrt(v_hat) + epsilon                  -> amsgrad_form="max_raw"
#   counter   one `iterations` variable per optimizer, advanced by every apply() whatever
#             grads are None; t = iterations + 1                                  -> counter="group"
#   beta^t    ops.power(cast(beta, variable.dtype), cast(t, variable.dtype)), 1 - beta^t in the
#             variable's dtype                               -> bias_correction_precision="compute"
#   hparams   lr a floatx (float32) Variable, wd and beta cast to the variable's dtype, epsilon
#             and 1 - beta Python floats entering float32 ops                    -> fp32_hparams=True
# Not expressed by an option (so an exact-arithmetic match, other rounding or other non-finite
# behaviour): the moments as m += (g - m)*(1 - b1), v += (g^2 - v)*(1 - b2); 1 - beta rounded as
# round(1 - beta) rather than 1 - round(beta); the decay as p - p*wd*lr, which turns an infinite
# param NaN (inf - inf) even at wd = 0, where p*(1 - lr*wd) keeps it infinite; lr float32 even
# for a float64 variable. The constructor's defaults (epsilon=1e-7, weight_decay=0.004) are
# hyperparameters, not convention.
KERAS_ADAMW = AdamConvention(decay="decoupled", eps_mode="hat", counter="group", fp32_hparams=True,
                             bias_correction_precision="compute")
# transformers' own AdamW (transformers/optimization.py, deprecated for torch.optim.AdamW): the paper's
# efficient step size lr*sqrt(bc2)/bc1 over sqrt(v) + eps, then p <- p - lr*wd*p on the updated param.
# The decay order makes it a deviation of AdamW (oracle.forms): a named library, never a pass.
TRANSFORMERS_ADAMW = AdamConvention(decay="decoupled_after", eps_mode="hat")

# eps_root: optax's term inside the square root; momentum_decay: torch NAdam's psi,
# read only under momentum="nadam" (default torch's 4e-3).
DEFAULTS = {"lr": 1e-3, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 0.0,
            "amsgrad": False, "maximize": False, "eps_root": 0.0, "momentum_decay": 4e-3}
ROLES = {"lr": Role(STEP_SIZE), "betas": (Role(FIRST_MOMENT_RATE, "beta1"), Role(SECOND_MOMENT_RATE, "beta2")),
         "eps": Role(GUARD), "weight_decay": Role(DECAY, "wd"), "eps_root": Role(GUARD),
         # psi only shapes NAdam's momentum schedule 0.96 ** (t * psi): nothing held near 0 or 1
         "amsgrad": Role(NO_PRECISION_ROLE), "maximize": Role(NO_PRECISION_ROLE),
         "momentum_decay": Role(NO_PRECISION_ROLE)}


def validate(hparams: list[dict]) -> list[dict]:
    """Fill defaults and hold each hyperparameter to its role (oracle.hparams); ValueError naming the group."""
    return validated(hparams, DEFAULTS, ROLES)


def moment_keys(hp: dict) -> tuple:
    return ("exp_avg", "exp_avg_sq", "max_exp_avg_sq") if hp["amsgrad"] else ("exp_avg", "exp_avg_sq")


def init_state(p: np.ndarray, hp: dict, conv: "AdamConvention | None" = None) -> dict:
    st = {key: np.zeros_like(p) for key in moment_keys(hp)}
    if conv is not None and conv.momentum == "nadam":
        st["mu_product"] = np.float64(1.0)  # a scalar per param, as torch keeps it
    return st


def initialised(st: dict, p, hp: dict, conv: AdamConvention) -> dict:
    """st with the initial value of every entry it lacks; nothing is built when it lacks none (the
    oracle's large-tensor step runs this once per slice: two zero arrays each time cost 10%)."""
    keys = moment_keys(hp) + (("mu_product",) if conv.momentum == "nadam" else ())
    return st if all(key in st for key in keys) else {**init_state(p, hp, conv), **st}


def moments(st, g, b1, b2, b3):
    """m <- b1*m + b3*g (b3 = 1-b1 for Adam); v <- b2*v + (1-b2)*g^2."""
    return b1 * st["exp_avg"] + b3 * g, b2 * st["exp_avg_sq"] + (1.0 - b2) * g * g


def check_eps_root(hparams: list[dict], eps_mode: str) -> None:
    """eps_root is defined inside the sqrt of the corrected v ("outside_corrected") only: refused
    under "outside", "inside" and "hat"."""
    for g, hp in enumerate(hparams):
        if hp.get("eps_root", 0.0) != 0 and eps_mode != "outside_corrected":
            raise ValueError(f"group {g}: eps_root={hp['eps_root']!r} needs eps_mode='outside_corrected' "
                             f"(sqrt(v/bc2 + eps_root) + eps); this convention has eps_mode={eps_mode!r}")


def denominator(v, bc2, eps, eps_mode, eps_root=0.0):
    """The denominator of the update. Under "hat" v is at its uncorrected scale (hat_moment) and
    bc2 is not applied here: the step size carries sqrt(bc2) (update)."""
    if eps_mode == "hat":
        return np.sqrt(v) + eps
    if eps_mode == "outside":
        return np.sqrt(v) / np.sqrt(bc2) + eps
    if eps_mode == "outside_corrected":
        vhat = v / bc2
        # nothing added when eps_root is 0: the derived error bounds of the
        # forms without eps_root see exactly their own operations
        return np.sqrt(vhat + eps_root if eps_root else vhat) + eps
    return np.sqrt(v / bc2 + eps)


def one_minus_power(b, t, like, conv: AdamConvention):
    """1 - b^t, on the host in float64 or as array operations in the compute
    dtype ("compute": an error-tracking array type (oracle.compare.measuring.errmodel)
    then sees the power and the cancellation)."""
    if conv.bias_correction_precision == "compute":
        return 1.0 - np.full_like(like, b) ** t
    return 1.0 - math.pow(b, t)


def corrections(b1, b2, t, like, conv: AdamConvention):
    """(bc1, bc2) under the convention's bias correction."""
    bc1, bc2 = bias_corrections(b1, b2, t, conv.bias_correction)
    if conv.bias_correction and conv.bias_correction_precision == "compute":
        bc1, bc2 = one_minus_power(b1, t, like, conv), one_minus_power(b2, t, like, conv)
    if not conv.bias_correction_v:
        bc2 = 1.0
    return bc1, bc2


def second_moment(st, v, bc2, amsgrad: bool, conv: AdamConvention):
    """(v', bc2 left to apply) after the amsgrad running max, if any."""
    if not amsgrad:
        return v, bc2
    if conv.amsgrad_form == "max_raw":
        v = st["max_exp_avg_sq"] = np.maximum(st["max_exp_avg_sq"], v)
        return v, bc2
    v = st["max_exp_avg_sq"] = np.maximum(st["max_exp_avg_sq"], v / bc2)
    return v, 1.0


def hat_moment(v, bc2, amsgrad: bool, conv: AdamConvention):
    """v' at v's own, uncorrected scale, where eps_mode="hat" adds eps: as it is, or, under
    amsgrad_form="max_corrected" (a running max of v/bc2), bc2*vmax."""
    if amsgrad and conv.amsgrad_form == "max_corrected":
        return v * bc2
    return v


def first_moment(m, g, b1, t, bc1, conv: AdamConvention):
    """m' for momentum "plain", "nesterov" and "nesterov_bc1"."""
    if conv.momentum == "plain":
        return m / bc1
    if conv.momentum == "nesterov_bc1":
        return (b1 * m + (1.0 - b1) * g) / bc1
    bc1_next = one_minus_power(b1, t + 1, m, conv) if conv.bias_correction else 1.0
    return b1 * (m / bc1_next) + (1.0 - b1) * (g / bc1)


def nadam_apply(p, g, m, denom, st, lr, b1, psi, t, like=None):
    """torch NAdam's two-term step with the momentum-decay schedule: mu and mu' host floats, or,
    given `like`, 0-dim array operations of its type with t a tensor (torch's compiled and
    capturable paths: an error-tracking array then counts each rounding)."""
    if like is None:
        mu = b1 * (1.0 - 0.5 * math.pow(0.96, t * psi))
        mu_next = b1 * (1.0 - 0.5 * math.pow(0.96, (t + 1) * psi))
    else:
        step = np.full_like(like, t, shape=())
        mu = b1 * (1.0 - 0.5 * 0.96 ** (step * psi))
        mu_next = b1 * (1.0 - 0.5 * 0.96 ** ((step + 1.0) * psi))
    prod = st["mu_product"] = st["mu_product"] * mu
    p = p - (lr * (1.0 - mu) / (1.0 - prod)) * (g / denom)
    return p - (lr * mu_next / (1.0 - prod * mu_next)) * (m / denom)


def update(p, g, st, hp, t, conv: AdamConvention):
    """One Adam(W) update of one param; returns (new p, new state entry)."""
    lr, eps, wd, eps_root, (b1, b2) = held(hp, conv, "lr", "eps", "weight_decay", "eps_root", "betas")
    st = dict(initialised(st, p, hp, conv))
    g = ascent(g, hp)
    if conv.decay == "l2":
        g = add_l2(g, p, wd, conv.zero_decay)
    elif conv.decay == "decoupled":
        p = decay_decoupled(p, lr, wd)
    m, v = st["exp_avg"], st["exp_avg_sq"] = moments(st, g, b1, b2, 1.0 - b1)
    bc1, bc2 = corrections(b1, b2, t, p, conv)
    if conv.eps_mode == "hat":
        # Kingma & Ba 2015, end of section 2: alpha_t = lr*sqrt(bc2)/bc1, m/(sqrt(v) + eps_hat)
        v, _ = second_moment(st, v, bc2, hp["amsgrad"], conv)
        denom = denominator(hat_moment(v, bc2, hp["amsgrad"], conv), bc2, eps, conv.eps_mode)
    else:
        v, bc2 = second_moment(st, v, bc2, hp["amsgrad"], conv)
        denom = denominator(v, bc2, eps, conv.eps_mode, eps_root)
    if conv.momentum == "nadam":
        denom = denom / np.sqrt(bc2) if conv.eps_mode == "hat" else denom
        p = nadam_apply(p, g, m, denom, st, lr, b1, held(hp, conv, "momentum_decay"), t)
    else:
        u = first_moment(m, g, b1, t, bc1, conv)
        u = u * np.sqrt(bc2) / denom if conv.eps_mode == "hat" else u / denom
        if conv.decay == "decoupled_update":
            u = u + wd * p
        p = p - lr * u
    return (p * (1.0 - lr * wd) if conv.decay == "decoupled_after" else p), st


def step(params, grads, state: OptState, hparams, conv: AdamConvention = TORCH_ADAMW,
         scaling: GradScaling | None = None):
    """One optimizer step over all groups; returns (new params, new state)."""
    hps = validate(hparams)
    check_eps_root(hps, conv.eps_mode)
    return drive(params, grads, state, hps, conv.counter, scaling,
                 lambda g, i, p, grad, st, t: update(p, grad, st, hps[g], t, conv), conv.counter_format,
                 elementwise=True)


# Every value of every option, classified against the reference form (oracle.forms; the kinds are
# checked in float64 by tests/test_forms.py). The decay forms depend on the name: see DECAY_FORMS.
FORMS = {
    "eps_mode": {
        "outside": ref("Kingma & Ba 2015, Algorithm 1: m_hat/(sqrt(v_hat) + eps); torch.optim.Adam"),
        "outside_corrected": Form(EQUIVALENT, "sqrt(v/bc2) = sqrt(v)/sqrt(bc2): the same update, other rounding "
                                              "(apex, TransformerEngine, DeepSpeed FusedAdam, optax)"),
        "inside": Form(DEVIATION, "the eps hyperparameter put inside the square root, sqrt(v_hat + eps): what optax "
                                  "calls eps_root (a hyperparameter of its own, with eps_mode='outside_corrected'), "
                                  "not eps; for tiny grads the step scale is sqrt(eps), not eps", probe={"eps": 1e-3}),
        "hat": Form(VARIANT, "Kingma & Ba 2015, end of section 2 (the efficient order of Algorithm 1): "
                             "alpha_t = lr*sqrt(1 - b2^t)/(1 - b1^t), m/(sqrt(v) + eps_hat), eps added to the "
                             "uncorrected sqrt(v): Keras 3 Adam/AdamW, TF1 tf.train.AdamOptimizer. Equal to "
                             "'outside' with eps/sqrt(1 - b2^t) as its eps (the paper's eps_hat = "
                             "eps*sqrt(1 - b2^t)): the same eps is another update, observable at the early steps",
                    probe={"eps": 1e-3}),
    },
    "bias_correction": {
        True: ref("Kingma & Ba 2015, Algorithm 1 and section 3"),
        False: Form(VARIANT, "no bias correction: apex FusedAdam's documented bias_correction=False; "
                             "Kingma & Ba 2015 section 3 derive the correction as an addition"),
    },
    "counter": {
        "param": ref("one counter per param, advanced when it has a grad (torch.optim)"),
        "group": Form(VARIANT, "one counter per param group, advanced on every step: apex FusedAdam, "
                               "TransformerEngine FusedAdam, optax (its `count`)"),
        "none": Form(DEVIATION, "no step counter: Adam's bias corrections need t"),
    },
    "fp32_hparams": {False: ref("hyperparameters as given"),
                     True: Form(EQUIVALENT, "lr, betas, eps, wd held as float32: rounding of the inputs only",
                                 roundoff=FP32_HPARAMS)},
    "bias_correction_precision": {
        "float64": ref("1 - beta^t on the host in float64"),
        "compute": Form(EQUIVALENT, "1 - beta^t formed in the compute dtype: the same value, other rounding "
                                    "(torch's CUDA fused and capturable paths, torchao)"),
    },
    "bias_correction_v": {
        True: ref("both moments corrected"),
        False: Form(VARIANT, "only m bias-corrected: optax scale_by_adam's documented bias_correction_nu=False"),
    },
    "amsgrad_form": {
        "max_raw": ref("Reddi et al. 2018, Algorithm 2 (AMSGrad): the running max of v; torch amsgrad=True"),
        "max_corrected": Form(VARIANT, "the running max of v/bc2: optax scale_by_amsgrad (documented)",
                              probe={"amsgrad": True}),
    },
    "momentum": {
        "plain": ref("Kingma & Ba 2015, Algorithm 1"),
        "nesterov": Form(VARIANT, "Nesterov momentum, Dozat 2016 (Incorporating Nesterov Momentum into Adam), "
                                  "section 3 with a constant beta1: optax nadam (scale_by_adam nesterov=True)"),
        "nesterov_bc1": Form(VARIANT, "Nesterov momentum with one bias correction for both terms, "
                                      "(b1*m + (1-b1)*g)/(1 - b1^t): NAdam as Choi et al. 2019 (On Empirical "
                                      "Comparisons of Optimizers for Deep Learning) define it in Table 1, the "
                                      "AlgoPerf NAdamW baseline (mlcommons/algorithmic-efficiency), timm NAdamW; "
                                      "it parts from 'nesterov' at the early steps, where 1 - b1^(t+1) and "
                                      "1 - b1^t differ"),
        "nadam": Form(VARIANT, "Dozat 2016 section 3 with its momentum schedule mu_t = beta1(1 - 0.5*0.96^(t*psi)): "
                               "torch.optim.NAdam"),
    },
    "counter_format": {
        "exact": ref("an exact integer counter"),
        "float32": Form(EQUIVALENT, "a float32 counter: exact up to 2**24 steps (torch keeps per-param counters "
                                    "as float32 tensors); its saturation is judged by the long-horizon scenario",
                        steps=300),
        "bfloat16": Form(DEVIATION, "a bfloat16 counter stops at 256: bias corrections frozen from there",
                         steps=300),
    },
    "zero_decay": {
        "skip": ref("the L2 term left out at weight_decay == 0 (torch: `if weight_decay != 0`)"),
        "add": Form(EQUIVALENT, "0*p added at weight_decay == 0: the same for every finite param (apex, optax); "
                                "the two part only on an infinite or NaN param, which the finite checks judge",
                    probe={"weight_decay": 0.0}),
    },
}
DECAY_FORMS = {
    "adam": {
        "l2": ref("Kingma & Ba 2015 with L2 regularisation: g + wd*p enters the moments (torch.optim.Adam)"),
        "decoupled": Form(DEVIATION, "decoupled decay p*(1 - lr*wd) under the name Adam: that is AdamW "
                                     "(Loshchilov & Hutter 2019); bitsandbytes' Adam does it"),
        "decoupled_update": Form(DEVIATION, "decoupled decay added to the update under the name Adam: AdamW's "
                                            "decay (apex adam_w_mode=True), not Adam's"),
        "decoupled_after": Form(DEVIATION, "decoupled decay applied after the update, to the updated param: "
                                           "(p - lr*u)*(1 - lr*wd), lr^2*wd*u per step from Loshchilov & Hutter's "
                                           "p*(1 - lr*wd) - lr*u (transformers' AdamW, transformers/optimization.py)",
                                probe={"lr": 0.1, "weight_decay": 0.5}),
    },
    "adamw": {
        "decoupled": ref("Loshchilov & Hutter 2019, Algorithm 2: p*(1 - lr*wd) (torch.optim.AdamW)"),
        "decoupled_update": Form(EQUIVALENT, "p - lr*(u + wd*p) = p*(1 - lr*wd) - lr*u: the same update "
                                             "(apex/TransformerEngine adam_w_mode, optax adamw)"),
        "l2": Form(DEVIATION, "L2 decay through the moments under the name AdamW: that is Adam's decay, "
                              "which Loshchilov & Hutter 2019 show is not equivalent"),
        "decoupled_after": Form(DEVIATION, "decoupled decay applied after the update, to the updated param: "
                                           "(p - lr*u)*(1 - lr*wd), lr^2*wd*u per step from Loshchilov & Hutter's "
                                           "p*(1 - lr*wd) - lr*u (transformers' AdamW, transformers/optimization.py)",
                                probe={"lr": 0.1, "weight_decay": 0.5}),
    },
}


def _spec(name, conv, summary, presets):
    return OptimizerSpec(name=name, step=step, validate=validate, convention=conv, state_keys=("exp_avg", "exp_avg_sq"),
                         defaults=DEFAULTS, options=frozenset({"amsgrad", "maximize", "eps_root", "momentum_decay"}),
                         optional_state={"max_exp_avg_sq": "amsgrad"}, summary=summary,
                         forms={**FORMS, "decay": DECAY_FORMS[name]}, presets=presets, roles=ROLES,
                         complex_form="components")


SPECS = (_spec("adam", TORCH_ADAM, "Adam, L2 decay (torch.optim.Adam)",
               {"torch.adam": TORCH_ADAM, "torch.nadam": TORCH_NADAM, "optax.adam": OPTAX_ADAM,
                "optax.amsgrad": OPTAX_AMSGRAD, "optax.amsgrad.nu_uncorrected": OPTAX_AMSGRAD_NU_UNCORRECTED,
                "optax.nadam": OPTAX_NADAM}),
         _spec("adamw", TORCH_ADAMW, "AdamW, decoupled decay (torch.optim.AdamW)",
               {"torch.adamw": TORCH_ADAMW, "torch.nadamw": TORCH_NADAMW, "optax.adamw": OPTAX_ADAMW,
                "optax.nadamw": OPTAX_NADAMW, "keras.adamw": KERAS_ADAMW, "transformers.adamw": TRANSFORMERS_ADAMW,
                "apex.adamw": APEX_ADAMW}))
