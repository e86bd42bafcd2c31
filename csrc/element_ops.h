// Per-element glue between storage and the shared math: load every slot as
// float, call the optim_math.h function, round and store. The CPU chunk loop
// and the CUDA chunk loop both drive these ops, so the two paths differ only
// in how elements are distributed, never in what is computed per element.
//
// Slot layouts (the order the bindings and fused/ pass their lists in):
//   Adam         grad, param, exp_avg, exp_avg_sq [, model]
//   Adagrad      grad, param, sum [, model]
//   SGD          grad, param, momentum_buffer [, model]   (momentum != 0)
//   SGD plain    grad, param [, model]                    (momentum == 0)
//   Lion         grad, param, exp_avg [, model]
//   LAMB update  grad, param, exp_avg, exp_avg_sq, update (fp32, written)
//   LAMB apply   update, param [, model]
// "param" is the fp32 master when there is one; "model" is then the
// low-precision param, rewritten as the rounded master after every step.
#pragma once

#include <cstdint>

#include "optim_math.h"
#include "storage.h"

namespace optim {

// Hints for the CPU loops, which fetch a piece ahead of the one they compute
// (cpu_kernels.cpp run_range); no-ops in device code.
template <class T> OPTIM_HD void prefetch_read(const T* x) {
#if !defined(__CUDA_ARCH__)
  __builtin_prefetch(x, 0, 3);
#endif
}
template <class T> OPTIM_HD void prefetch_write(T* x) {
#if !defined(__CUDA_ARCH__)
  __builtin_prefetch(x, 1, 3);
#endif
}

// A slot accessor: slot(k) -> void* of this tensor's slot k.
template <class T, class Slot> OPTIM_HD T* slot_at(const Slot& slot, int k, int64_t start) {
  return static_cast<T*>(slot(k)) + start;
}

template <class G, class P, class M, bool Master> struct AdamOp {
  static constexpr int kDepth = Master ? 5 : 4;
  struct Regs { float g, p, m, v; };
  const G* g; P* p; M* m; M* v; G* model;
  AdamScalars s;

  template <class Slot> OPTIM_HD AdamOp(const Slot& slot, int64_t start, const AdamScalars& scalars)
      : g(slot_at<const G>(slot, 0, start)), p(slot_at<P>(slot, 1, start)),
        m(slot_at<M>(slot, 2, start)), v(slot_at<M>(slot, 3, start)), model(nullptr), s(scalars) {
    if constexpr (Master) model = slot_at<G>(slot, 4, start);
  }
  OPTIM_HD void prefetch(int64_t i) const {
    prefetch_read(g + i); prefetch_write(p + i); prefetch_write(m + i); prefetch_write(v + i);
    if constexpr (Master) prefetch_write(model + i);
  }
  OPTIM_HD void load(Regs& r, int64_t i) const {
    r.g = to_float(g[i]); r.p = to_float(p[i]); r.m = to_float(m[i]); r.v = to_float(v[i]);
  }
  OPTIM_HD void store(Regs& r, int64_t i) const {
    adam_update(r.p, r.m, r.v, r.g, s);
    p[i] = from_float<P>(r.p); m[i] = from_float<M>(r.m); v[i] = from_float<M>(r.v);
    if constexpr (Master) model[i] = from_float<G>(r.p);
  }
};

template <class G, class P, class M, bool Master> struct AdagradOp {
  static constexpr int kDepth = Master ? 4 : 3;
  struct Regs { float g, p, h; };
  const G* g; P* p; M* h; G* model;
  AdagradScalars s;

  template <class Slot> OPTIM_HD AdagradOp(const Slot& slot, int64_t start, const AdagradScalars& scalars)
      : g(slot_at<const G>(slot, 0, start)), p(slot_at<P>(slot, 1, start)),
        h(slot_at<M>(slot, 2, start)), model(nullptr), s(scalars) {
    if constexpr (Master) model = slot_at<G>(slot, 3, start);
  }
  OPTIM_HD void prefetch(int64_t i) const {
    prefetch_read(g + i); prefetch_write(p + i); prefetch_write(h + i);
    if constexpr (Master) prefetch_write(model + i);
  }
  OPTIM_HD void load(Regs& r, int64_t i) const {
    r.g = to_float(g[i]); r.p = to_float(p[i]); r.h = to_float(h[i]);
  }
  OPTIM_HD void store(Regs& r, int64_t i) const {
    adagrad_update(r.p, r.h, r.g, s);
    p[i] = from_float<P>(r.p); h[i] = from_float<M>(r.h);
    if constexpr (Master) model[i] = from_float<G>(r.p);
  }
};

template <class G, class P, class M, bool Master> struct SgdMomentumOp {
  static constexpr int kDepth = Master ? 4 : 3;
  struct Regs { float g, p, b; };
  const G* g; P* p; M* b; G* model;
  SgdScalars s;

  template <class Slot> OPTIM_HD SgdMomentumOp(const Slot& slot, int64_t start, const SgdScalars& scalars)
      : g(slot_at<const G>(slot, 0, start)), p(slot_at<P>(slot, 1, start)),
        b(slot_at<M>(slot, 2, start)), model(nullptr), s(scalars) {
    if constexpr (Master) model = slot_at<G>(slot, 3, start);
  }
  OPTIM_HD void prefetch(int64_t i) const {
    prefetch_read(g + i); prefetch_write(p + i); prefetch_write(b + i);
    if constexpr (Master) prefetch_write(model + i);
  }
  OPTIM_HD void load(Regs& r, int64_t i) const {
    r.g = to_float(g[i]); r.p = to_float(p[i]); r.b = to_float(b[i]);
  }
  OPTIM_HD void store(Regs& r, int64_t i) const {
    sgd_momentum_update(r.p, r.b, r.g, s);
    p[i] = from_float<P>(r.p); b[i] = from_float<M>(r.b);
    if constexpr (Master) model[i] = from_float<G>(r.p);
  }
};

// momentum == 0: no buffer slot; M is unused (the dispatch passes float).
template <class G, class P, class M, bool Master> struct SgdOp {
  static constexpr int kDepth = Master ? 3 : 2;
  struct Regs { float g, p; };
  const G* g; P* p; G* model;
  SgdScalars s;

  template <class Slot> OPTIM_HD SgdOp(const Slot& slot, int64_t start, const SgdScalars& scalars)
      : g(slot_at<const G>(slot, 0, start)), p(slot_at<P>(slot, 1, start)), model(nullptr), s(scalars) {
    if constexpr (Master) model = slot_at<G>(slot, 2, start);
  }
  OPTIM_HD void prefetch(int64_t i) const {
    prefetch_read(g + i); prefetch_write(p + i);
    if constexpr (Master) prefetch_write(model + i);
  }
  OPTIM_HD void load(Regs& r, int64_t i) const { r.g = to_float(g[i]); r.p = to_float(p[i]); }
  OPTIM_HD void store(Regs& r, int64_t i) const {
    sgd_update(r.p, r.g, s);
    p[i] = from_float<P>(r.p);
    if constexpr (Master) model[i] = from_float<G>(r.p);
  }
};

template <class G, class P, class M, bool Master> struct LionOp {
  static constexpr int kDepth = Master ? 4 : 3;
  struct Regs { float g, p, m; };
  const G* g; P* p; M* m; G* model;
  LionScalars s;

  template <class Slot> OPTIM_HD LionOp(const Slot& slot, int64_t start, const LionScalars& scalars)
      : g(slot_at<const G>(slot, 0, start)), p(slot_at<P>(slot, 1, start)),
        m(slot_at<M>(slot, 2, start)), model(nullptr), s(scalars) {
    if constexpr (Master) model = slot_at<G>(slot, 3, start);
  }
  OPTIM_HD void prefetch(int64_t i) const {
    prefetch_read(g + i); prefetch_write(p + i); prefetch_write(m + i);
    if constexpr (Master) prefetch_write(model + i);
  }
  OPTIM_HD void load(Regs& r, int64_t i) const {
    r.g = to_float(g[i]); r.p = to_float(p[i]); r.m = to_float(m[i]);
  }
  OPTIM_HD void store(Regs& r, int64_t i) const {
    lion_update(r.p, r.m, r.g, s);
    p[i] = from_float<P>(r.p); m[i] = from_float<M>(r.m);
    if constexpr (Master) model[i] = from_float<G>(r.p);
  }
};

// LAMB stages 2-3: moments and the fp32 update direction; p is only read.
// moments() stores m and v and returns u, so that a loop can also add u and
// p into the per-tensor norms (the two-stage kernels) before storing u.
template <class G, class P, class M> struct LambUpdateOp {
  static constexpr int kDepth = 5;
  struct Regs { float g, p, m, v; };
  const G* g; const P* p; M* m; M* v; float* u;
  float grad_factor;  // lamb_grad_factor: 1/scale over the clip divisor
  LambScalars s;

  template <class Slot> OPTIM_HD LambUpdateOp(const Slot& slot, int64_t start, double clip_divisor,
                                              const LambScalars& scalars)
      : g(slot_at<const G>(slot, 0, start)), p(slot_at<const P>(slot, 1, start)),
        m(slot_at<M>(slot, 2, start)), v(slot_at<M>(slot, 3, start)),
        u(slot_at<float>(slot, 4, start)), grad_factor(lamb_grad_factor(scalars, clip_divisor)), s(scalars) {}
  // u is not fetched: it is written whole, streamed or into a cached scratch.
  OPTIM_HD void prefetch(int64_t i) const {
    prefetch_read(g + i); prefetch_read(p + i); prefetch_write(m + i); prefetch_write(v + i);
  }
  OPTIM_HD void load(Regs& r, int64_t i) const {
    r.g = to_float(g[i]); r.p = to_float(p[i]); r.m = to_float(m[i]); r.v = to_float(v[i]);
  }
  OPTIM_HD float moments(Regs& r, int64_t i) const {
    const float update = lamb_moments_update(r.p, r.m, r.v, r.g, grad_factor, s);
    m[i] = from_float<M>(r.m); v[i] = from_float<M>(r.v);
    return update;
  }
  OPTIM_HD void store(Regs& r, int64_t i) const { u[i] = moments(r, i); }
};

// LAMB stage 5: p <- p - step_factor * u, step_factor = lr * trust ratio.
template <class G, class P, bool Master> struct LambApplyOp {
  static constexpr int kDepth = Master ? 3 : 2;
  struct Regs { float u, p; };
  const float* u; P* p; G* model;
  float step_factor;

  template <class Slot> OPTIM_HD LambApplyOp(const Slot& slot, int64_t start, float factor)
      : u(slot_at<const float>(slot, 0, start)), p(slot_at<P>(slot, 1, start)), model(nullptr),
        step_factor(factor) {
    if constexpr (Master) model = slot_at<G>(slot, 2, start);
  }
  OPTIM_HD void prefetch(int64_t i) const {
    prefetch_read(u + i); prefetch_write(p + i);
    if constexpr (Master) prefetch_write(model + i);
  }
  OPTIM_HD void load(Regs& r, int64_t i) const { r.u = u[i]; r.p = to_float(p[i]); }
  OPTIM_HD void store(Regs& r, int64_t i) const {
    lamb_apply(r.p, r.u, step_factor);
    p[i] = from_float<P>(r.p);
    if constexpr (Master) model[i] = from_float<G>(r.p);
  }
};

}  // namespace optim
