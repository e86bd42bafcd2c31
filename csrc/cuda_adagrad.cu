// Adagrad on CUDA: the shared AdagradOp through the generic launcher.
#include "cuda_elementwise.cuh"

namespace optim::cuda {

void adagrad(const TensorLists& lists, const StorageKinds& kinds, const AdagradHyper& h, const HostStep& host,
             const DeviceStep* device, void* stream) {
  run_elementwise<AdagradOp>(lists, kinds, h, host, device, stream);
}

}  // namespace optim::cuda
