#include "flywheel/model/cpu/kernel_linear.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

#include <vector>

namespace flywheel::model {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// a [M, K] b^T [+ bias] in out_dtype (Undefined: a's), with M, N or K possibly 0; a and b may be
// transposed views.
at::Tensor product(const at::Tensor& a, const at::Tensor& b, const at::Tensor& bias,
                   const KernelLinearOptions& options,
                   at::ScalarType out_dtype = at::ScalarType::Undefined) {
  const at::ScalarType dtype = out_dtype == at::ScalarType::Undefined ? a.scalar_type() : out_dtype;
  if (a.size(1) == 0) {
    at::Tensor y = at::zeros({a.size(0), b.size(0)}, a.options().dtype(dtype));
    return bias.defined() ? y.add_(bias) : y;
  }
  if (options.blas_rows > 0 && a.size(0) >= options.blas_rows) {
    // A product of two bfloat16 values is exact in float32: this is the kernels' arithmetic
    // (float32 sums, rounded once) in BLAS's order.
    const at::Tensor a32 = a.to(at::kFloat), b32 = b.to(at::kFloat).t();
    const at::Tensor y =
        bias.defined() ? at::addmm(bias.to(at::kFloat), a32, b32) : at::mm(a32, b32);
    return y.to(dtype);
  }
  return small_linear(a.stride(1) == 1 ? a : a.contiguous(), b.contiguous(), bias,
                      {options.isa, options.pool, dtype});
}

class KernelLinear : public torch::autograd::Function<KernelLinear> {
 public:
  // x [M, K] with contiguous rows; b optional (an undefined tensor cannot be a Function's input).
  // The options come as integers, which the context's saved_data (IValues) keeps for backward.
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& w,
                            const c10::optional<at::Tensor>& b, int64_t isa, int64_t pool,
                            int64_t blas_rows) {
    at::AutoDispatchBelowADInplaceOrView guard;
    ctx->save_for_backward({x, w});
    ctx->saved_data["bias"] = b.has_value();
    ctx->saved_data["isa"] = isa;
    ctx->saved_data["pool"] = pool;
    ctx->saved_data["blas_rows"] = blas_rows;
    return product(x, w, b.value_or(at::Tensor()), options_of(ctx));
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& x = saved[0];
    const at::Tensor& w = saved[1];
    const KernelLinearOptions options = options_of(ctx);
    at::Tensor dx, dw, db;
    if (grad_outputs[0].defined()) {
      const at::Tensor dy = grad_outputs[0].to(x.scalar_type()).contiguous();
      if (ctx->needs_input_grad(0)) dx = product(dy, w.t(), {}, options);
      if (ctx->needs_input_grad(1)) dw = product(dy.t(), x.t(), {}, options);
      if (ctx->saved_data["bias"].toBool() && ctx->needs_input_grad(2)) {
        db = dy.sum(0, /*keepdim=*/false, at::kFloat).to(w.scalar_type());
      }
    }
    return {dx, dw, db, at::Tensor(), at::Tensor(), at::Tensor()};
  }

 private:
  static KernelLinearOptions options_of(AutogradContext* ctx) {
    KernelLinearOptions options;
    options.isa = static_cast<GemmIsa>(ctx->saved_data["isa"].toInt());
    options.pool = reinterpret_cast<WorkerPool*>(ctx->saved_data["pool"].toInt());
    options.blas_rows = ctx->saved_data["blas_rows"].toInt();
    return options;
  }
};

}  // namespace

bool bf16_projections_in_kernels() {
  static const bool in_kernels = !avx512_bf16_supported() && bf16_gemm_supported();
  return in_kernels;
}

at::Tensor kernel_product(const at::Tensor& a, const at::Tensor& b,
                          const KernelLinearOptions& options, at::ScalarType out_dtype) {
  TORCH_CHECK(a.dim() == 2 && b.dim() == 2 && a.size(1) == b.size(1),
              "kernel_product: a [M, K] and b [N, K] expected, got ", a.sizes(), " and ",
              b.sizes());
  return product(a, b, {}, options, out_dtype);
}

at::Tensor kernel_linear(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b,
                         const KernelLinearOptions& options) {
  TORCH_CHECK(x.dim() >= 1 && w.dim() == 2 && x.size(-1) == w.size(1),
              "kernel_linear: x [..., K] and w [N, K] expected, got ", x.sizes(), " and ",
              w.sizes());
  std::vector<int64_t> shape(x.sizes().begin(), x.sizes().end());
  shape.back() = w.size(0);
  int64_t M = 1;  // from the sizes: with K = 0 the element count says nothing
  for (int64_t d = 0; d + 1 < x.dim(); ++d) M *= x.size(d);
  at::Tensor rows = x.reshape({M, x.size(-1)});
  if (rows.stride(1) != 1 && rows.size(1) > 1) rows = rows.contiguous();
  const c10::optional<at::Tensor> bias =
      b.defined() ? c10::optional<at::Tensor>(b.contiguous()) : c10::nullopt;
  const at::Tensor y =
      KernelLinear::apply(rows, w.contiguous(), bias, static_cast<int64_t>(options.isa),
                          reinterpret_cast<int64_t>(options.pool), options.blas_rows);
  return y.view(shape);
}

}  // namespace flywheel::model
