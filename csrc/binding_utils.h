// Tensor-list checks and conversion to TensorLists, shared by the CPU and
// CUDA bindings. The fused/ package validates user input with friendly
// messages; these checks guard the raw-pointer boundary against misuse.
#pragma once

#include <torch/extension.h>

#include <string>
#include <vector>

#include "tensor_lists.h"

namespace optim {

using Tensors = std::vector<at::Tensor>;

inline Dtype storage_dtype(const at::Tensor& t) {
  switch (t.scalar_type()) {
    case at::kFloat: return Dtype::f32;
    case at::kHalf: return Dtype::f16;
    case at::kBFloat16: return Dtype::bf16;
    default: TORCH_CHECK(false, "unsupported dtype ", t.scalar_type(), " (float32, float16, bfloat16 only)");
  }
}

// Parallel lists, one per slot; every list as long as the first, tensor i
// of every list with the same numel, contiguous, on `device`, and one dtype
// per list.
inline TensorLists make_lists(const std::vector<const Tensors*>& slots, const at::Device& device) {
  TensorLists lists;
  const size_t n = slots.front()->size();
  for (size_t k = 0; k < slots.size(); ++k) {
    const Tensors& list = *slots[k];
    TORCH_CHECK(list.size() == n, "tensor list ", k, " has ", list.size(), " tensors, expected ", n);
    lists.slots.emplace_back();
    for (size_t i = 0; i < n; ++i) {
      const at::Tensor& t = list[i];
      TORCH_CHECK(t.device() == device, "list ", k, " tensor ", i, " is on ", t.device(), ", expected ", device);
      TORCH_CHECK(t.is_contiguous(), "list ", k, " tensor ", i, " is not contiguous");
      TORCH_CHECK(t.scalar_type() == list[0].scalar_type(), "list ", k, " mixes dtypes");
      TORCH_CHECK(t.numel() == slots[0]->at(i).numel(), "list ", k, " tensor ", i, " numel differs");
      lists.slots.back().push_back(t.data_ptr());
    }
  }
  for (size_t i = 0; i < n; ++i) lists.numel.push_back(slots[0]->at(i).numel());
  return lists;
}

// grads carry the model dtype; params are fp32 masters when models is given.
inline StorageKinds kinds_of(const Tensors& grads, const Tensors& params, const Tensors& moments,
                             const Tensors& models) {
  StorageKinds k{storage_dtype(grads[0]), !models.empty(), storage_dtype(moments[0])};
  if (k.master) {
    TORCH_CHECK(params[0].scalar_type() == at::kFloat, "master params must be float32");
    TORCH_CHECK(models[0].scalar_type() == grads[0].scalar_type(), "model params and grads differ in dtype");
  } else {
    TORCH_CHECK(params[0].scalar_type() == grads[0].scalar_type(), "params and grads differ in dtype");
  }
  return k;
}

// SGD's kinds: without momentum there are no buffers, and the (unused) moment
// type is float32.
inline StorageKinds sgd_kinds(const Tensors& grads, const Tensors& params, const Tensors& bufs,
                              const Tensors& models) {
  if (!bufs.empty()) return kinds_of(grads, params, bufs, models);
  StorageKinds k = kinds_of(grads, params, params, models);
  k.moment = Dtype::f32;
  return k;
}

// The slot lists of an optimizer call: the fixed slots, then models if any.
inline std::vector<const Tensors*> with_models(std::vector<const Tensors*> fixed, const Tensors& models) {
  if (!models.empty()) fixed.push_back(&models);
  return fixed;
}

}  // namespace optim
