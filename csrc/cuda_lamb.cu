// LAMB on CUDA in two stages after the global grad norm (a sums-of-squares
// pass over the grads):
//   stage 1  moments and the update u per element, and per block the sums of
//            p^2 and u^2 of its chunk; a finalize kernel adds each tensor's
//            block partials in a fixed order into ||p||^2 and ||u||^2;
//   stage 2  the trust ratio from those norms, and p <- p - lr * ratio * u.
// Everything stays on the device: the clip divisor and the trust ratios are
// computed per block from device sums by the shared optim_math.h functions.
#include "cuda_kernels.h"
#include "element_ops.h"
#include "multi_tensor_apply.cuh"

namespace optim::cuda {
namespace {

constexpr int kFinalizeThreads = 256;

// Sum of a block's values in a fixed order (deterministic).
// Safe to call twice in a row: the first barrier keeps a thread from
// overwriting shared[0] before every thread has read the previous result.
template <int Threads> __device__ double block_sum(double v) {
  __shared__ double shared[Threads];
  __syncthreads();
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

// Stage 1 over a chunk as chunk_elements does it (kIlp elements per thread
// loaded before any is stored), also adding p^2 and u^2 into p2 and u2.
template <class Op> __device__ void lamb_update_elements(const Op& op, int64_t n, double& p2, double& u2) {
  const int64_t stride = int64_t(blockDim.x) * kIlp;
  for (int64_t base = 0; base < n; base += stride) {
    typename Op::Regs r[kIlp];
#pragma unroll
    for (int k = 0; k < kIlp; ++k) {
      const int64_t i = base + threadIdx.x + int64_t(k) * blockDim.x;
      if (i < n) op.load(r[k], i);
    }
#pragma unroll
    for (int k = 0; k < kIlp; ++k) {
      const int64_t i = base + threadIdx.x + int64_t(k) * blockDim.x;
      if (i < n) {
        const float u = op.moments(r[k], i);
        op.u[i] = u;
        p2 += double(r[k].p) * double(r[k].p);
        u2 += double(u) * double(u);
      }
    }
  }
}

template <class G, class P, class M> struct LambUpdateFunctor {
  LambScalars s;
  const double* grad_sumsq;  // null: no clipping
  double max_grad_norm;
  double* p_partials;  // one per block id
  double* u_partials;

  __device__ void operator()(const TensorTable<5>& table, const Chunk& c) const {
    const double clip = grad_sumsq ? lamb_clip_divisor(*grad_sumsq, max_grad_norm) : 1.0;
    double p2 = 0.0, u2 = 0.0;
    lamb_update_elements(LambUpdateOp<G, P, M>(TableSlots<5>{table, c.slot}, c.start, clip, s), c.n, p2, u2);
    const double p_total = block_sum<kThreads>(p2);
    const double u_total = block_sum<kThreads>(u2);
    if (threadIdx.x == 0) {
      p_partials[c.block_id] = p_total;
      u_partials[c.block_id] = u_total;
    }
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
                 const double* grad_sumsq, double max_grad_norm, const LambNorms& norms, void* stream_ptr) {
  auto stream = static_cast<cudaStream_t>(stream_ptr);
  if (lists.numel.empty() || s.skip) return;
  with_kinds(kinds, [&](auto g, auto p, auto m, auto) {
    using F = LambUpdateFunctor<decltype(g), decltype(p), decltype(m)>;
    multi_tensor_apply<5>(lists, F{s, grad_sumsq, max_grad_norm, norms.p_partials, norms.u_partials}, stream);
  });
  const unsigned tensors = unsigned(lists.numel.size());
  finalize_sumsq_kernel<<<tensors, kFinalizeThreads, 0, stream>>>(norms.p_partials, norms.offsets, norms.p_sumsq);
  check_cuda(cudaGetLastError(), "finalize_sumsq_kernel launch");
  finalize_sumsq_kernel<<<tensors, kFinalizeThreads, 0, stream>>>(norms.u_partials, norms.offsets, norms.u_sumsq);
  check_cuda(cudaGetLastError(), "finalize_sumsq_kernel launch");
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
