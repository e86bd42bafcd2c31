// Units of work shared out among the threads of a parallel region: each
// thread owns a contiguous share and claims its units one at a time, in order;
// a thread done with its share takes units from the far end of another's.
//
// Why not plain static shares: on the 2-core machine one thread often ran
// 15% slower than the other for a whole pass (LAMB stage 1 at 16M: 13.2 ms on
// one thread, 15.5 ms on the other, averaged over 51 steps), and a pass ends
// when its slower thread does. Why not one shared counter (dynamic): the
// threads' streams then interleave, and a read-only pass got 1.7x slower.
// Here each thread still walks one contiguous range, and only the end of a
// slow thread's range goes to the fast one, walked from the other end.
//
// Which thread runs a unit changes from call to call; the callers' results
// must not depend on it (per-unit results, combined in unit order).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <vector>

namespace optim::cpu {

class WorkShares {
 public:
  // Units [0, units) in `team` contiguous, nearly equal shares.
  WorkShares(int64_t units, int team) : WorkShares(equal_bounds(units, team)) {}

  // Share k = units [bounds[k], bounds[k + 1]); bounds ascending, from 0.
  explicit WorkShares(const std::vector<int64_t>& bounds)
      : team_(int(bounds.size()) - 1), cursors_(new Cursor[bounds.size() - 1]) {
    if (bounds.back() >= (int64_t(1) << 32)) throw std::invalid_argument("WorkShares: too many units");
    for (int k = 0; k < team_; ++k) cursors_[k].range.store(pack(bounds[k], bounds[k + 1]));
  }

  // The next unit for thread `me`, or -1 once every unit is claimed. First
  // its own share, in order (from its last unit down when backward); then
  // the other shares from their other end, one unit at a time. A thread
  // beyond the planned team (the runtime gave more) only takes from others.
  int64_t next(int me, bool backward) {
    int64_t unit = -1;
    if (me < team_ && take(me, backward, &unit)) return unit;
    for (int k = 1; k <= team_; ++k) {
      if (take((me + k) % team_, !backward, &unit)) return unit;
    }
    return -1;
  }

  static std::vector<int64_t> equal_bounds(int64_t units, int team) {
    std::vector<int64_t> bounds(size_t(team) + 1, 0);
    const int64_t share = units / team, extra = units % team;
    for (int k = 0; k < team; ++k) bounds[size_t(k) + 1] = bounds[size_t(k)] + share + (k < extra ? 1 : 0);
    return bounds;
  }

 private:
  // [lo, hi) of a share's unclaimed units, in one word, so that a claim from
  // either end is one compare-and-swap. Padded: the owner claims often.
  struct alignas(64) Cursor {
    std::atomic<uint64_t> range{0};
  };

  static uint64_t pack(int64_t lo, int64_t hi) { return uint64_t(lo) << 32 | uint64_t(hi); }

  bool take(int share, bool from_end, int64_t* unit) {
    std::atomic<uint64_t>& range = cursors_[share].range;
    uint64_t now = range.load(std::memory_order_relaxed);
    for (;;) {
      const int64_t lo = int64_t(now >> 32), hi = int64_t(now & 0xffffffffu);
      if (lo >= hi) return false;
      const uint64_t after = from_end ? pack(lo, hi - 1) : pack(lo + 1, hi);
      if (range.compare_exchange_weak(now, after, std::memory_order_relaxed)) {
        *unit = from_end ? hi - 1 : lo;
        return true;
      }
    }
  }

  int team_;
  std::unique_ptr<Cursor[]> cursors_;
};

}  // namespace optim::cpu
