// The plain description of one multi-tensor call that bindings hand to the
// CPU loops and the CUDA launcher: parallel lists of raw pointers, one list
// per slot (grad, param, exp_avg, ...), and the storage types to dispatch on.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <type_traits>
#include <vector>

#include "storage.h"

namespace optim {

struct TensorLists {
  std::vector<int64_t> numel;             // per tensor
  std::vector<std::vector<void*>> slots;  // slots[k][t]: tensor t's pointer for slot k

  void* ptr(int k, int64_t t) const { return slots[size_t(k)][size_t(t)]; }
};

// Storage of one bucket of params: the model param dtype (grads share it),
// whether an fp32 master is the param the math updates, the moment dtype.
struct StorageKinds {
  Dtype model;
  bool master;
  Dtype moment;
};

template <class F> void with_storage(Dtype d, F&& f) {
  switch (d) {
    case Dtype::f32: f(float{}); return;
    case Dtype::f16: f(half_t{}); return;
    case Dtype::bf16: f(bf16_t{}); return;
  }
  throw std::invalid_argument("unknown storage dtype");
}

// Calls f(G{}, P{}, M{}, std::bool_constant<Master>{}) with G the model/grad
// type, P the type of the param the math updates (float for a master),
// M the moment type (float or bf16).
template <class F> void with_kinds(const StorageKinds& k, F&& f) {
  if (k.moment != Dtype::f32 && k.moment != Dtype::bf16) {
    throw std::invalid_argument("moments must be float32 or bfloat16");
  }
  with_storage(k.model, [&](auto g) {
    using G = decltype(g);
    auto with_moment = [&](auto p, auto master) {
      if (k.moment == Dtype::f32) f(G{}, p, float{}, master);
      else f(G{}, p, bf16_t{}, master);
    };
    if (k.master) with_moment(float{}, std::true_type{});
    else with_moment(G{}, std::false_type{});
  });
}

}  // namespace optim
