// CPU multi-tensor loops: every tensor of a call, cut into chunks, chunks
// spread over OpenMP threads, each chunk a vectorizable loop over the shared
// element ops. Plain C++ (no torch), so this file compiles fast and -O3.
#pragma once

#include <cstdint>
#include <vector>

#include "optim_math.h"
#include "tensor_lists.h"

namespace optim::cpu {

int64_t chunk_size();

// Whether the loops issue software prefetches (see cpu_kernels.cpp: on by
// default except on AMD, env FUSED_CPU_PREFETCH=0|1 overrides); enable 0 or 1
// sets it for the process, -1 only reads it. Results do not depend on it.
bool prefetch(int enable);

void adam(const TensorLists& lists, const StorageKinds& kinds, const AdamScalars& s, int threads);
void adagrad(const TensorLists& lists, const StorageKinds& kinds, const AdagradScalars& s, int threads);
// with_buffer: the lists carry momentum buffers (momentum != 0).
void sgd(const TensorLists& lists, const StorageKinds& kinds, const SgdScalars& s, bool with_buffer, int threads);
void lion(const TensorLists& lists, const StorageKinds& kinds, const LionScalars& s, int threads);

// out[t] = sum over tensor t of (x * scale)^2, in double; slot 0 holds x.
// Chunk partials are added in a fixed order: the result does not depend on
// the thread count.
void sumsq(const TensorLists& lists, Dtype dtype, double scale, double* out, int threads);

// LAMB stage 2's inputs besides the norms.
struct LambTrust {
  double lr;
  bool use_ratio;  // ||p||/||u|| (weight_decay != 0 or use_nvlamb), else ratio 1
};

// LAMB stages 1 and 2 of one bucket, after the global grad norm (clip is its
// divisor). Lists: grad, param, exp_avg, exp_avg_sq, update (fp32 scratch)
// [, model]. Stage 1, one pass: moments, u, and per tensor the sums of squares
// of the param and of u (double, added in a fixed order as sumsq), written to
// p_sumsq and u_sumsq. Stage 2: p <- p - lr * ratio * u. The update buffer of
// a tensor of at most 2**18 elements is left as it was: its u goes to a
// per-thread scratch that stays in cache.
void lamb(const TensorLists& lists, const StorageKinds& kinds, const LambScalars& s, double clip,
          const LambTrust& trust, double* p_sumsq, double* u_sumsq, int threads);

// The units each thread claims from WorkShares(bounds), in claim order, when
// `threads` threads claim until none is left (from their shares' ends when
// backward) and thread 1 sleeps `slow_us` microseconds per unit: for tests
// that every unit is run once and that a fast thread takes over a slow one's.
std::vector<std::vector<int64_t>> claim_order(const std::vector<int64_t>& bounds, int threads, bool backward,
                                              int64_t slow_us);

// Storage conversion, exposed for tests of storage.h.
void convert(const void* src, Dtype src_dtype, void* dst, Dtype dst_dtype, int64_t n);

}  // namespace optim::cpu
