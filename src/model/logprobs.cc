#include "flywheel/model/logprobs.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

namespace flywheel::model {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// a [n, V] float32 @ weight [V, H] in float32, converting the weight a block of rows at a time:
// a whole float32 copy of a bfloat16 lm_head (V x H floats, 2.2 GB for 152k x 3.5k) would break
// the chunk_size x vocab bound. A block holds at most chunk_size x V floats.
at::Tensor float_rows_product(const at::Tensor& a, const at::Tensor& weight, int64_t chunk_size) {
  if (weight.scalar_type() == at::kFloat) return at::matmul(a, weight);
  const int64_t V = weight.size(0), H = weight.size(1);
  const int64_t rows = std::max<int64_t>(1, std::min(V, chunk_size * V / std::max<int64_t>(H, 1)));
  at::Tensor out = at::zeros({a.size(0), H}, a.options());
  for (int64_t v0 = 0; v0 < V; v0 += rows) {
    const int64_t r = std::min(rows, V - v0);
    out.addmm_(a.narrow(1, v0, r), weight.narrow(0, v0, r).to(at::kFloat));
  }
  return out;
}

// Chunked log-softmax gather with a recomputing backward.
class ChunkedLogprobs : public torch::autograd::Function<ChunkedLogprobs> {
 public:
  static variable_list forward(AutogradContext* ctx, const at::Tensor& hidden,
                               const at::Tensor& weight, const at::Tensor& targets,
                               double temperature, int64_t chunk_size, bool with_entropy) {
    at::AutoDispatchBelowADInplaceOrView guard;
    const int64_t n = hidden.size(0);
    at::Tensor logprobs = at::empty({n}, hidden.options().dtype(at::kFloat));
    at::Tensor lse = at::empty({n}, hidden.options().dtype(at::kFloat));
    at::Tensor entropy = with_entropy ? at::empty({n}, hidden.options().dtype(at::kFloat))
                                      : at::zeros({0}, hidden.options().dtype(at::kFloat));
    for (int64_t start = 0; start < n; start += chunk_size) {
      const int64_t len = std::min(chunk_size, n - start);
      at::Tensor z =
          at::matmul(hidden.narrow(0, start, len), weight.t()).to(at::kFloat) / temperature;
      at::Tensor chunk_lse = at::logsumexp(z, -1);
      lse.narrow(0, start, len).copy_(chunk_lse);
      logprobs.narrow(0, start, len)
          .copy_(z.gather(1, targets.narrow(0, start, len).unsqueeze(1)).squeeze(1) - chunk_lse);
      if (with_entropy) {
        at::Tensor p = at::exp(z - chunk_lse.unsqueeze(1));
        entropy.narrow(0, start, len).copy_(chunk_lse - (p * z).sum(-1));
      }
    }
    ctx->save_for_backward({hidden, weight, targets, lse});
    ctx->saved_data["temperature"] = temperature;
    ctx->saved_data["chunk_size"] = chunk_size;
    return {logprobs, entropy};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    auto saved = ctx->get_saved_variables();
    const at::Tensor& hidden = saved[0];
    const at::Tensor& weight = saved[1];
    const at::Tensor& targets = saved[2];
    const at::Tensor& lse = saved[3];
    const double temperature = ctx->saved_data["temperature"].toDouble();
    const int64_t chunk_size = ctx->saved_data["chunk_size"].toInt();
    const at::Tensor& grad_logprobs = grad_outputs[0];
    const at::Tensor& grad_entropy = grad_outputs[1];
    const bool has_lp = grad_logprobs.defined();
    const bool has_ent = grad_entropy.defined() && grad_entropy.numel() > 0;

    const int64_t n = hidden.size(0);
    at::Tensor grad_hidden = at::zeros_like(hidden);
    at::Tensor grad_weight = at::zeros(weight.sizes(), weight.options().dtype(at::kFloat));
    for (int64_t start = 0; start < n; start += chunk_size) {
      const int64_t len = std::min(chunk_size, n - start);
      at::Tensor h = hidden.narrow(0, start, len);
      at::Tensor z = at::matmul(h, weight.t()).to(at::kFloat) / temperature;
      at::Tensor p = at::exp(z - lse.narrow(0, start, len).unsqueeze(1));
      at::Tensor grad_z = at::zeros_like(z);
      if (has_lp) {
        // d logprob / dz = onehot(target) - p
        at::Tensor g = grad_logprobs.narrow(0, start, len).to(at::kFloat).unsqueeze(1);
        grad_z -= g * p;
        grad_z.scatter_add_(1, targets.narrow(0, start, len).unsqueeze(1), g);
      }
      if (has_ent) {
        // d entropy / dz = p * (E_p[z] - z)
        at::Tensor g = grad_entropy.narrow(0, start, len).to(at::kFloat).unsqueeze(1);
        at::Tensor mean_z = (p * z).sum(-1, /*keepdim=*/true);
        grad_z += g * p * (mean_z - z);
      }
      at::Tensor grad_logits = grad_z / temperature;  // z = logits / temperature
      grad_hidden.narrow(0, start, len)
          .copy_(float_rows_product(grad_logits, weight, chunk_size).to(hidden.scalar_type()));
      grad_weight.addmm_(grad_logits.t(), h.to(at::kFloat));  // in place: no [V, H] temporary
    }
    return {grad_hidden,  grad_weight.to(weight.scalar_type()),
            at::Tensor(), at::Tensor(),
            at::Tensor(), at::Tensor()};
  }
};

}  // namespace

TokenLogprobs token_logprobs(const at::Tensor& hidden, const at::Tensor& weight,
                             const at::Tensor& targets, const TokenLogprobOptions& options) {
  TORCH_CHECK(options.temperature > 0, "temperature must be > 0");
  TORCH_CHECK(options.chunk_size > 0, "chunk_size must be > 0");
  TORCH_CHECK(hidden.size(-1) == weight.size(1), "hidden size ", hidden.size(-1),
              " does not match the output projection ", weight.sizes());
  TORCH_CHECK(hidden.sizes().slice(0, hidden.dim() - 1) == targets.sizes(),
              "targets must have the shape of hidden without its last dimension");
  at::Tensor flat_hidden = hidden.reshape({-1, hidden.size(-1)});
  at::Tensor flat_targets = targets.reshape({-1}).to(at::kLong);
  variable_list out = ChunkedLogprobs::apply(flat_hidden, weight, flat_targets, options.temperature,
                                             options.chunk_size, options.with_entropy);
  TokenLogprobs result;
  result.logprobs = out[0].view(targets.sizes());
  if (options.with_entropy) result.entropy = out[1].view(targets.sizes());
  return result;
}

at::Tensor greedy_tokens(const at::Tensor& hidden, const at::Tensor& weight, int64_t chunk_size) {
  TORCH_CHECK(chunk_size > 0, "chunk_size must be > 0");
  at::NoGradGuard no_grad;
  at::Tensor flat = hidden.reshape({-1, hidden.size(-1)});
  at::Tensor out = at::empty({flat.size(0)}, flat.options().dtype(at::kLong));
  for (int64_t start = 0; start < flat.size(0); start += chunk_size) {
    const int64_t len = std::min(chunk_size, flat.size(0) - start);
    out.narrow(0, start, len).copy_(at::matmul(flat.narrow(0, start, len), weight.t()).argmax(-1));
  }
  return out.view(hidden.sizes().slice(0, hidden.dim() - 1));
}

}  // namespace flywheel::model
