#include "cpu_kernels.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <vector>

#if defined(__SSE__)
#include <immintrin.h>
#endif

#include "element_ops.h"
#include "launch_plan.h"

namespace optim::cpu {
namespace {

// 64 Ki elements: a chunk's streams (up to 7 of them) stay within L2, and a
// 16M-element tensor still gives 256 chunks to balance across threads.
constexpr int64_t kChunk = int64_t(1) << 16;

// Calls body(t, start, n) for every chunk of every tensor, in parallel.
// The work list is the planner's single unbounded launch.
template <class Body> void for_each_chunk(const std::vector<int64_t>& numel, int threads, const Body& body) {
  const int64_t unbounded = std::numeric_limits<int64_t>::max();
  const std::vector<Launch> plan = plan_launches(numel, kChunk, unbounded, unbounded);
  if (plan.empty()) return;
  const Launch& work = plan.front();
  const int64_t blocks = int64_t(work.block_slot.size());
#pragma omp parallel for schedule(static) num_threads(threads) if (blocks > 1 && threads > 1)
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t t = work.tensors[size_t(work.block_slot[size_t(b)])];
    const int64_t start = work.block_chunk[size_t(b)] * kChunk;
    body(t, start, std::min(kChunk, numel[size_t(t)] - start));
  }
}

// By value: a local op's pointers cannot alias the stores, so they stay in
// registers and the loop vectorizes.
template <class Op> void run_chunk(const Op op, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    typename Op::Regs r;
    op.load(r, i);
    op.store(r, i);
  }
}

// Runs element op Op (built from a tensor's slots, its chunk start and
// extra arguments) over every element of every tensor.
template <class Op, class... Args>
void apply_op(const TensorLists& lists, int threads, const Args&... args) {
  if (int(lists.slots.size()) != Op::kDepth) throw std::invalid_argument("wrong number of tensor lists");
  for_each_chunk(lists.numel, threads, [&](int64_t t, int64_t start, int64_t n) {
    auto slot = [&](int k) { return lists.ptr(k, t); };
    run_chunk(Op(slot, start, args...), n);
  });
}

// out[k][t] = the sum over tensor t's chunks of the Width partials
// body(t, start, n, partials) writes for a chunk. Partials are kept per chunk
// and added in chunk order: the totals do not depend on the thread count.
template <int Width, class Body>
void chunk_totals(const std::vector<int64_t>& numel, int threads, double* const (&out)[Width], const Body& body) {
  const std::vector<int64_t> offsets = chunk_offsets(numel, kChunk);
  std::vector<double> partial(size_t(offsets.back()) * Width, 0.0);
  for_each_chunk(numel, threads, [&](int64_t t, int64_t start, int64_t n) {
    body(t, start, n, &partial[size_t(offsets[size_t(t)] + start / kChunk) * Width]);
  });
  for (size_t t = 0; t < numel.size(); ++t) {
    for (int k = 0; k < Width; ++k) {
      double total = 0.0;
      for (int64_t c = offsets[t]; c < offsets[t + 1]; ++c) total += partial[size_t(c) * Width + size_t(k)];
      out[k][t] = total;
    }
  }
}

// Copies n floats to dst with non-temporal stores where the CPU has them.
// LAMB's u is read back only after the whole bucket has gone through the
// caches; a plain store would first read every line of u from memory (read
// for ownership) only to overwrite it. The caller fences (stream_fence).
inline void stream_floats(float* dst, const float* src, int64_t n) {
  int64_t i = 0;
#if defined(__AVX__)
  for (; i < n && (reinterpret_cast<uintptr_t>(dst + i) & 31u) != 0; ++i) dst[i] = src[i];
  for (; i + 8 <= n; i += 8) _mm256_stream_ps(dst + i, _mm256_loadu_ps(src + i));
#elif defined(__SSE__)
  for (; i < n && (reinterpret_cast<uintptr_t>(dst + i) & 15u) != 0; ++i) dst[i] = src[i];
  for (; i + 4 <= n; i += 4) _mm_stream_ps(dst + i, _mm_loadu_ps(src + i));
#endif
  if (i < n) std::memcpy(dst + i, src + i, size_t(n - i) * sizeof(float));
}

// Non-temporal stores are weakly ordered: fence before another thread (stage
// 2) may read them.
inline void stream_fence() {
#if defined(__SSE__)
  _mm_sfence();
#endif
}

// u of one tile, 4 KiB: it stays in L1 between the update loop and streaming out.
constexpr int64_t kTile = 1024;
// Buckets whose u is at least this large stream u past the caches; smaller
// ones keep it cached for stage 2 (it then still sits in L2/L3).
constexpr int64_t kStreamBytes = int64_t(8) << 20;

template <class T> double chunk_sumsq(const T* x, int64_t n, double scale) {
  double acc = 0.0;
#pragma omp simd reduction(+ : acc)
  for (int64_t i = 0; i < n; ++i) {
    const double v = double(to_float(x[i])) * scale;
    acc += v * v;
  }
  return acc;
}

// LAMB stage 1 over one chunk: moments, u, and sums[0..1] = the chunk's sums
// of p^2 and u^2 (double). Tile by tile: the update loop, then the two sums
// over the tile while it is in L1 (p just read, u just written), so memory is
// read once. The sums are separate loops: GCC does not vectorize the update
// loop with double reductions in it.
template <bool Stream, class Op> void lamb_update_chunk(const Op op, int64_t n, double* sums) {
  double p2 = 0.0, u2 = 0.0;
  alignas(64) float tile[kTile];
  for (int64_t base = 0; base < n; base += kTile) {
    const int64_t len = std::min(kTile, n - base);
    float* const u = Stream ? tile : op.u + base;
#pragma omp simd
    for (int64_t i = 0; i < len; ++i) {
      typename Op::Regs r;
      op.load(r, base + i);
      u[i] = op.moments(r, base + i);
    }
    p2 += chunk_sumsq(op.p + base, len, 1.0);
    u2 += chunk_sumsq(u, len, 1.0);
    if constexpr (Stream) stream_floats(op.u + base, tile, len);
  }
  if constexpr (Stream) stream_fence();
  sums[0] = p2;
  sums[1] = u2;
}

}  // namespace

int64_t chunk_size() { return kChunk; }

void adam(const TensorLists& lists, const StorageKinds& kinds, const AdamScalars& s, int threads) {
  if (s.skip) return;
  with_kinds(kinds, [&](auto g, auto p, auto m, auto master) {
    using Op = AdamOp<decltype(g), decltype(p), decltype(m), decltype(master)::value>;
    apply_op<Op>(lists, threads, s);
  });
}

void adagrad(const TensorLists& lists, const StorageKinds& kinds, const AdagradScalars& s, int threads) {
  if (s.skip) return;
  with_kinds(kinds, [&](auto g, auto p, auto m, auto master) {
    using Op = AdagradOp<decltype(g), decltype(p), decltype(m), decltype(master)::value>;
    apply_op<Op>(lists, threads, s);
  });
}

void sgd(const TensorLists& lists, const StorageKinds& kinds, const SgdScalars& s, bool with_buffer, int threads) {
  if (s.skip) return;
  with_kinds(kinds, [&](auto g, auto p, auto m, auto master) {
    using G = decltype(g);
    using P = decltype(p);
    using M = decltype(m);
    constexpr bool kMaster = decltype(master)::value;
    if (with_buffer) apply_op<SgdMomentumOp<G, P, M, kMaster>>(lists, threads, s);
    else apply_op<SgdOp<G, P, M, kMaster>>(lists, threads, s);
  });
}

void lion(const TensorLists& lists, const StorageKinds& kinds, const LionScalars& s, int threads) {
  if (s.skip) return;
  with_kinds(kinds, [&](auto g, auto p, auto m, auto master) {
    using Op = LionOp<decltype(g), decltype(p), decltype(m), decltype(master)::value>;
    apply_op<Op>(lists, threads, s);
  });
}

void sumsq(const TensorLists& lists, Dtype dtype, double scale, double* out, int threads) {
  with_storage(dtype, [&](auto x) {
    using T = decltype(x);
    chunk_totals<1>(lists.numel, threads, {out}, [&](int64_t t, int64_t start, int64_t n, double* partial) {
      *partial = chunk_sumsq(static_cast<const T*>(lists.ptr(0, t)) + start, n, scale);
    });
  });
}

void lamb_update(const TensorLists& lists, const StorageKinds& kinds, const LambScalars& s, float clip,
                 double* p_sumsq, double* u_sumsq, int threads) {
  if (s.skip) {
    std::fill_n(p_sumsq, lists.numel.size(), 0.0);
    std::fill_n(u_sumsq, lists.numel.size(), 0.0);
    return;
  }
  int64_t total = 0;
  for (int64_t n : lists.numel) total += n;
  const bool stream = total * int64_t(sizeof(float)) >= kStreamBytes;
  with_kinds(kinds, [&](auto g, auto p, auto m, auto) {
    using Op = LambUpdateOp<decltype(g), decltype(p), decltype(m)>;
    if (int(lists.slots.size()) != Op::kDepth) throw std::invalid_argument("wrong number of tensor lists");
    chunk_totals<2>(lists.numel, threads, {p_sumsq, u_sumsq}, [&](int64_t t, int64_t start, int64_t n, double* sums) {
      const Op op([&](int k) { return lists.ptr(k, t); }, start, clip, s);
      if (stream) lamb_update_chunk<true>(op, n, sums);
      else lamb_update_chunk<false>(op, n, sums);
    });
  });
}

void lamb_apply(const TensorLists& lists, const StorageKinds& kinds, const float* step_factors,
                int threads) {
  with_kinds(kinds, [&](auto g, auto p, auto, auto master) {
    using Op = LambApplyOp<decltype(g), decltype(p), decltype(master)::value>;
    if (int(lists.slots.size()) != Op::kDepth) throw std::invalid_argument("wrong number of tensor lists");
    for_each_chunk(lists.numel, threads, [&](int64_t t, int64_t start, int64_t n) {
      auto slot = [&](int k) { return lists.ptr(k, t); };
      run_chunk(Op(slot, start, step_factors[t]), n);
    });
  });
}

void convert(const void* src, Dtype src_dtype, void* dst, Dtype dst_dtype, int64_t n) {
  with_storage(src_dtype, [&](auto s) {
    with_storage(dst_dtype, [&](auto d) {
      using S = decltype(s);
      using D = decltype(d);
      const S* in = static_cast<const S*>(src);
      D* out = static_cast<D*>(dst);
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) out[i] = from_float<D>(to_float(in[i]));
    });
  });
}

}  // namespace optim::cpu
