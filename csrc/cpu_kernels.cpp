#include "cpu_kernels.h"

#include <algorithm>
#include <limits>
#include <vector>

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

template <class T> double chunk_sumsq(const T* x, int64_t n, double scale) {
  double acc = 0.0;
#pragma omp simd reduction(+ : acc)
  for (int64_t i = 0; i < n; ++i) {
    const double v = double(to_float(x[i])) * scale;
    acc += v * v;
  }
  return acc;
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
  const std::vector<int64_t> offsets = chunk_offsets(lists.numel, kChunk);
  std::vector<double> partial(size_t(offsets.back()), 0.0);
  with_storage(dtype, [&](auto x) {
    using T = decltype(x);
    for_each_chunk(lists.numel, threads, [&](int64_t t, int64_t start, int64_t n) {
      const T* base = static_cast<const T*>(lists.ptr(0, t)) + start;
      partial[size_t(offsets[size_t(t)] + start / kChunk)] = chunk_sumsq(base, n, scale);
    });
  });
  for (size_t t = 0; t < lists.numel.size(); ++t) {
    double total = 0.0;
    for (int64_t c = offsets[t]; c < offsets[t + 1]; ++c) total += partial[size_t(c)];
    out[t] = total;
  }
}

void lamb_update(const TensorLists& lists, const StorageKinds& kinds, const LambScalars& s,
                 float clip, int threads) {
  if (s.skip) return;
  with_kinds(kinds, [&](auto g, auto p, auto m, auto) {
    using Op = LambUpdateOp<decltype(g), decltype(p), decltype(m)>;
    apply_op<Op>(lists, threads, clip, s);
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
