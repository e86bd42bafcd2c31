// Python bindings of the CUDA extension (fused._ext "cuda"). Compiled by the
// host compiler without CUDA headers: kernels are reached through the plain
// declarations of cuda_kernels.h, and the stream comes from Python as a handle
// (torch.cuda.current_stream().cuda_stream), launched on the current device.
#include <tuple>

#include "binding_utils.h"
#include "cuda_kernels.h"
#include "launch_plan.h"

namespace optim::bind {
namespace {

using MaybeTensor = std::optional<at::Tensor>;

void* as_stream(int64_t handle) { return reinterpret_cast<void*>(handle); }

template <class T> const T* device_ptr(const MaybeTensor& t, at::ScalarType type, const char* name,
                                       const at::Device& device) {
  if (!t) return nullptr;
  TORCH_CHECK(t->device() == device && t->scalar_type() == type && t->numel() == 1, name,
              " must be a 1-element ", type, " tensor on ", device);
  return static_cast<const T*>(t->data_ptr());
}

// Capturable inputs, or null for the host path; `scalars` is a new device
// buffer kept alive by the caller for the call's kernels.
std::unique_ptr<cuda::DeviceStep> device_step(const MaybeTensor& step, const MaybeTensor& lr,
                                              const MaybeTensor& inv_scale, const MaybeTensor& found_inf,
                                              const at::Tensor& scalars) {
  if (!step) return nullptr;
  const auto d = scalars.device();
  return std::make_unique<cuda::DeviceStep>(cuda::DeviceStep{
      device_ptr<int64_t>(step, at::kLong, "step", d), device_ptr<double>(lr, at::kDouble, "lr", d),
      device_ptr<float>(inv_scale, at::kFloat, "inv_scale", d),
      device_ptr<float>(found_inf, at::kFloat, "found_inf", d), scalars.data_ptr()});
}

at::Tensor scalar_buffer(const at::Tensor& like, size_t bytes) {
  return at::empty({int64_t(bytes)}, like.options().dtype(at::kByte));
}

void adam(const Tensors& grads, const Tensors& params, const Tensors& exp_avgs, const Tensors& exp_avg_sqs,
          const Tensors& models, double lr, double beta1, double beta2, double eps, double weight_decay,
          bool decoupled, bool bias_correction, int64_t step, double inv_scale, const MaybeTensor& step_t,
          const MaybeTensor& lr_t, const MaybeTensor& inv_scale_t, const MaybeTensor& found_inf_t,
          int64_t stream) {
  if (grads.empty()) return;
  const auto device = grads[0].device();
  const auto lists = make_lists(with_models({&grads, &params, &exp_avgs, &exp_avg_sqs}, models), device);
  const auto scalars = scalar_buffer(grads[0], sizeof(AdamScalars));
  const auto dev = device_step(step_t, lr_t, inv_scale_t, found_inf_t, scalars);
  cuda::adam(lists, kinds_of(grads, params, exp_avgs, models),
             AdamHyper{lr, beta1, beta2, eps, weight_decay, decoupled, bias_correction},
             cuda::HostStep{double(step), lr, inv_scale}, dev.get(), as_stream(stream));
}

void adagrad(const Tensors& grads, const Tensors& params, const Tensors& sums, const Tensors& models, double lr,
             double lr_decay, double eps, double weight_decay, bool decoupled, int64_t step, double inv_scale,
             const MaybeTensor& step_t, const MaybeTensor& lr_t, const MaybeTensor& inv_scale_t,
             const MaybeTensor& found_inf_t, int64_t stream) {
  if (grads.empty()) return;
  const auto device = grads[0].device();
  const auto lists = make_lists(with_models({&grads, &params, &sums}, models), device);
  const auto scalars = scalar_buffer(grads[0], sizeof(AdagradScalars));
  const auto dev = device_step(step_t, lr_t, inv_scale_t, found_inf_t, scalars);
  cuda::adagrad(lists, kinds_of(grads, params, sums, models),
                AdagradHyper{lr, lr_decay, eps, weight_decay, decoupled}, cuda::HostStep{double(step), lr, inv_scale},
                dev.get(), as_stream(stream));
}

// As the CPU binding: bufs empty when momentum == 0; first: every buffer starts now.
void sgd(const Tensors& grads, const Tensors& params, const Tensors& bufs, const Tensors& models, double lr,
         double momentum, double dampening, double weight_decay, bool nesterov, bool maximize, bool first,
         int64_t step, double inv_scale, const MaybeTensor& step_t, const MaybeTensor& lr_t,
         const MaybeTensor& inv_scale_t, const MaybeTensor& found_inf_t, int64_t stream) {
  if (grads.empty()) return;
  const bool with_buffer = !bufs.empty();
  TORCH_CHECK(with_buffer == (momentum != 0.0), "sgd: momentum buffers are needed exactly when momentum != 0");
  const auto device = grads[0].device();
  const auto lists = make_lists(with_models(with_buffer ? std::vector<const Tensors*>{&grads, &params, &bufs}
                                                        : std::vector<const Tensors*>{&grads, &params},
                                            models),
                                device);
  const auto scalars = scalar_buffer(grads[0], sizeof(SgdScalars));
  const auto dev = device_step(step_t, lr_t, inv_scale_t, found_inf_t, scalars);
  cuda::sgd(lists, sgd_kinds(grads, params, bufs, models),
            SgdHyper{lr, momentum, dampening, weight_decay, nesterov, maximize, first}, with_buffer,
            cuda::HostStep{double(step), lr, inv_scale}, dev.get(), as_stream(stream));
}

void lion(const Tensors& grads, const Tensors& params, const Tensors& exp_avgs, const Tensors& models, double lr,
          double beta1, double beta2, double weight_decay, bool maximize, int64_t step, double inv_scale,
          const MaybeTensor& step_t, const MaybeTensor& lr_t, const MaybeTensor& inv_scale_t,
          const MaybeTensor& found_inf_t, int64_t stream) {
  if (grads.empty()) return;
  const auto device = grads[0].device();
  const auto lists = make_lists(with_models({&grads, &params, &exp_avgs}, models), device);
  const auto scalars = scalar_buffer(grads[0], sizeof(LionScalars));
  const auto dev = device_step(step_t, lr_t, inv_scale_t, found_inf_t, scalars);
  cuda::lion(lists, kinds_of(grads, params, exp_avgs, models), LionHyper{lr, beta1, beta2, weight_decay, maximize},
             cuda::HostStep{double(step), lr, inv_scale}, dev.get(), as_stream(stream));
}

at::Tensor sumsq(const Tensors& tensors, double scale, int64_t stream) {
  TORCH_CHECK(!tensors.empty(), "sumsq: empty list");
  const auto device = tensors[0].device();
  const auto lists = make_lists({&tensors}, device);
  const auto offsets = chunk_offsets(lists.numel, cuda::chunk_size());
  const auto options = tensors[0].options();
  auto out = at::empty({int64_t(tensors.size())}, options.dtype(at::kDouble));
  auto partials = at::empty({std::max<int64_t>(offsets.back(), 1)}, options.dtype(at::kDouble));
  auto offsets_dev = at::tensor(offsets, at::dtype(at::kLong)).to(device);
  cuda::sumsq(lists, storage_dtype(tensors[0]), scale, partials.data_ptr<double>(), offsets_dev.data_ptr<int64_t>(),
              out.data_ptr<double>(), as_stream(stream));
  return out;
}

// LAMB stage 1; returns the per-tensor sums of squares (p, u), float64 on the device.
std::tuple<at::Tensor, at::Tensor> lamb_update(const Tensors& grads, const Tensors& params, const Tensors& exp_avgs,
                                               const Tensors& exp_avg_sqs, const Tensors& updates,
                                               const at::Tensor& grad_sumsq, double max_grad_norm, double beta1,
                                               double beta2, double eps, double weight_decay, bool grad_averaging,
                                               bool bias_correction, bool decoupled, int64_t step,
                                               double inv_scale, bool master, int64_t stream) {
  TORCH_CHECK(!grads.empty(), "lamb_update: empty list");
  const auto device = grads[0].device();
  const auto lists = make_lists({&grads, &params, &exp_avgs, &exp_avg_sqs, &updates}, device);
  TORCH_CHECK(updates[0].scalar_type() == at::kFloat, "lamb_update: updates must be float32");
  const auto* sumsq_ptr = device_ptr<double>(grad_sumsq, at::kDouble, "grad_sumsq", device);
  const auto offsets = chunk_offsets(lists.numel, cuda::chunk_size());
  const auto options = grads[0].options().dtype(at::kDouble);
  auto p_sumsq = at::zeros({int64_t(grads.size())}, options);
  auto u_sumsq = at::zeros({int64_t(grads.size())}, options);
  auto partials = at::empty({2, std::max<int64_t>(offsets.back(), 1)}, options);
  auto offsets_dev = at::tensor(offsets, at::dtype(at::kLong)).to(device);
  const cuda::LambNorms norms{partials[0].data_ptr<double>(), partials[1].data_ptr<double>(),
                              offsets_dev.data_ptr<int64_t>(), p_sumsq.data_ptr<double>(),
                              u_sumsq.data_ptr<double>()};
  const LambHyper h{0.0, beta1, beta2, eps, weight_decay, grad_averaging, bias_correction, decoupled, false};
  const StorageKinds kinds{storage_dtype(grads[0]), master, storage_dtype(exp_avgs[0])};
  cuda::lamb_update(lists, kinds, make_lamb_scalars(h, double(step), inv_scale, false), sumsq_ptr, max_grad_norm,
                    norms, as_stream(stream));
  return {p_sumsq, u_sumsq};
}

void lamb_apply(const Tensors& updates, const Tensors& params, const Tensors& models, const at::Tensor& p_sumsq,
                const at::Tensor& u_sumsq, double lr, double weight_decay, bool use_nvlamb, int64_t stream) {
  if (updates.empty()) return;
  const auto device = updates[0].device();
  const auto lists = make_lists(with_models({&updates, &params}, models), device);
  TORCH_CHECK(p_sumsq.numel() == int64_t(updates.size()) && u_sumsq.numel() == int64_t(updates.size()),
              "lamb_apply: one norm per tensor");
  const Dtype model = models.empty() ? storage_dtype(params[0]) : storage_dtype(models[0]);
  cuda::lamb_apply(lists, StorageKinds{model, !models.empty(), Dtype::f32},
                   p_sumsq.contiguous().data_ptr<double>(), u_sumsq.contiguous().data_ptr<double>(), lr,
                   use_nvlamb || weight_decay != 0.0, as_stream(stream));
}

}  // namespace
}  // namespace optim::bind

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  namespace b = optim::bind;
  m.def("adam", &b::adam);
  m.def("adagrad", &b::adagrad);
  m.def("sgd", &b::sgd);
  m.def("lion", &b::lion);
  m.def("sumsq", &b::sumsq);
  m.def("lamb_update", &b::lamb_update);
  m.def("lamb_apply", &b::lamb_apply);
  m.def("chunk_size", &optim::cuda::chunk_size);
}
