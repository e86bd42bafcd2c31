// Lion on CUDA: the shared LionOp through the generic launcher.
#include "cuda_elementwise.cuh"

namespace optim::cuda {

void lion(const TensorLists& lists, const StorageKinds& kinds, const LionHyper& h, const HostStep& host,
          const DeviceStep* device, void* stream) {
  run_elementwise<LionOp>(lists, kinds, h, host, device, stream);
}

}  // namespace optim::cuda
