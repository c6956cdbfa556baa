#include "flywheel/model/logprobs.h"

#include <algorithm>

#include <ATen/ATen.h>
#include <ATen/record_function.h>
#include <torch/csrc/autograd/custom_function.h>

#include "flywheel/model/cpu/decode_rows.h"
#include "flywheel/model/cpu/kernel_linear.h"
#include "flywheel/model/cpu/small_gemm.h"

namespace flywheel::model {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Whether the head's bfloat16 products run in small_gemm.h's kernels, where LibTorch has no
// bfloat16 GEMM (kernel_linear.h).
bool head_in_kernels(const at::Tensor& weight) {
  return weight.scalar_type() == at::kBFloat16 && weight.device().is_cpu() &&
         weight.is_contiguous() && bf16_projections_in_kernels();
}

// The head's backward products for one chunk, from grad_logits [n, V] (float32):
//   returns        grad_logits @ weight        [n, H] float32
//   grad_weight += grad_logits^T @ hidden      [V, H] float32
// An undefined grad_weight is the only chunk's: where LibTorch multiplies the whole head at once
// (float32, or another dtype whose block is every vocabulary row) it is set to the product itself,
// in the weight's dtype (the same bits as zeros plus the product, rounded back).
// A float32 weight multiplies in float32. Another dtype multiplies in that dtype (bfloat16 runs
// ~4x float32 on CPUs with native bf16) with float32 accumulation, a block of vocabulary rows at
// a time so that no temporary exceeds chunk_size x V elements: a whole float32 copy of a
// bfloat16 lm_head (2.2 GB for 152k x 3.5k) per chunk is what this replaced.
at::Tensor head_backward(const at::Tensor& grad_logits, const at::Tensor& weight,
                         const at::Tensor& hidden, at::Tensor& grad_weight, int64_t chunk_size) {
  const int64_t V = weight.size(0), H = weight.size(1);
  const int64_t rows = std::max<int64_t>(1, std::min(V, chunk_size * V / std::max<int64_t>(H, 1)));
  const bool whole = !head_in_kernels(weight) && (weight.scalar_type() == at::kFloat || rows == V);
  if (!grad_weight.defined() && whole) {
    const at::Tensor g = grad_logits.to(weight.scalar_type());
    grad_weight = at::mm(g.t(), hidden.to(weight.scalar_type()));
    return at::mm(g, weight).to(at::kFloat);
  }
  if (!grad_weight.defined()) grad_weight = at::zeros(weight.sizes(), grad_logits.options());
  if (weight.scalar_type() == at::kFloat) {
    grad_weight.addmm_(grad_logits.t(), hidden.to(at::kFloat));  // in place: no [V, H] temporary
    return at::matmul(grad_logits, weight);
  }
  const at::Tensor g = grad_logits.to(weight.scalar_type());
  const at::Tensor h = hidden.to(weight.scalar_type());
  at::Tensor out = at::zeros({g.size(0), H}, grad_logits.options());
  if (head_in_kernels(weight) && g.size(0) > 0 && H > 0) {
    // The same products as kernel_linear's backward (kernel_product), their float32 sums added
    // without a rounding to bfloat16. Blocks of at most kKernelBlock vocabulary rows: the first
    // product sums over a block, and both copy their block of the head (to float32 for BLAS, or
    // transposed for the kernels, which also widen fewer rows of x at once the longer they are:
    // 4 rows of a whole 32k vocabulary).
    constexpr int64_t kKernelBlock = 2048;
    for (int64_t v0 = 0; v0 < V; v0 += std::min(rows, kKernelBlock)) {
      const int64_t r = std::min({rows, kKernelBlock, V - v0});
      const at::Tensor block = g.narrow(1, v0, r);  // rows of stride V
      out.add_(kernel_product(block, weight.narrow(0, v0, r).t(), {}, at::kFloat));
      grad_weight.narrow(0, v0, r).add_(kernel_product(block.t(), h.t(), {}, at::kFloat));
    }
    return out;
  }
  for (int64_t v0 = 0; v0 < V; v0 += rows) {
    const int64_t r = std::min(rows, V - v0);
    at::Tensor block = g.narrow(1, v0, r);
    out.add_(at::mm(block, weight.narrow(0, v0, r)));
    grad_weight.narrow(0, v0, r).add_(at::mm(block.t(), h));
  }
  return out;
}

// float32 logits / temperature of one chunk (no extra pass when the temperature is 1).
at::Tensor scaled_logits(const at::Tensor& h, const at::Tensor& weight, double temperature) {
  at::Tensor z =
      head_in_kernels(weight) && h.scalar_type() == weight.scalar_type()
          ? small_linear(h.contiguous(), weight, {}, {GemmIsa::kAuto, nullptr, at::kFloat})
          : at::matmul(h, weight.t()).to(at::kFloat);
  return temperature == 1.0 ? z : z.div_(temperature);
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
      at::Tensor z = scaled_logits(hidden.narrow(0, start, len), weight, temperature);
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
    at::Tensor grad_weight;  // head_backward's: set by the first chunk when it is the only one
    if (n > chunk_size) grad_weight = at::zeros(weight.sizes(), weight.options().dtype(at::kFloat));
    for (int64_t start = 0; start < n; start += chunk_size) {
      const int64_t len = std::min(chunk_size, n - start);
      at::Tensor h = hidden.narrow(0, start, len);
      at::Tensor z = scaled_logits(h, weight, temperature);
      at::Tensor p = (z - lse.narrow(0, start, len).unsqueeze(1)).exp_();
      // Entropy first: it needs z, whose buffer then holds grad_z.
      at::Tensor entropy_term;
      if (has_ent) {
        // d entropy / dz = p * (E_p[z] - z)
        at::Tensor g = grad_entropy.narrow(0, start, len).to(at::kFloat).unsqueeze(1);
        at::Tensor mean_z = (p * z).sum(-1, /*keepdim=*/true);
        entropy_term = z.neg_().add_(mean_z).mul_(p).mul_(g);  // reuses z
      }
      at::Tensor grad_z;
      if (has_lp) {
        // d logprob / dz = onehot(target) - p
        at::Tensor g = grad_logprobs.narrow(0, start, len).to(at::kFloat).unsqueeze(1);
        grad_z = p.mul_(g).neg_();  // reuses p
        grad_z.scatter_add_(1, targets.narrow(0, start, len).unsqueeze(1), g);
        if (entropy_term.defined()) grad_z.add_(entropy_term);
      } else {
        grad_z = entropy_term.defined() ? entropy_term : at::zeros_like(p);
      }
      at::Tensor grad_logits = temperature == 1.0 ? grad_z : grad_z.div_(temperature);
      grad_hidden.narrow(0, start, len)
          .copy_(head_backward(grad_logits, weight, h, grad_weight, chunk_size)
                     .to(hidden.scalar_type()));
    }
    if (!grad_weight.defined()) grad_weight = at::zeros_like(weight);  // no positions
    return {grad_hidden,  grad_weight.to(weight.scalar_type()),
            at::Tensor(), at::Tensor(),
            at::Tensor(), at::Tensor()};
  }
};

}  // namespace

TokenLogprobs token_logprobs(const at::Tensor& hidden, const at::Tensor& weight,
                             const at::Tensor& targets, const TokenLogprobOptions& options) {
  RECORD_USER_SCOPE("flywheel::head");  // profilers' phase (learner_bench --profile)
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

at::Tensor engine_token_logprobs(const at::Tensor& hidden, const at::Tensor& weight,
                                 const at::Tensor& targets, const TokenLogprobOptions& options,
                                 WorkerPool* pool) {
  RECORD_USER_SCOPE("flywheel::head");
  TORCH_CHECK(options.temperature > 0 && options.chunk_size > 0,
              "engine_token_logprobs: temperature and chunk_size must be > 0");
  TORCH_CHECK(hidden.sizes().slice(0, hidden.dim() - 1) == targets.sizes(),
              "targets must have the shape of hidden without its last dimension");
  at::NoGradGuard no_grad;
  const at::Tensor flat = hidden.reshape({-1, hidden.size(-1)}).contiguous();
  const at::Tensor flat_targets = targets.reshape({-1}).to(at::kLong);
  // The engine divides by each row's temperature as a float32 tensor (step_rows.cc).
  const at::Tensor temperature =
      at::scalar_tensor(static_cast<float>(options.temperature), at::kFloat);
  at::Tensor out = at::empty({flat.size(0)}, flat.options().dtype(at::kFloat));
  for (int64_t start = 0; start < flat.size(0); start += options.chunk_size) {
    const int64_t len = std::min(options.chunk_size, flat.size(0) - start);
    at::Tensor z =
        small_linear(flat.narrow(0, start, len), weight, {}, {GemmIsa::kAuto, pool, at::kFloat});
    if (options.temperature != 1.0) z.div_(temperature);
    const at::Tensor lse = logsumexp_rows(z, pool);
    out.narrow(0, start, len)
        .copy_(z.gather(1, flat_targets.narrow(0, start, len).unsqueeze(1)).squeeze(1) - lse);
  }
  return out.view(targets.sizes());
}

at::Tensor greedy_tokens(const at::Tensor& hidden, const at::Tensor& weight, int64_t chunk_size) {
  TORCH_CHECK(chunk_size > 0, "chunk_size must be > 0");
  at::NoGradGuard no_grad;
  at::Tensor flat = hidden.reshape({-1, hidden.size(-1)});
  at::Tensor out = at::empty({flat.size(0)}, flat.options().dtype(at::kLong));
  for (int64_t start = 0; start < flat.size(0); start += chunk_size) {
    const int64_t len = std::min(chunk_size, flat.size(0) - start);
    out.narrow(0, start, len)
        .copy_(scaled_logits(flat.narrow(0, start, len), weight, 1.0).argmax(-1));
  }
  return out.view(hidden.sizes().slice(0, hidden.dim() - 1));
}

}  // namespace flywheel::model
