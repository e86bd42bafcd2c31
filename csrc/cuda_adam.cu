// Adam(W) on CUDA: the shared AdamOp through the generic launcher.
#include "cuda_elementwise.cuh"

namespace optim::cuda {

void adam(const TensorLists& lists, const StorageKinds& kinds, const AdamHyper& h, const HostStep& host,
          const DeviceStep* device, void* stream) {
  run_elementwise<AdamOp>(lists, kinds, h, host, device, stream);
}

int64_t chunk_size() { return kChunkSize; }

}  // namespace optim::cuda
