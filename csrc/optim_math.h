// The per-element update math of every fused optimizer, written once.
//
// Each function here is called, unchanged, from the CPU loops (cpu_kernels.cpp)
// and from the CUDA functors (cuda_*.cu), for plain, master-weight and
// capturable variants alike. The equations and their order follow the
// float64 specification in oracle/ (adam.py, adagrad.py, lamb.py, sgd.py, lion.py); the
// conventions implemented are the ones fused.CONVENTIONS names.
//
// Per-step scalars (bias corrections, lr/bc1, 1 - lr*wd, ...) are computed
// once per step and group in double by the make_*scalars functions: on the
// host normally, on the device (one thread) in capturable mode. The element
// functions take them rounded to float and compute in float.
#pragma once

#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define OPTIM_HD __host__ __device__ inline
#else
#define OPTIM_HD inline
#endif

namespace optim {

// ---------------------------------------------------------------- Adam(W)

// Hyperparameters of one group, as the user gave them (double).
struct AdamHyper {
  double lr, beta1, beta2, eps, weight_decay;
  bool decoupled;        // true: torch AdamW decay p *= 1 - lr*wd; false: L2, g += wd*p
  bool bias_correction;
};

// What the element function needs, per step and group.
// The decay branches on `decoupled` (uniform per call: the CPU loop is
// unswitched, the CUDA warps do not diverge). It is not written branch-free
// (g + 0*p): 0*p is NaN for a NaN or Inf param, which would poison the grad,
// and so the moments, where the specification never reads p.
struct AdamScalars {
  float beta1, one_minus_beta1, beta2, one_minus_beta2;
  float eps, l2_wd, decay_factor;  // l2_wd = wd (L2); decay_factor = 1 - lr*wd (decoupled)
  float step_size;                 // lr / bc1
  float inv_sqrt_bc2;              // 1 / sqrt(bc2)
  float inv_scale;                 // grad unscaling (1 without a grad scaler)
  int decoupled;                   // AdamW decay (p *= decay_factor) instead of L2 (g += l2_wd*p)
  int l2;                          // L2 with wd != 0: at wd == 0 the term is left out (zero_decay "skip")
  int skip;                        // found_inf: the step does nothing
};

// bc = 1 - beta^t with an exact integer power t (oracle.common.bias_corrections).
OPTIM_HD double bias_correction(double beta, double t, bool enabled) {
  return enabled ? 1.0 - pow(beta, t) : 1.0;
}

OPTIM_HD AdamScalars make_scalars(const AdamHyper& h, double step, double lr,
                                       double inv_scale, bool skip) {
  const double bc1 = bias_correction(h.beta1, step, h.bias_correction);
  const double bc2 = bias_correction(h.beta2, step, h.bias_correction);
  AdamScalars s;
  s.beta1 = float(h.beta1);
  s.one_minus_beta1 = float(1.0 - h.beta1);
  s.beta2 = float(h.beta2);
  s.one_minus_beta2 = float(1.0 - h.beta2);
  s.eps = float(h.eps);
  s.l2_wd = h.decoupled ? 0.0f : float(h.weight_decay);
  s.decay_factor = h.decoupled ? float(1.0 - lr * h.weight_decay) : 1.0f;
  s.step_size = float(lr / bc1);
  s.inv_sqrt_bc2 = float(1.0 / sqrt(bc2));
  s.inv_scale = float(inv_scale);
  s.decoupled = h.decoupled ? 1 : 0;
  s.l2 = !h.decoupled && h.weight_decay != 0.0 ? 1 : 0;
  s.skip = skip ? 1 : 0;
  return s;
}

// One Adam(W) element, oracle/adam.py with decay "l2" or "decoupled",
// eps_mode "outside" and zero_decay "skip":
//   g <- g*inv_scale (+ wd*p for L2, wd != 0);  p <- p*(1 - lr*wd) (decoupled)
//   m <- b1*m + (1-b1)*g;  v <- b2*v + (1-b2)*g^2
//   p <- p - (lr/bc1) * m / (sqrt(v)/sqrt(bc2) + eps)
OPTIM_HD void adam_update(float& p, float& m, float& v, float grad, const AdamScalars& s) {
  float g = grad * s.inv_scale;
  if (s.decoupled) {
    p = p * s.decay_factor;
  } else if (s.l2) {
    g = g + s.l2_wd * p;
  }
  m = s.beta1 * m + s.one_minus_beta1 * g;
  v = s.beta2 * v + s.one_minus_beta2 * (g * g);
  const float denom = sqrtf(v) * s.inv_sqrt_bc2 + s.eps;
  p = p - s.step_size * m / denom;
}

// ---------------------------------------------------------------- Adagrad

struct AdagradHyper {
  double lr, lr_decay, eps, weight_decay;
  bool decoupled;  // apex adagrad_w_mode: p -= clr*(g/std + wd*p); else L2 g += wd*p
};

struct AdagradScalars {
  float clr;  // lr / (1 + (t-1)*lr_decay)
  float eps, l2_wd, decoupled_wd, inv_scale;
  int decoupled;  // as in AdamScalars: p enters only the term the convention names
  int l2;         // as in AdamScalars
  int skip;
};

OPTIM_HD AdagradScalars make_scalars(const AdagradHyper& h, double step, double lr,
                                             double inv_scale, bool skip) {
  AdagradScalars s;
  s.clr = float(lr / (1.0 + (step - 1.0) * h.lr_decay));
  s.eps = float(h.eps);
  s.l2_wd = h.decoupled ? 0.0f : float(h.weight_decay);
  s.decoupled_wd = h.decoupled ? float(h.weight_decay) : 0.0f;
  s.inv_scale = float(inv_scale);
  s.decoupled = h.decoupled ? 1 : 0;
  s.l2 = !h.decoupled && h.weight_decay != 0.0 ? 1 : 0;
  s.skip = skip ? 1 : 0;
  return s;
}

// One Adagrad element, oracle/adagrad.py with eps_mode "outside" and
// zero_decay "skip" (torch's fused Adagrad skips the term too, and at wd == 0
// it is one multiply-add per element less to hide behind memory):
//   g <- g*inv_scale (+ wd*p for L2, wd != 0);  h <- h + g^2
//   p <- p - clr * (g/(sqrt(h) + eps) (+ wd*p decoupled))
OPTIM_HD void adagrad_update(float& p, float& h, float grad, const AdagradScalars& s) {
  float g = grad * s.inv_scale;
  if (s.l2) g = g + s.l2_wd * p;
  h = h + g * g;
  float u = g / (sqrtf(h) + s.eps);
  if (s.decoupled) u = u + s.decoupled_wd * p;
  p = p - s.clr * u;
}

// ---------------------------------------------------------------- LAMB
// Stages as in oracle/lamb.py: 1 clip (global grad norm), 2-3 moments and
// update direction, 4 per-tensor norms and trust ratio, 5 apply.

struct LambHyper {
  double lr, beta1, beta2, eps, weight_decay;
  bool grad_averaging, bias_correction;
  bool decoupled;   // adam_w_mode: u += wd*p; else L2 g += wd*p
  bool use_nvlamb;  // trust ratio even when wd == 0
};

struct LambScalars {
  float beta1, beta3, beta2, one_minus_beta2;  // beta3 = 1-b1 with grad averaging, else 1
  float inv_bc1, inv_sqrt_bc2, eps, l2_wd, decoupled_wd;  // 1/bc1, 1/sqrt(bc2)
  float inv_scale;
  int decoupled;  // as in AdamScalars: p enters only the term the convention names
  int skip;
};

// The per-step divisions of the specification (by bc1, by bc2 under the
// root, by the clip divisor) are folded into scalars rounded once from double,
// as Adam folds lr/bc1: a product by a rounded reciprocal has the error of a
// quotient by a rounded divisor, and one element division (by the
// denominator) and one root remain, as in Adam. Four divisions per element
// kept stage 1 bound by the divider at twice Adam's time on CPU.
OPTIM_HD LambScalars make_lamb_scalars(const LambHyper& h, double step, double inv_scale, bool skip) {
  LambScalars s;
  s.beta1 = float(h.beta1);
  s.beta3 = h.grad_averaging ? float(1.0 - h.beta1) : 1.0f;
  s.beta2 = float(h.beta2);
  s.one_minus_beta2 = float(1.0 - h.beta2);
  s.inv_bc1 = float(1.0 / bias_correction(h.beta1, step, h.bias_correction));
  s.inv_sqrt_bc2 = float(1.0 / sqrt(bias_correction(h.beta2, step, h.bias_correction)));
  s.eps = float(h.eps);
  s.l2_wd = h.decoupled ? 0.0f : float(h.weight_decay);
  s.decoupled_wd = h.decoupled ? float(h.weight_decay) : 0.0f;
  s.inv_scale = float(inv_scale);
  s.decoupled = h.decoupled ? 1 : 0;
  s.skip = skip ? 1 : 0;
  return s;
}

// Stage 1: the divisor every grad is divided by, from the global sum of
// squares of the (unscaled) grads of all groups. 1 when not clipping.
OPTIM_HD double lamb_clip_divisor(double grad_sumsq, double max_grad_norm) {
  const double norm = sqrt(grad_sumsq);
  return (max_grad_norm > 0.0 && norm > max_grad_norm) ? norm / max_grad_norm : 1.0;
}

// The factor every grad is multiplied by: the grad scaler's 1/scale over the
// clip divisor, in double, rounded once.
OPTIM_HD float lamb_grad_factor(const LambScalars& s, double clip_divisor) {
  return float(double(s.inv_scale) / clip_divisor);
}

// Stages 2-3 for one element: new moments and the update direction u.
//   g <- g*inv_scale/clip (+ wd*p for L2);  m <- b1*m + b3*g;  v <- b2*v + (1-b2)*g^2
//   u <- (m/bc1) / (sqrt(v)/sqrt(bc2) + eps) (+ wd*p decoupled)
OPTIM_HD float lamb_moments_update(float p, float& m, float& v, float grad, float grad_factor,
                                   const LambScalars& s) {
  float g = grad * grad_factor;
  if (!s.decoupled) g = g + s.l2_wd * p;
  m = s.beta1 * m + s.beta3 * g;
  v = s.beta2 * v + s.one_minus_beta2 * (g * g);
  const float u = (m * s.inv_bc1) / (sqrtf(v) * s.inv_sqrt_bc2 + s.eps);
  return s.decoupled ? u + s.decoupled_wd * p : u;
}

// Stage 4: the per-tensor step size lr * ratio, ratio = ||p||/||u|| when
// used and both norms are non-zero, else 1 (apex FusedLAMB).
OPTIM_HD double lamb_step_factor(double lr, double p_sumsq, double u_sumsq, bool use_ratio) {
  const double pn = sqrt(p_sumsq), un = sqrt(u_sumsq);
  const double ratio = (use_ratio && pn != 0.0 && un != 0.0) ? pn / un : 1.0;
  return lr * ratio;
}

// Stage 5 for one element.
OPTIM_HD void lamb_apply(float& p, float u, float step_factor) { p = p - step_factor * u; }

// ---------------------------------------------------------------- SGD
// torch.optim.SGD (oracle/sgd.py, decay "l2", first_step "copy").

struct SgdHyper {
  double lr, momentum, dampening, weight_decay;
  bool nesterov, maximize;
  bool first;  // the buffers of this call start now (their params had none): buf <- g
};

struct SgdScalars {
  float lr, momentum, one_minus_dampening, weight_decay, inv_scale;
  int l2;        // wd != 0: torch skips the term otherwise (0*p is NaN for an infinite param)
  int nesterov, maximize, first;
  int skip;
};

// step is unused: SGD reads no counter (the signature is the launcher's).
OPTIM_HD SgdScalars make_scalars(const SgdHyper& h, double /*step*/, double lr, double inv_scale, bool skip) {
  SgdScalars s;
  s.lr = float(lr);
  s.momentum = float(h.momentum);
  s.one_minus_dampening = float(1.0 - h.dampening);
  s.weight_decay = float(h.weight_decay);
  s.inv_scale = float(inv_scale);
  s.l2 = h.weight_decay != 0.0 ? 1 : 0;
  s.nesterov = h.nesterov ? 1 : 0;
  s.maximize = h.maximize ? 1 : 0;
  s.first = h.first ? 1 : 0;
  s.skip = skip ? 1 : 0;
  return s;
}

// The grad the update sees: unscaled, negated (maximize), plus wd*p (L2).
OPTIM_HD float sgd_grad(float p, float grad, const SgdScalars& s) {
  float g = grad * s.inv_scale;
  if (s.maximize) g = -g;
  if (s.l2) g = g + s.weight_decay * p;
  return g;
}

// One SGD element with a momentum buffer:
//   buf <- g (first) or mu*buf + (1-dampening)*g;  g <- g + mu*buf (nesterov) or buf;  p <- p - lr*g
OPTIM_HD void sgd_momentum_update(float& p, float& buf, float grad, const SgdScalars& s) {
  float g = sgd_grad(p, grad, s);
  buf = s.first ? g : s.momentum * buf + s.one_minus_dampening * g;
  g = s.nesterov ? g + s.momentum * buf : buf;
  p = p - s.lr * g;
}

// One SGD element without momentum (momentum == 0: no buffer exists).
OPTIM_HD void sgd_update(float& p, float grad, const SgdScalars& s) { p = p - s.lr * sgd_grad(p, grad, s); }

// ---------------------------------------------------------------- Lion
// Chen et al. 2023 (oracle/lion.py, sign_zero "zero", decoupled decay first).

struct LionHyper {
  double lr, beta1, beta2, weight_decay;
  bool maximize;
};

struct LionScalars {
  float lr, beta1, one_minus_beta1, beta2, one_minus_beta2;
  float decay_factor;  // 1 - lr*wd
  float inv_scale;
  int maximize;
  int skip;
};

// step is unused: Lion reads no counter (the signature is the launcher's).
OPTIM_HD LionScalars make_scalars(const LionHyper& h, double /*step*/, double lr, double inv_scale, bool skip) {
  LionScalars s;
  s.lr = float(lr);
  s.beta1 = float(h.beta1);
  s.one_minus_beta1 = float(1.0 - h.beta1);
  s.beta2 = float(h.beta2);
  s.one_minus_beta2 = float(1.0 - h.beta2);
  s.decay_factor = float(1.0 - lr * h.weight_decay);
  s.inv_scale = float(inv_scale);
  s.maximize = h.maximize ? 1 : 0;
  s.skip = skip ? 1 : 0;
  return s;
}

// sign_zero "zero", as np.sign: +1, -1, and +0 for either zero. A NaN stays NaN
// (torch.sign would give 0), so a NaN momentum shows in the param.
OPTIM_HD float sign_zero(float c) {
  return c > 0.0f ? 1.0f : (c < 0.0f ? -1.0f : (c == 0.0f ? 0.0f : c));
}

// One Lion element, oracle/lion.py:
//   g <- g*inv_scale (negated for maximize);  c <- b1*m + (1-b1)*g
//   p <- p*(1 - lr*wd);  p <- p - lr*sign(c);  m <- b2*m + (1-b2)*g
OPTIM_HD void lion_update(float& p, float& m, float grad, const LionScalars& s) {
  float g = grad * s.inv_scale;
  if (s.maximize) g = -g;
  const float c = s.beta1 * m + s.one_minus_beta1 * g;
  p = p * s.decay_factor;
  p = p - s.lr * sign_zero(c);
  m = s.beta2 * m + s.one_minus_beta2 * g;
}

}  // namespace optim
