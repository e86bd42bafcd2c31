// Which tensor and chunk goes into which launch: the packing of a
// multi-tensor apply, as plain host code (no CUDA, no torch).
//
// The CUDA launcher (multi_tensor_apply.cuh) fills one kernel-argument table
// per Launch; the CPU loops (cpu_kernels.cpp) use a single unbounded Launch as
// their list of work items; tests drive it with synthetic sizes through the
// CPU extension (fused._ext.plan_launches). Packing is where multi-tensor
// bugs have lived (zero-numel tensors, a table that fills exactly, 32-bit
// sizes), so it is kept small and separate.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace optim {

// One kernel launch: the tensors it holds (indices into the caller's list,
// one per table slot) and, per block, the slot and the chunk it processes.
struct Launch {
  std::vector<int64_t> tensors;
  std::vector<int32_t> block_slot;
  std::vector<int64_t> block_chunk;
  int64_t first_block = 0;  // blocks in all earlier launches
};

inline int64_t chunk_count(int64_t numel, int64_t chunk_size) {
  return (numel + chunk_size - 1) / chunk_size;
}

inline void check_plan_args(const std::vector<int64_t>& sizes, int64_t chunk_size,
                            int64_t max_tensors, int64_t max_blocks) {
  if (chunk_size <= 0 || max_tensors <= 0 || max_blocks <= 0) {
    throw std::invalid_argument("plan_launches: chunk_size, max_tensors and max_blocks must be positive");
  }
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] < 0) {
      throw std::invalid_argument("plan_launches: tensor " + std::to_string(i) + " has a negative size");
    }
  }
}

// Tensors keep their order and chunks theirs, so block b of the whole plan
// (first_block + index in its launch) is chunk_offsets(sizes)[t] + chunk.
// Zero-numel tensors get no slot and no block, wherever they are in the list.
// A slot is opened only together with its first block, so no launch holds an
// idle slot, and a launch is closed only when a block needs room.
inline std::vector<Launch> plan_launches(const std::vector<int64_t>& sizes, int64_t chunk_size,
                                         int64_t max_tensors, int64_t max_blocks) {
  check_plan_args(sizes, chunk_size, max_tensors, max_blocks);
  std::vector<Launch> launches;
  Launch current;
  int64_t blocks_so_far = 0;
  auto close = [&] {
    if (!current.block_slot.empty()) launches.push_back(std::move(current));
    current = Launch{};
    current.first_block = blocks_so_far;
  };
  for (int64_t t = 0; t < int64_t(sizes.size()); ++t) {
    const int64_t chunks = chunk_count(sizes[t], chunk_size);
    for (int64_t c = 0; c < chunks; ++c) {
      if (int64_t(current.block_slot.size()) == max_blocks) close();
      if (current.tensors.empty() || current.tensors.back() != t) {
        if (int64_t(current.tensors.size()) == max_tensors) close();
        current.tensors.push_back(t);
      }
      current.block_slot.push_back(int32_t(current.tensors.size() - 1));
      current.block_chunk.push_back(c);
      ++blocks_so_far;
    }
  }
  close();
  return launches;
}

// offsets[t] = number of chunks in tensors before t; offsets has n+1 entries.
inline std::vector<int64_t> chunk_offsets(const std::vector<int64_t>& sizes, int64_t chunk_size) {
  std::vector<int64_t> offsets(sizes.size() + 1, 0);
  for (size_t t = 0; t < sizes.size(); ++t) offsets[t + 1] = offsets[t] + chunk_count(sizes[t], chunk_size);
  return offsets;
}

}  // namespace optim
