#include "cpu_kernels.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <thread>
#include <utility>
#include <vector>

#include <omp.h>

#if defined(__SSE__)
#include <immintrin.h>
#endif

#include "element_ops.h"
#include "launch_plan.h"
#include "work_shares.h"

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

  // The threads a region over this work should have: `threads` when it is
  // worth running in parallel, else 1.
  int team(int threads) const { return parallel(threads) ? threads : 1; }

  struct Piece { int64_t t, start, n; };

  // Groups of up to K consecutive chunks: group g holds chunks [g*K, g*K + K).
  template <int K> int64_t groups() const { return (blocks() + K - 1) / K; }

  // body(pieces, count) for every group of up to K consecutive chunks (the
  // units of `shares`, made with groups<K>()), shared among the threads of
  // the enclosing parallel region (or all on this thread outside one). Each
  // thread walks its own contiguous share, which the prefetchers follow, and
  // then helps finish the others' (see WorkShares). Results do not depend on
  // which thread runs a chunk, nor in which order. No barrier at the end: the
  // caller places one where a later pass reads what this one wrote.
  //
  // Backward (each thread walks its share from the end) serves a pass that
  // follows a forward pass over the same arrays: it starts on the data the
  // previous pass touched last, which is still in cache (LAMB's stage 2 after
  // stage 1, the grad norm before stage 1).
  template <int K, class Body> void run_groups(WorkShares& shares, const Body& body, bool backward = false) const {
    const int me = omp_get_thread_num();
    for (int64_t g; (g = shares.next(me, backward)) >= 0;) {
      Piece pieces[K];
      int count = 0;
      for (int64_t b = g * K; b < std::min(blocks(), g * K + K); ++b) pieces[count++] = piece(b);
      body(pieces, count);
    }
  }

  // As run_groups<1>, calling body(t, start, n) for each chunk.
  template <class Body> void run(WorkShares& shares, const Body& body, bool backward = false) const {
    run_groups<1>(shares, [&](const Piece* c, int) { body(c->t, c->start, c->n); }, backward);
  }

  int64_t total() const { return total_; }
  int64_t blocks() const { return int64_t(work_.block_slot.size()); }

 private:
  Piece piece(int64_t b) const {
    const int64_t t = work_.tensors[size_t(work_.block_slot[size_t(b)])];
    const int64_t start = work_.block_chunk[size_t(b)] * kChunk;
    return {t, start, std::min(kChunk, numel_[size_t(t)] - start)};
  }

  const std::vector<int64_t>& numel_;
  Launch work_;
  int64_t total_ = 0;
};

// Calls body(t, start, n) for every chunk of every tensor, in parallel.
template <class Body>
void for_each_chunk(const std::vector<int64_t>& numel, int threads, const Body& body, bool backward = false) {
  const WorkList work(numel);
  const int team = work.team(threads);
  WorkShares shares(work.groups<1>(), team);
#pragma omp parallel num_threads(team) if (team > 1)
  work.run(shares, body, backward);
}

// Elements are computed a piece at a time, each piece first asking for the
// lines kAhead elements on (software prefetch), where that helps. On the
// Intel machine these loops were tuned on, the hardware prefetchers alone
// kept fewer reads in flight than memory can serve: an Adagrad loop over 16M
// on 2 cores took 5.8 ms without, 5.3 ms 1 KiB ahead, 5.15 ms 2 KiB ahead,
// 5.3-5.8 ms 4-8 KiB ahead. On AMD Zen 4 every prefetch scheme tried made the
// loops slower: an AdamW loop over 16M on one core, 11.3 ms plain, 15.0 ms
// 2 KiB ahead (read or write hints alike), 16.8 ms 8 KiB ahead; its L2
// stream prefetcher keeps enough reads in flight by itself. So prefetch() is
// on for other vendors and off on AMD (prefetch_default), and
// FUSED_CPU_PREFETCH=0|1 decides where a machine measures otherwise.
constexpr int64_t kPiece = 256, kAhead = 512, kLineFloats = 16;
constexpr int64_t kAheadBytes = kAhead * int64_t(sizeof(float));  // 2 KiB, what sumsq_streams uses too

bool prefetch_default() {
  if (const char* env = std::getenv("FUSED_CPU_PREFETCH")) {
    if (std::strcmp(env, "0") == 0) return false;
    if (std::strcmp(env, "1") == 0) return true;
  }
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  return !__builtin_cpu_is("amd");
#else
  return true;
#endif
}

std::atomic<bool>& prefetch_flag() {
  static std::atomic<bool> flag(prefetch_default());
  return flag;
}

// Read once per piece: a uniform branch, predicted.
bool prefetching() { return prefetch_flag().load(std::memory_order_relaxed); }

// Elements [from, to) of op's chunk. By value: a local op's pointers cannot
// alias the stores, so they stay in registers and the loop vectorizes.
template <class Op> void run_range(const Op op, int64_t from, int64_t to, bool prefetch) {
  // Past the end of an array a prefetch is only a hint: it never faults.
  if (prefetch) {
    for (int64_t k = from; k < to; k += kLineFloats) op.prefetch(k + kAhead);
  }
#pragma GCC ivdep
  for (int64_t i = from; i < to; ++i) {
    typename Op::Regs r;
    op.load(r, i);
    op.store(r, i);
  }
}

template <class Op> void run_chunk(const Op& op, int64_t n) {
  const bool prefetch = prefetching();
  // Without prefetches, pieces serve nothing: one loop over the chunk.
  if (!prefetch) return run_range(op, 0, n, false);
  for (int64_t at = 0; at < n; at += kPiece) run_range(op, at, std::min(at + kPiece, n), true);
}

// Runs up to kStreams chunks' ops side by side, 1 KiB of each in turn (see
// sumsq_streams: more reads in flight per core).
template <class Op> void run_streams(const Op* ops, const int64_t* n, int count) {
  const int64_t longest = *std::max_element(n, n + count);
  const bool prefetch = prefetching();
  for (int64_t at = 0; at < longest; at += kPiece) {
    for (int k = 0; k < count; ++k) {
      if (at < n[k]) run_range(ops[k], at, std::min(at + kPiece, n[k]), prefetch);
    }
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

  // Tensor t's total of partial k.
  double total(size_t t, int k) const {
    double sum = 0.0;
    for (int64_t c = offsets_[t]; c < offsets_[t + 1]; ++c) sum += values_[size_t(c) * Width + size_t(k)];
    return sum;
  }

  // out[k][t] = tensor t's total of partial k.
  void totals(double* const (&out)[Width]) const {
    for (size_t t = 0; t + 1 < offsets_.size(); ++t) {
      for (int k = 0; k < Width; ++k) out[k][t] = total(t, k);
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

// u of one tile, 512 B: small, so that the update loop and the sums over its
// tile interleave finely and the sums' arithmetic overlaps the loads of the
// next tile (a 4 KiB tile left stage 1 1.2 ms slower at 16M).
constexpr int64_t kTile = 128;
// Buckets whose u is at least this large stream u past the caches; smaller
// ones keep it cached for stage 2 (it then still sits in L2/L3).
constexpr int64_t kStreamBytes = int64_t(8) << 20;

// Unscaled, the square of a float is exact in double (24-bit significands),
// so a fused multiply-add rounds exactly where x*x followed by + would: the
// same sum in one instruction. Only where the CPU has FMA (else std::fma is a
// library call).
#if defined(__FMA__)
constexpr bool kFma = true;
#else
constexpr bool kFma = false;
#endif

// Sum of (x*scale)^2 in double over one chunk, fed in pieces. kLanes
// independent partial sums: one accumulator would make every add wait for the
// previous one (4 cycles), and the loop would run at a quarter of the rate
// memory delivers. Element i of the chunk goes to lane i % kLanes (pieces other
// than the last are whole multiples of kLanes), and the lanes are added in a
// fixed order once per chunk: the result depends only on the chunk's values,
// not on how it was cut into pieces. Adding the lanes once per chunk, not once
// per piece, matters: that is 31 dependent adds, as long as the piece's
// arithmetic when pieces are LAMB's small tiles.
template <bool Fma> class SumSq {
 public:
  static constexpr int kLanes = 32;

  explicit SumSq(double scale) : scale_(scale) {}

  template <class T> void add(const T* x, int64_t n) {
    int64_t i = 0;
    for (; i + kLanes <= n; i += kLanes) {
#pragma omp simd
      for (int j = 0; j < kLanes; ++j) acc_[j] = term(x[i + j], acc_[j]);
    }
    for (int j = 0; i < n; ++i, ++j) acc_[j] = term(x[i], acc_[j]);
  }

  double total() const {
    double sum = 0.0;
    for (int j = 0; j < kLanes; ++j) sum += acc_[j];
    return sum;
  }

 private:
  template <class T> double term(T x, double acc) const {
    const double v = double(to_float(x)) * scale_;
    return Fma ? std::fma(v, v, acc) : acc + v * v;
  }

  alignas(64) double acc_[kLanes] = {};
  double scale_;
};

// Sums of squares of up to kStreams chunks (x[k], n[k] elements), into
// out[k], read side by side in 1 KiB pieces, each asking for the lines 2 KiB on.
// A read-only pass from memory is bound by the reads one core keeps in flight:
// one stream read 64 MiB in 3.7 ms on 2 cores, four streams with prefetches in
// 2.4 ms. Each chunk's sum is the one a single add over it gives (its pieces
// are whole multiples of the lanes).
constexpr int kStreams = 4;

template <class Sum, class T> void sumsq_streams(const T* const* x, const int64_t* n, int count, double scale,
                                                 double* out) {
  constexpr int64_t kSpan = 1024 / int64_t(sizeof(T)), kLine = 64 / int64_t(sizeof(T));
  constexpr int64_t kAheadAt = kAheadBytes / int64_t(sizeof(T));
  static_assert(kStreams == 4, "one Sum per stream below");
  Sum sums[kStreams] = {Sum(scale), Sum(scale), Sum(scale), Sum(scale)};
  const int64_t longest = *std::max_element(n, n + count);
  const bool prefetch = prefetching();
  for (int64_t at = 0; at < longest; at += kSpan) {
    for (int k = 0; k < count; ++k) {
      if (at >= n[k]) continue;
      // A prefetch past the end of an array is only a hint: it never faults.
      if (prefetch) {
        for (int64_t l = 0; l < kSpan; l += kLine) __builtin_prefetch(x[k] + at + kAheadAt + l, 0, 3);
      }
      sums[k].add(x[k] + at, std::min(kSpan, n[k] - at));
    }
  }
  for (int k = 0; k < count; ++k) out[k] = sums[k].total();
}

template <class T> void chunk_sumsqs(const T* const* x, const int64_t* n, int count, double scale, double* out) {
  if (kFma && scale == 1.0) sumsq_streams<SumSq<kFma>>(x, n, count, 1.0, out);
  else sumsq_streams<SumSq<false>>(x, n, count, scale, out);
}

// LAMB stage 1 over one chunk: moments, u, and sums[0..1] = the chunk's sums
// of p^2 and u^2 (double, as sumsq would give). Tile by tile: the update
// loop, then the two sums over the tile while it is in L1 (p just read, u just
// written), so memory is read once. The sums are separate loops: GCC does not
// vectorize the update loop with double reductions in it.
template <bool Stream, class Op> void lamb_update_chunk(const Op op, int64_t n, double* sums) {
  SumSq<kFma> p2(1.0), u2(1.0);
  alignas(64) float tile[kTile];
  const bool prefetch = prefetching();
  for (int64_t base = 0; base < n; base += kTile) {
    const int64_t len = std::min(kTile, n - base);
    float* const u = Stream ? tile : op.u + base;
    if (prefetch) {
      for (int64_t k = base; k < base + len; k += kLineFloats) op.prefetch(k + kAhead);
    }
#pragma GCC ivdep
    for (int64_t i = 0; i < len; ++i) {
      typename Op::Regs r;
      op.load(r, base + i);
      u[i] = op.moments(r, base + i);
    }
    p2.add(op.p + base, len);
    u2.add(u, len);
    if constexpr (Stream) stream_floats(op.u + base, tile, len);
  }
  if constexpr (Stream) stream_fence();
  sums[0] = p2.total();
  sums[1] = u2.total();
}

// LAMB tensors of at most this many elements go whole to one thread, stage 1
// then stage 2 back to back: their u (1 MiB at most, never streamed) and
// params are still in L2/L3 when stage 2 reads them, so u does not go to
// memory and p is read from memory once. Larger tensors are cut into chunks
// that all threads share, and their stage 2 waits for every chunk of stage 1
// (a tensor's norms need all of it). Either way a tensor's norms are the same
// per-chunk partials added in chunk order: the path does not change results.
constexpr int64_t kWholeMax = int64_t(1) << 18;

// Which LAMB tensors are done whole (numel <= kWholeMax), and how they are
// shared out among the threads.
class WholeTensors {
 public:
  explicit WholeTensors(const std::vector<int64_t>& numel) : first_(numel.size(), -1) {
    for (size_t t = 0; t < numel.size(); ++t) {
      if (numel[t] <= kWholeMax) {
        first_[t] = total_;
        total_ += numel[t];
        ids_.push_back(int64_t(t));
      }
    }
  }

  bool whole(size_t t) const { return first_[t] >= 0; }
  int64_t total() const { return total_; }
  int64_t count() const { return int64_t(ids_.size()); }

  // The whole tensors' indices, in order: the units of the shares below.
  const std::vector<int64_t>& ids() const { return ids_; }

  // Shares for a team: thread k's share is the whole tensors whose first
  // element, counting the whole tensors' elements in order, falls in the k-th
  // team-th of their total (zero-element tensors by position, so that they are
  // shared out too).
  std::vector<int64_t> bounds(int team) const {
    std::vector<int64_t> bounds(size_t(team) + 1, 0);
    for (int k = 1; k <= team; ++k) {
      int64_t u = bounds[size_t(k) - 1];
      while (u < count() && owner(u, team) < k) ++u;
      bounds[size_t(k)] = u;
    }
    return bounds;
  }

  // The element counts of the tensors that are not whole (0 for whole ones).
  std::vector<int64_t> chunked(const std::vector<int64_t>& numel) const {
    std::vector<int64_t> out(numel);
    for (size_t t = 0; t < out.size(); ++t) {
      if (whole(t)) out[t] = 0;
    }
    return out;
  }

 private:
  int64_t owner(int64_t unit, int team) const {
    const int64_t at = total_ > 0 ? first_[size_t(ids_[size_t(unit)])] * team / total_ : 0;
    return std::min<int64_t>(at, team - 1);
  }

  std::vector<int64_t> first_;
  std::vector<int64_t> ids_;
  int64_t total_ = 0;
};

}  // namespace

int64_t chunk_size() { return kChunk; }

bool prefetch(int enable) {
  if (enable >= 0) prefetch_flag().store(enable != 0, std::memory_order_relaxed);
  return prefetching();
}

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

// Backward: LAMB's grad norm, so that stage 1, which walks the grads forward
// next, starts on the ones this pass left in cache.
void sumsq(const TensorLists& lists, Dtype dtype, double scale, double* out, int threads) {
  ChunkPartials<1> partials(lists.numel);
  with_storage(dtype, [&](auto x) {
    using T = decltype(x);
    const WorkList work(lists.numel);
    const int team = work.team(threads);
    WorkShares shares(work.groups<kStreams>(), team);
#pragma omp parallel num_threads(team) if (team > 1)
    work.run_groups<kStreams>(shares, [&](const WorkList::Piece* pieces, int count) {
      const T* x[kStreams];
      int64_t n[kStreams];
      double out[kStreams];
      for (int k = 0; k < count; ++k) {
        x[k] = static_cast<const T*>(lists.ptr(0, pieces[k].t)) + pieces[k].start;
        n[k] = pieces[k].n;
      }
      chunk_sumsqs(x, n, count, scale, out);
      for (int k = 0; k < count; ++k) *partials.at(pieces[k].t, pieces[k].start) = out[k];
    }, /*backward=*/true);
  });
  partials.totals({out});
}

void lamb(const TensorLists& lists, const StorageKinds& kinds, const LambScalars& s, double clip,
          const LambTrust& trust, double* p_sumsq, double* u_sumsq, int threads) {
  const size_t tensors = lists.numel.size();
  std::fill_n(p_sumsq, tensors, 0.0);
  std::fill_n(u_sumsq, tensors, 0.0);
  if (s.skip) return;
  const WholeTensors whole(lists.numel);
  const std::vector<int64_t> chunked_numel = whole.chunked(lists.numel);
  const WorkList work(chunked_numel);
  ChunkPartials<2> partials(lists.numel);
  std::vector<float> factors(tensors);
  const bool stream = work.total() * int64_t(sizeof(float)) >= kStreamBytes;
  const bool parallel = threads > 1 && work.blocks() + whole.count() > 1 &&
                        work.total() + whole.total() >= kParallelMin;
  const int team = parallel ? threads : 1;
  WorkShares stage1_shares(work.groups<1>(), team), whole_shares(whole.bounds(team)),
      stage2_shares(work.groups<2>(), team);
  with_kinds(kinds, [&](auto g, auto p, auto m, auto master) {
    using Update = LambUpdateOp<decltype(g), decltype(p), decltype(m)>;
    using Apply = LambApplyOp<decltype(g), decltype(p), decltype(master)::value>;
    if (int(lists.slots.size()) != Update::kDepth + Apply::kDepth - 2) {
      throw std::invalid_argument("wrong number of tensor lists");
    }
    // Stage 2's slots within the call's lists: update, param [, model].
    constexpr int kApplySlot[3] = {4, 1, 5};
    // u of a whole tensor goes to this thread's scratch, reused tensor after
    // tensor (1 MiB per thread, kept while the thread lives): it stays in L2,
    // where the bucket's u buffer would first be read from memory on every
    // store (read for ownership) and then evict params stage 2 still needs.
    // 100 tensors of 168K: 14.5 -> 12.3 ms for both stages.
    static thread_local std::vector<float> whole_u;
    auto slot = [&](int64_t t, int k) -> void* {
      return (k == 4 && whole.whole(size_t(t))) ? static_cast<void*>(whole_u.data()) : lists.ptr(k, t);
    };
    auto stage1 = [&](int64_t t, int64_t start, int64_t n, bool streamed) {
      const Update op([&](int k) { return slot(t, k); }, start, clip, s);
      if (streamed) lamb_update_chunk<true>(op, n, partials.at(t, start));
      else lamb_update_chunk<false>(op, n, partials.at(t, start));
    };
    auto factor = [&](size_t t) {
      p_sumsq[t] = partials.total(t, 0);
      u_sumsq[t] = partials.total(t, 1);
      factors[t] = float(lamb_step_factor(trust.lr, p_sumsq[t], u_sumsq[t], trust.use_ratio));
    };
    auto apply_of = [&](const WorkList::Piece& c) {
      return Apply([&](int k) { return slot(c.t, kApplySlot[k]); }, c.start, factors[size_t(c.t)]);
    };
    auto stage2 = [&](int64_t t, int64_t start, int64_t n) { run_chunk(apply_of({t, start, n}), n); };
    // One parallel region for everything (one wake-up of the threads). Each
    // thread runs the chunked tensors' stage 1, then whole tensors start to
    // finish (its own share, then what is left of the others', WorkShares);
    // the barrier and the one ending `single` order the chunked tensors'
    // stages. Stage 2 walks backward, from where stage 1 ended, on the params
    // still in cache.
#pragma omp parallel num_threads(team) if (team > 1)
    {
      work.run(stage1_shares, [&](int64_t t, int64_t start, int64_t n) { stage1(t, start, n, stream); });
      if (whole.count() > 0 && whole_u.size() < size_t(kWholeMax)) whole_u.resize(size_t(kWholeMax));
      for (int64_t u; (u = whole_shares.next(omp_get_thread_num(), false)) >= 0;) {
        const size_t t = size_t(whole.ids()[size_t(u)]);
        const int64_t n = lists.numel[t];
        for (int64_t start = 0; start < n; start += kChunk) stage1(int64_t(t), start, std::min(kChunk, n - start), false);
        factor(t);
        for (int64_t start = (n - 1) / kChunk * kChunk; start >= 0 && n > 0; start -= kChunk) {
          stage2(int64_t(t), start, std::min(kChunk, n - start));
        }
      }
#pragma omp barrier
#pragma omp single
      for (size_t t = 0; t < tensors; ++t) {
        if (!whole.whole(t)) factor(t);
      }
      // Two chunks side by side: stage 2 reads u and p of each (10% faster at
      // 16M than one chunk at a time, with u coming from memory).
      work.run_groups<2>(stage2_shares, [&](const WorkList::Piece* pieces, int count) {
        const Apply ops[2] = {apply_of(pieces[0]), apply_of(pieces[count - 1])};
        const int64_t n[2] = {pieces[0].n, pieces[count - 1].n};
        run_streams(ops, n, count);
      }, /*backward=*/true);
    }
  });
}

std::vector<std::vector<int64_t>> claim_order(const std::vector<int64_t>& bounds, int threads, bool backward,
                                              int64_t slow_us) {
  if (bounds.size() < 2 || bounds.front() != 0 || !std::is_sorted(bounds.begin(), bounds.end())) {
    throw std::invalid_argument("claim_order: bounds must ascend from 0, with at least one share");
  }
  if (threads < 1) throw std::invalid_argument("claim_order: threads must be at least 1");
  WorkShares shares(bounds);
  std::vector<std::vector<int64_t>> order(static_cast<size_t>(threads));
#pragma omp parallel num_threads(threads)
  {
    const int me = omp_get_thread_num();
    for (int64_t u; (u = shares.next(me, backward)) >= 0;) {
      order[size_t(me)].push_back(u);
      if (me == 1 && slow_us > 0) std::this_thread::sleep_for(std::chrono::microseconds(slow_us));
    }
  }
  return order;
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
