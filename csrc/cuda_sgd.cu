// SGD on CUDA: the shared SGD ops through the generic launcher; the op with a
// momentum buffer slot, or the plain one when momentum == 0.
#include "cuda_elementwise.cuh"

namespace optim::cuda {

void sgd(const TensorLists& lists, const StorageKinds& kinds, const SgdHyper& h, bool with_buffer,
         const HostStep& host, const DeviceStep* device, void* stream) {
  if (with_buffer) {
    run_elementwise<SgdMomentumOp>(lists, kinds, h, host, device, stream);
  } else {
    run_elementwise<SgdOp>(lists, kinds, h, host, device, stream);
  }
}

}  // namespace optim::cuda
