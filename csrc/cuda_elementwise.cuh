// Elementwise optimizer steps on CUDA (Adam, Adagrad, SGD, Lion): a functor that builds
// the shared element op (element_ops.h) for its chunk, and the per-step
// scalars made on the host, or on the device in capturable mode.
#pragma once

#include "cuda_kernels.h"
#include "element_ops.h"
#include "multi_tensor_apply.cuh"

namespace optim::cuda {

// Where a launch reads its per-step scalars: by value in the kernel
// arguments, or from a device buffer filled by prepare_scalars_kernel.
template <class Scalars> struct ScalarSource {
  Scalars host;
  const Scalars* device;
  __device__ Scalars get() const { return device ? *device : host; }
};

template <class Hyper, class Scalars>
__global__ void prepare_scalars_kernel(Hyper h, DeviceStep in, HostStep host, Scalars* out) {
  const double lr = in.lr ? *in.lr : host.lr;
  const double inv_scale = in.inv_scale ? double(*in.inv_scale) : host.inv_scale;
  const bool skip = in.found_inf && *in.found_inf != 0.0f;
  *out = make_scalars(h, double(*in.step), lr, inv_scale, skip);
}

template <class Op, class Scalars> struct ElementwiseFunctor {
  ScalarSource<Scalars> scalars;

  template <int Depth> __device__ void operator()(const TensorTable<Depth>& table, const Chunk& c) const {
    const Scalars s = scalars.get();
    if (s.skip) return;
    chunk_elements(Op(TableSlots<Depth>{table, c.slot}, c.start, s), c.n);
  }
};

// One step of element op OpT<G, P, M, Master> over all lists.
template <template <class, class, class, bool> class OpT, class Hyper>
void run_elementwise(const TensorLists& lists, const StorageKinds& kinds, const Hyper& h, const HostStep& host,
                     const DeviceStep* device, void* stream_ptr) {
  using Scalars = decltype(make_scalars(h, 0.0, 0.0, 1.0, false));
  auto stream = static_cast<cudaStream_t>(stream_ptr);
  ScalarSource<Scalars> source{make_scalars(h, host.step, host.lr, host.inv_scale, false), nullptr};
  if (device) {
    auto* out = static_cast<Scalars*>(device->scalars);
    prepare_scalars_kernel<Hyper, Scalars><<<1, 1, 0, stream>>>(h, *device, host, out);
    check_cuda(cudaGetLastError(), "prepare_scalars_kernel launch");
    source.device = out;
  }
  with_kinds(kinds, [&](auto g, auto p, auto m, auto master) {
    using Op = OpT<decltype(g), decltype(p), decltype(m), decltype(master)::value>;
    multi_tensor_apply<Op::kDepth>(lists, ElementwiseFunctor<Op, Scalars>{source}, stream);
  });
}

}  // namespace optim::cuda
