#include "cpu_kernels.h"

#include <algorithm>
#include <cmath>
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

// Below this many elements a call runs on the calling thread: waking the
// other threads costs microseconds on an idle machine, and on a busy one up
// to a scheduler time slice (milliseconds), more than the work itself.
constexpr int64_t kParallelMin = 4 * kChunk;

// The chunks of every tensor of a call: the planner's single unbounded launch.
class WorkList {
 public:
  explicit WorkList(const std::vector<int64_t>& numel) : numel_(numel) {
    const int64_t unbounded = std::numeric_limits<int64_t>::max();
    std::vector<Launch> plan = plan_launches(numel, kChunk, unbounded, unbounded);
    if (!plan.empty()) work_ = std::move(plan.front());
    for (int64_t n : numel) total_ += n;
  }

  // Whether a parallel region over this work is worth its wake-up.
  bool parallel(int threads) const { return threads > 1 && work_.block_slot.size() > 1 && total_ >= kParallelMin; }

  // body(t, start, n) for every chunk, shared among the threads of the
  // enclosing parallel region (or all on this thread outside one). Static:
  // each thread streams one contiguous range, which the prefetchers follow;
  // handing chunks out one at a time (dynamic) interleaves the threads'
  // streams and made a read-only pass 1.7x slower at 16M on 2 cores (it did
  // let an idle thread take over a descheduled one's chunks). Results do not
  // depend on which thread runs a chunk.
  template <class Body> void run(const Body& body) const {
    const int64_t blocks = int64_t(work_.block_slot.size());
#pragma omp for schedule(static)
    for (int64_t b = 0; b < blocks; ++b) {
      const int64_t t = work_.tensors[size_t(work_.block_slot[size_t(b)])];
      const int64_t start = work_.block_chunk[size_t(b)] * kChunk;
      body(t, start, std::min(kChunk, numel_[size_t(t)] - start));
    }
  }

  int64_t total() const { return total_; }

 private:
  const std::vector<int64_t>& numel_;
  Launch work_;
  int64_t total_ = 0;
};

// Calls body(t, start, n) for every chunk of every tensor, in parallel.
template <class Body> void for_each_chunk(const std::vector<int64_t>& numel, int threads, const Body& body) {
  const WorkList work(numel);
#pragma omp parallel num_threads(threads) if (work.parallel(threads))
  work.run(body);
}

// By value: a local op's pointers cannot alias the stores, so they stay in
// registers and the loop vectorizes.
template <class Op> void run_chunk(const Op op, int64_t n) {
#pragma GCC ivdep
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

// Per-chunk partial sums (Width per chunk), kept by chunk and added per
// tensor in chunk order: totals do not depend on the thread count or on
// which thread ran which chunk.
template <int Width> class ChunkPartials {
 public:
  explicit ChunkPartials(const std::vector<int64_t>& numel)
      : offsets_(chunk_offsets(numel, kChunk)), values_(size_t(offsets_.back()) * Width, 0.0) {}

  double* at(int64_t t, int64_t start) { return &values_[size_t(offsets_[size_t(t)] + start / kChunk) * Width]; }

  // out[k][t] = tensor t's total of partial k.
  void totals(double* const (&out)[Width]) const {
    for (size_t t = 0; t + 1 < offsets_.size(); ++t) {
      for (int k = 0; k < Width; ++k) {
        double total = 0.0;
        for (int64_t c = offsets_[t]; c < offsets_[t + 1]; ++c) total += values_[size_t(c) * Width + size_t(k)];
        out[k][t] = total;
      }
    }
  }

 private:
  std::vector<int64_t> offsets_;
  std::vector<double> values_;
};

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

// Sum of (x*scale)^2 in double. kLanes independent partial sums: one
// accumulator would make every add wait for the previous one (4 cycles), and
// the loop would run at a quarter of the rate memory delivers. The lanes are
// added in a fixed order, so the result depends only on x and n.
constexpr int kLanes = 32;

// Unscaled, the square of a float is exact in double (24-bit significands),
// so a fused multiply-add rounds exactly where x*x followed by + would: the
// same sum in one instruction. Only where the CPU has FMA (else std::fma is a
// library call).
#if defined(__FMA__)
constexpr bool kFma = true;
#else
constexpr bool kFma = false;
#endif

template <bool Fma, class T> double lanes_sumsq(const T* x, int64_t n, double scale) {
  double acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
#pragma omp simd
    for (int j = 0; j < kLanes; ++j) {
      const double v = double(to_float(x[i + j])) * scale;
      acc[j] = Fma ? std::fma(v, v, acc[j]) : acc[j] + v * v;
    }
  }
  for (int j = 0; i < n; ++i, ++j) {
    const double v = double(to_float(x[i])) * scale;
    acc[j] = Fma ? std::fma(v, v, acc[j]) : acc[j] + v * v;
  }
  double total = 0.0;
  for (int j = 0; j < kLanes; ++j) total += acc[j];
  return total;
}

template <class T> double chunk_sumsq(const T* x, int64_t n, double scale) {
  return (kFma && scale == 1.0) ? lanes_sumsq<kFma>(x, n, 1.0) : lanes_sumsq<false>(x, n, scale);
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
#pragma GCC ivdep
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
  ChunkPartials<1> partials(lists.numel);
  with_storage(dtype, [&](auto x) {
    using T = decltype(x);
    for_each_chunk(lists.numel, threads, [&](int64_t t, int64_t start, int64_t n) {
      *partials.at(t, start) = chunk_sumsq(static_cast<const T*>(lists.ptr(0, t)) + start, n, scale);
    });
  });
  partials.totals({out});
}

void lamb(const TensorLists& lists, const StorageKinds& kinds, const LambScalars& s, float clip,
          const LambTrust& trust, double* p_sumsq, double* u_sumsq, int threads) {
  const size_t tensors = lists.numel.size();
  std::fill_n(p_sumsq, tensors, 0.0);
  std::fill_n(u_sumsq, tensors, 0.0);
  if (s.skip) return;
  const WorkList work(lists.numel);
  ChunkPartials<2> partials(lists.numel);
  std::vector<float> factors(tensors);
  const bool stream = work.total() * int64_t(sizeof(float)) >= kStreamBytes;
  const bool parallel = work.parallel(threads);
  with_kinds(kinds, [&](auto g, auto p, auto m, auto master) {
    using Update = LambUpdateOp<decltype(g), decltype(p), decltype(m)>;
    using Apply = LambApplyOp<decltype(g), decltype(p), decltype(master)::value>;
    if (int(lists.slots.size()) != Update::kDepth + Apply::kDepth - 2) {
      throw std::invalid_argument("wrong number of tensor lists");
    }
    // Stage 2's slots within the call's lists: update, param [, model].
    constexpr int kApplySlot[3] = {4, 1, 5};
    // One parallel region for both stages (one wake-up of the threads); the
    // barriers after the first loop and after `single` order the stages.
#pragma omp parallel num_threads(threads) if (parallel)
    {
      work.run([&](int64_t t, int64_t start, int64_t n) {
        const Update op([&](int k) { return lists.ptr(k, t); }, start, clip, s);
        if (stream) lamb_update_chunk<true>(op, n, partials.at(t, start));
        else lamb_update_chunk<false>(op, n, partials.at(t, start));
      });
#pragma omp single
      {
        partials.totals({p_sumsq, u_sumsq});
        for (size_t t = 0; t < tensors; ++t) {
          factors[t] = float(lamb_step_factor(trust.lr, p_sumsq[t], u_sumsq[t], trust.use_ratio));
        }
      }
      work.run([&](int64_t t, int64_t start, int64_t n) {
        run_chunk(Apply([&](int k) { return lists.ptr(kApplySlot[k], t); }, start, factors[size_t(t)]), n);
      });
    }
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
