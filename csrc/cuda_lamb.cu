// LAMB on CUDA, in the oracle's stages: sums of squares (global grad norm,
// per-tensor norms), moments+update, and trust ratio + apply. Everything stays
// on the device: the clip divisor and the trust ratios are computed per block
// from device sums by the shared optim_math.h functions.
#include "cuda_kernels.h"
#include "element_ops.h"
#include "multi_tensor_apply.cuh"

namespace optim::cuda {
namespace {

constexpr int kFinalizeThreads = 256;

// Sum of a block's values in a fixed order (deterministic).
template <int Threads> __device__ double block_sum(double v) {
  __shared__ double shared[Threads];
  shared[threadIdx.x] = v;
  __syncthreads();
  for (int half = Threads / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) shared[threadIdx.x] += shared[threadIdx.x + half];
    __syncthreads();
  }
  return shared[0];
}

template <class T> struct SumsqFunctor {
  double scale;
  double* partials;  // one per block id

  __device__ void operator()(const TensorTable<1>& table, const Chunk& c) const {
    const T* x = static_cast<const T*>(table.ptr[0][c.slot]) + c.start;
    double acc = 0.0;
    for (int64_t i = threadIdx.x; i < c.n; i += blockDim.x) {
      const double v = double(to_float(x[i])) * scale;
      acc += v * v;
    }
    const double total = block_sum<kThreads>(acc);
    if (threadIdx.x == 0) partials[c.block_id] = total;
  }
};

// out[t] = sum of partials[offsets[t] .. offsets[t+1]), one block per tensor.
__global__ void finalize_sumsq_kernel(const double* partials, const int64_t* offsets, double* out) {
  double acc = 0.0;
  for (int64_t i = offsets[blockIdx.x] + threadIdx.x; i < offsets[blockIdx.x + 1]; i += blockDim.x) {
    acc += partials[i];
  }
  const double total = block_sum<kFinalizeThreads>(acc);
  if (threadIdx.x == 0) out[blockIdx.x] = total;
}

template <class G, class P, class M> struct LambUpdateFunctor {
  LambScalars s;
  const double* grad_sumsq;  // null: no clipping
  double max_grad_norm;

  __device__ void operator()(const TensorTable<5>& table, const Chunk& c) const {
    const float clip = grad_sumsq ? float(lamb_clip_divisor(*grad_sumsq, max_grad_norm)) : 1.0f;
    chunk_elements(LambUpdateOp<G, P, M>(TableSlots<5>{table, c.slot}, c.start, clip, s), c.n);
  }
};

template <class G, class P, bool Master> struct LambApplyFunctor {
  static constexpr int kDepth = LambApplyOp<G, P, Master>::kDepth;
  const double* p_sumsq;
  const double* u_sumsq;
  double lr;
  bool use_ratio;

  __device__ void operator()(const TensorTable<kDepth>& table, const Chunk& c) const {
    const int64_t t = table.tensor_index[c.slot];
    const float factor = float(lamb_step_factor(lr, p_sumsq[t], u_sumsq[t], use_ratio));
    chunk_elements(LambApplyOp<G, P, Master>(TableSlots<kDepth>{table, c.slot}, c.start, factor), c.n);
  }
};

}  // namespace

void sumsq(const TensorLists& lists, Dtype dtype, double scale, double* partials, const int64_t* offsets,
           double* out, void* stream_ptr) {
  auto stream = static_cast<cudaStream_t>(stream_ptr);
  if (lists.numel.empty()) return;
  with_storage(dtype, [&](auto x) {
    multi_tensor_apply<1>(lists, SumsqFunctor<decltype(x)>{scale, partials}, stream);
  });
  finalize_sumsq_kernel<<<unsigned(lists.numel.size()), kFinalizeThreads, 0, stream>>>(partials, offsets, out);
  check_cuda(cudaGetLastError(), "finalize_sumsq_kernel launch");
}

void lamb_update(const TensorLists& lists, const StorageKinds& kinds, const LambScalars& s,
                 const double* grad_sumsq, double max_grad_norm, void* stream_ptr) {
  if (s.skip) return;
  auto stream = static_cast<cudaStream_t>(stream_ptr);
  with_kinds(kinds, [&](auto g, auto p, auto m, auto) {
    using F = LambUpdateFunctor<decltype(g), decltype(p), decltype(m)>;
    multi_tensor_apply<5>(lists, F{s, grad_sumsq, max_grad_norm}, stream);
  });
}

void lamb_apply(const TensorLists& lists, const StorageKinds& kinds, const double* p_sumsq,
                const double* u_sumsq, double lr, bool use_ratio, void* stream_ptr) {
  auto stream = static_cast<cudaStream_t>(stream_ptr);
  with_kinds(kinds, [&](auto g, auto p, auto, auto master) {
    using F = LambApplyFunctor<decltype(g), decltype(p), decltype(master)::value>;
    multi_tensor_apply<F::kDepth>(lists, F{p_sumsq, u_sumsq, lr, use_ratio}, stream);
  });
}

}  // namespace optim::cuda
