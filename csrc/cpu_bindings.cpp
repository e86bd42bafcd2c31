// Python bindings of the CPU extension (fused._ext "cpu"): torch tensors in,
// raw pointers out to cpu_kernels.cpp. Per-step scalars are made here, once
// per call, in double, by the shared make_*scalars functions.
#include <ATen/Parallel.h>

#include <tuple>

#include "binding_utils.h"
#include "cpu_kernels.h"
#include "launch_plan.h"

namespace optim::bind {

void check_cpu(const at::Tensor& t) { TORCH_CHECK(t.device().is_cpu(), "expected a CPU tensor"); }

int threads() { return at::get_num_threads(); }

void adam(const Tensors& grads, const Tensors& params, const Tensors& exp_avgs, const Tensors& exp_avg_sqs,
          const Tensors& models, double lr, double beta1, double beta2, double eps, double weight_decay,
          bool decoupled, bool bias_correction, int64_t step, double inv_scale) {
  if (grads.empty()) return;
  const auto lists = make_lists(with_models({&grads, &params, &exp_avgs, &exp_avg_sqs}, models), at::kCPU);
  const AdamHyper h{lr, beta1, beta2, eps, weight_decay, decoupled, bias_correction};
  cpu::adam(lists, kinds_of(grads, params, exp_avgs, models), make_scalars(h, double(step), lr, inv_scale, false),
            threads());
}

void adagrad(const Tensors& grads, const Tensors& params, const Tensors& sums, const Tensors& models,
             double lr, double lr_decay, double eps, double weight_decay, bool decoupled, int64_t step,
             double inv_scale) {
  if (grads.empty()) return;
  const auto lists = make_lists(with_models({&grads, &params, &sums}, models), at::kCPU);
  const AdagradHyper h{lr, lr_decay, eps, weight_decay, decoupled};
  cpu::adagrad(lists, kinds_of(grads, params, sums, models), make_scalars(h, double(step), lr, inv_scale, false),
               threads());
}

// bufs: the momentum buffers, or empty when momentum == 0; first: every buffer
// of this call starts now (torch's first step: buf <- g).
void sgd(const Tensors& grads, const Tensors& params, const Tensors& bufs, const Tensors& models, double lr,
         double momentum, double dampening, double weight_decay, bool nesterov, bool maximize, bool first,
         int64_t step, double inv_scale) {
  if (grads.empty()) return;
  const bool with_buffer = !bufs.empty();
  TORCH_CHECK(with_buffer == (momentum != 0.0), "sgd: momentum buffers are needed exactly when momentum != 0");
  const auto lists = make_lists(with_models(with_buffer ? std::vector<const Tensors*>{&grads, &params, &bufs}
                                                        : std::vector<const Tensors*>{&grads, &params},
                                            models),
                                at::kCPU);
  const SgdHyper h{lr, momentum, dampening, weight_decay, nesterov, maximize, first};
  cpu::sgd(lists, sgd_kinds(grads, params, bufs, models), make_scalars(h, double(step), lr, inv_scale, false),
           with_buffer, threads());
}

void lion(const Tensors& grads, const Tensors& params, const Tensors& exp_avgs, const Tensors& models, double lr,
          double beta1, double beta2, double weight_decay, bool maximize, int64_t step, double inv_scale) {
  if (grads.empty()) return;
  const auto lists = make_lists(with_models({&grads, &params, &exp_avgs}, models), at::kCPU);
  const LionHyper h{lr, beta1, beta2, weight_decay, maximize};
  cpu::lion(lists, kinds_of(grads, params, exp_avgs, models), make_scalars(h, double(step), lr, inv_scale, false),
            threads());
}

at::Tensor sumsq(const Tensors& tensors, double scale) {
  auto out = at::zeros({int64_t(tensors.size())}, at::dtype(at::kDouble));
  if (tensors.empty()) return out;
  const auto lists = make_lists({&tensors}, at::kCPU);
  cpu::sumsq(lists, storage_dtype(tensors[0]), scale, out.data_ptr<double>(), threads());
  return out;
}

// LAMB stages 1 and 2 of one bucket (cpu_kernels.h); returns the per-tensor
// sums of squares of p and u, float64.
std::tuple<at::Tensor, at::Tensor> lamb(const Tensors& grads, const Tensors& params, const Tensors& exp_avgs,
                                        const Tensors& exp_avg_sqs, const Tensors& updates, const Tensors& models,
                                        const at::Tensor& grad_sumsq, double max_grad_norm, double lr, double beta1,
                                        double beta2, double eps, double weight_decay, bool grad_averaging,
                                        bool bias_correction, bool decoupled, bool use_nvlamb, int64_t step,
                                        double inv_scale) {
  auto p_sumsq = at::zeros({int64_t(grads.size())}, at::dtype(at::kDouble));
  auto u_sumsq = at::zeros({int64_t(grads.size())}, at::dtype(at::kDouble));
  if (grads.empty()) return {p_sumsq, u_sumsq};
  check_cpu(grad_sumsq);
  const auto lists = make_lists(with_models({&grads, &params, &exp_avgs, &exp_avg_sqs, &updates}, models), at::kCPU);
  TORCH_CHECK(updates[0].scalar_type() == at::kFloat, "lamb: updates must be float32");
  const StorageKinds kinds = kinds_of(grads, params, exp_avgs, models);
  const LambHyper h{lr, beta1, beta2, eps, weight_decay, grad_averaging, bias_correction, decoupled, use_nvlamb};
  const double clip = lamb_clip_divisor(grad_sumsq.item<double>(), max_grad_norm);
  const cpu::LambTrust trust{lr, use_nvlamb || weight_decay != 0.0};
  cpu::lamb(lists, kinds, make_lamb_scalars(h, double(step), inv_scale, false), clip, trust,
            p_sumsq.data_ptr<double>(), u_sumsq.data_ptr<double>(), threads());
  return {p_sumsq, u_sumsq};
}

py::list plan_launches_py(const std::vector<int64_t>& sizes, int64_t chunk_size, int64_t max_tensors,
                          int64_t max_blocks) {
  py::list out;
  for (const Launch& l : plan_launches(sizes, chunk_size, max_tensors, max_blocks)) {
    out.append(py::dict(py::arg("tensors") = l.tensors, py::arg("block_slot") = l.block_slot,
                        py::arg("block_chunk") = l.block_chunk, py::arg("first_block") = l.first_block));
  }
  return out;
}

// Rounds (or widens) through storage.h, for tests of the conversions.
at::Tensor convert(const at::Tensor& src, at::ScalarType dtype) {
  check_cpu(src);
  auto in = src.contiguous();
  auto out = at::empty(in.sizes(), in.options().dtype(dtype));
  cpu::convert(in.data_ptr(), storage_dtype(in), out.data_ptr(), storage_dtype(out), in.numel());
  return out;
}

}  // namespace optim::bind

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  namespace b = optim::bind;
  m.def("adam", &b::adam);
  m.def("adagrad", &b::adagrad);
  m.def("sgd", &b::sgd);
  m.def("lion", &b::lion);
  m.def("sumsq", &b::sumsq);
  m.def("lamb", &b::lamb);
  m.def("plan_launches", &b::plan_launches_py, py::arg("sizes"), py::arg("chunk_size"), py::arg("max_tensors"),
        py::arg("max_blocks"));
  m.def("chunk_offsets", &optim::chunk_offsets);
  m.def("chunk_size", &optim::cpu::chunk_size);
  m.def("prefetch", &optim::cpu::prefetch, py::arg("enable") = -1);
  m.def("convert", &b::convert);
  m.def("claim_order", &optim::cpu::claim_order, py::arg("bounds"), py::arg("threads"), py::arg("backward"),
        py::arg("slow_us") = 0);
}
