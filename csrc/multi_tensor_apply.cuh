// A generic multi-tensor apply for CUDA: it knows tensors, chunks and
// launches, nothing of any optimizer.
//
// The host walks the plan of launch_plan.h; each launch gets a table of
// pointers (one row per slot, one column per tensor) and a block map (slot
// and chunk per block) in its kernel arguments, and is launched when full.
// Each block hands its chunk to the functor, which decides what an element
// is. Sizes, offsets and indices are 64-bit: tensors over 2^31 elements work.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>

#include "launch_plan.h"
#include "tensor_lists.h"

namespace optim::cuda {

constexpr int kThreads = 512;
constexpr int kMaxBlocks = 320;
constexpr int64_t kChunkSize = 65536;
constexpr int kIlp = 4;  // elements in flight per thread, so loads overlap
// Kernel arguments are limited to 4 KiB; the table takes at most this much,
// leaving room for the functor's arguments.
constexpr int kTableBytes = 3072;

template <int Depth> struct TensorTable {
  static constexpr int kMaxTensors =
      (kTableBytes - kMaxBlocks * int(sizeof(uint8_t) + sizeof(int32_t)) - 8) /
      int(Depth * sizeof(void*) + sizeof(int64_t) + sizeof(int32_t));
  static_assert(kMaxTensors >= 1 && kMaxTensors <= 255, "slot index is one byte");

  void* ptr[Depth][kMaxTensors];
  int64_t numel[kMaxTensors];
  int32_t tensor_index[kMaxTensors];  // position in the caller's list (per-tensor outputs)
  uint8_t block_slot[kMaxBlocks];
  int32_t block_chunk[kMaxBlocks];
  int64_t first_block;  // blocks in earlier launches: block ids are unique across the call
};

// The slot accessor element ops are built from (see element_ops.h).
template <int Depth> struct TableSlots {
  const TensorTable<Depth>& table;
  int slot;
  __device__ void* operator()(int k) const { return table.ptr[k][slot]; }
};

// What a functor is told about its block's chunk.
struct Chunk {
  int slot;
  int64_t start, n;  // first element, element count (<= chunk size)
  int64_t block_id;  // chunk_offsets(sizes)[tensor] + chunk index
};

template <int Depth, class Functor>
__global__ void __launch_bounds__(kThreads)
    multi_tensor_kernel(const __grid_constant__ TensorTable<Depth> table, int64_t chunk_size, const Functor f) {
  const int slot = table.block_slot[blockIdx.x];
  const int64_t start = int64_t(table.block_chunk[blockIdx.x]) * chunk_size;
  const int64_t remaining = table.numel[slot] - start;
  f(table, Chunk{slot, start, remaining < chunk_size ? remaining : chunk_size, table.first_block + blockIdx.x});
}

inline void check_cuda(cudaError_t err, const char* what) {
  if (err != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(err));
}

template <int Depth>
void fill_table(TensorTable<Depth>& table, const TensorLists& lists, const Launch& launch) {
  for (size_t s = 0; s < launch.tensors.size(); ++s) {
    const int64_t t = launch.tensors[s];
    for (int k = 0; k < Depth; ++k) table.ptr[k][s] = lists.ptr(k, t);
    table.numel[s] = lists.numel[size_t(t)];
    table.tensor_index[s] = int32_t(t);
  }
  for (size_t b = 0; b < launch.block_slot.size(); ++b) {
    if (launch.block_chunk[b] > std::numeric_limits<int32_t>::max()) {
      throw std::invalid_argument("multi_tensor_apply: tensor has more than 2^31 chunks");
    }
    table.block_slot[b] = uint8_t(launch.block_slot[b]);
    table.block_chunk[b] = int32_t(launch.block_chunk[b]);
  }
  table.first_block = launch.first_block;
}

// Runs functor f over every chunk of every tensor of `lists` (Depth slots).
template <int Depth, class Functor>
void multi_tensor_apply(const TensorLists& lists, const Functor& f, cudaStream_t stream,
                        int64_t chunk_size = kChunkSize) {
  using Table = TensorTable<Depth>;
  static_assert(sizeof(Table) + sizeof(Functor) + sizeof(int64_t) <= 4096, "kernel arguments over 4 KiB");
  if (lists.slots.size() != size_t(Depth)) throw std::invalid_argument("multi_tensor_apply: wrong slot count");
  for (const Launch& launch : plan_launches(lists.numel, chunk_size, Table::kMaxTensors, kMaxBlocks)) {
    Table table;
    fill_table(table, lists, launch);
    multi_tensor_kernel<Depth, Functor>
        <<<unsigned(launch.block_slot.size()), kThreads, 0, stream>>>(table, chunk_size, f);
    check_cuda(cudaGetLastError(), "multi_tensor_apply launch");
  }
}

// Every element i < n of a chunk through op.load(r, i) then op.store(r, i),
// kIlp coalesced elements per thread loaded before any is stored.
template <class Op> __device__ void chunk_elements(const Op& op, int64_t n) {
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
      if (i < n) op.store(r[k], i);
    }
  }
}

}  // namespace optim::cuda
