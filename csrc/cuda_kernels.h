// Host entry points of the CUDA kernels, in plain C++ (no CUDA or torch
// headers): cuda_bindings.cpp converts tensors to TensorLists and calls these.
// Streams are passed as void* (a cudaStream_t).
#pragma once

#include <cstdint>

#include "optim_math.h"
#include "tensor_lists.h"

namespace optim::cuda {

// Host values of the per-step inputs; used where the device pointer is null.
struct HostStep {
  double step, lr, inv_scale;
};

// Capturable mode: device pointers read by a one-thread kernel that makes the
// step's scalars on the device into `scalars` (a device buffer of
// sizeof the optimizer's Scalars bytes). step is required;
// the others may be null (then the host value; found_inf: no skip).
struct DeviceStep {
  const int64_t* step;
  const double* lr;
  const float* inv_scale;
  const float* found_inf;
  void* scalars;
};

void adam(const TensorLists& lists, const StorageKinds& kinds, const AdamHyper& h, const HostStep& host,
          const DeviceStep* device, void* stream);
void adagrad(const TensorLists& lists, const StorageKinds& kinds, const AdagradHyper& h, const HostStep& host,
             const DeviceStep* device, void* stream);
// with_buffer: the lists carry momentum buffers (momentum != 0).
void sgd(const TensorLists& lists, const StorageKinds& kinds, const SgdHyper& h, bool with_buffer,
         const HostStep& host, const DeviceStep* device, void* stream);
void lion(const TensorLists& lists, const StorageKinds& kinds, const LionHyper& h, const HostStep& host,
          const DeviceStep* device, void* stream);

// out[t] = sum of (x*scale)^2 over tensor t (slot 0), in double. partials:
// one double per chunk (chunk_offsets(numel).back()); offsets: chunk_offsets
// on the device. Deterministic: fixed reduction order.
void sumsq(const TensorLists& lists, Dtype dtype, double scale, double* partials, const int64_t* offsets,
           double* out, void* stream);

// Device buffers of LAMB stage 1's norms: per-chunk partials (one double per
// chunk, chunk_offsets(numel).back()), offsets = chunk_offsets on the device,
// and the per-tensor sums of squares of p and u it writes.
struct LambNorms {
  double* p_partials;
  double* u_partials;
  const int64_t* offsets;
  double* p_sumsq;
  double* u_sumsq;
};

// LAMB stage 1: moments, u, and the per-tensor sums of squares of p and u
// (deterministic: fixed reduction order). grad_sumsq: device pointer to the
// global sum of squares of the grads. The caller zeroes the sums (a skipped
// step writes nothing).
void lamb_update(const TensorLists& lists, const StorageKinds& kinds, const LambScalars& s,
                 const double* grad_sumsq, double max_grad_norm, const LambNorms& norms, void* stream);
// LAMB stage 2: trust ratio and apply; p_sumsq, u_sumsq: device arrays indexed like the lists.
void lamb_apply(const TensorLists& lists, const StorageKinds& kinds, const double* p_sumsq,
                const double* u_sumsq, double lr, bool use_ratio, void* stream);

int64_t chunk_size();

}  // namespace optim::cuda
