#include "step_rows.h"

#include <algorithm>
#include <atomic>
#include <limits>

#include "flywheel/model/cpu/decode_rows.h"

namespace flywheel::rollout {
namespace {

// The rows of `rows` [R, ...] at `which` (all of them when `all`); undefined stays undefined.
at::Tensor select_rows(const at::Tensor& rows, const at::Tensor& which, bool all) {
  if (!rows.defined() || all) return rows;
  return rows.index_select(0, which);
}

}  // namespace

ScaledRows scale_rows(const at::Tensor& logits, const std::vector<double>& temperatures,
                      model::WorkerPool* pool) {
  const int64_t B = logits.size(0);
  std::vector<float> t;
  for (double v : temperatures) t.push_back(v > 0 ? static_cast<float>(v) : 1.0f);
  ScaledRows out;
  out.scale = at::tensor(t).to(logits.device()).view({B, 1});
  // Every temperature 1 (greedy and plain sampling): x / 1 is x, so the logits serve as they are,
  // without a pass writing a copy of [B, V] (8 MB a step at batch 64 of a 32k vocabulary).
  const bool unscaled =
      logits.is_contiguous() && std::all_of(t.begin(), t.end(), [](float v) { return v == 1.0f; });
  out.scaled = unscaled ? logits : at::empty_like(logits);
  out.norm = at::empty({B, 1}, logits.options());
  out.finite = at::empty({B}, logits.options().dtype(at::kBool));
  model::parallel_rows(pool, B, kMinRowsPerThread, [&](int64_t begin, int64_t end) {
    const at::Tensor rows = logits.narrow(0, begin, end - begin);
    at::Tensor part = out.scaled.narrow(0, begin, end - begin);
    if (!unscaled) at::div_out(part, rows, out.scale.narrow(0, begin, end - begin));
    // On the CPU in the row kernel the learner's proximal log-probs also take (decode_rows.h).
    at::Tensor norm = part.device().is_cpu() && part.scalar_type() == at::kFloat
                          ? model::logsumexp_rows(part, nullptr).view({-1, 1})
                          : at::logsumexp(part, -1, /*keepdim=*/true);
    out.norm.narrow(0, begin, end - begin).copy_(norm);
    // A row is finite when its log-sum-exp is (no NaN, no +inf) and its minimum is above -inf:
    // one reduction instead of a pass that writes a mask of the whole row.
    const float kNegInf = -std::numeric_limits<float>::infinity();
    out.finite.narrow(0, begin, end - begin)
        .copy_(at::isfinite(norm).view({-1}) & (at::amin(rows, -1) > kNegInf));
  });
  return out;
}

void draw_rows(const at::Tensor& scaled, const at::Tensor& norm,
               const std::vector<const SamplingParams*>& params,
               const std::vector<double>& uniforms, model::WorkerPool* pool, at::Tensor* tokens,
               at::Tensor* logprobs) {
  const int64_t R = scaled.size(0);
  const at::TensorOptions longs = at::TensorOptions().dtype(at::kLong).device(scaled.device());
  const at::Tensor u = at::tensor(uniforms, at::kDouble);
  // Rows that truncate within their most likely tokens are drawn among those alone (CPU).
  at::Tensor drawn = at::zeros({R}, longs), drawn_logprobs = at::zeros({R}, scaled.options());
  at::Tensor covered = at::zeros({R}, scaled.options().dtype(at::kBool));
  std::atomic<bool> declined{false};
  model::parallel_rows(pool, R, kMinRowsPerThread, [&](int64_t begin, int64_t end) {
    const int64_t n = end - begin;
    const std::vector<const SamplingParams*> part(params.begin() + begin, params.begin() + end);
    at::Tensor part_tokens, part_logprobs;
    at::Tensor part_covered = sample_among_candidates(
        scaled.narrow(0, begin, n), part, u.narrow(0, begin, n), kSampleCandidates, &part_tokens,
        &part_logprobs, norm.defined() ? norm.narrow(0, begin, n) : at::Tensor());
    if (!part_covered.defined()) {
      declined.store(true);
      return;
    }
    drawn.narrow(0, begin, n).copy_(part_tokens);
    drawn_logprobs.narrow(0, begin, n).copy_(part_logprobs);
    covered.narrow(0, begin, n).copy_(part_covered);
  });
  // The rest over the whole vocabulary: usually every row (flat distributions: top-p keeps most
  // of the vocabulary).
  std::vector<int64_t> rest;
  const at::Tensor drawn_here = declined.load() ? at::Tensor() : covered.contiguous();
  for (int64_t i = 0; i < R; ++i) {
    if (!drawn_here.defined() || !drawn_here.data_ptr<bool>()[i]) rest.push_back(i);
  }
  if (!rest.empty()) {
    const at::Tensor which = at::tensor(rest, at::kLong).to(scaled.device());
    std::vector<const SamplingParams*> rest_params;
    for (int64_t i : rest) rest_params.push_back(params[i]);
    const bool all = static_cast<int64_t>(rest.size()) == R;
    const at::Tensor sub = select_rows(scaled, which, all);
    const at::Tensor sub_norm = select_rows(norm, which, all);
    const at::Tensor rest_u = u.index_select(0, which.to(at::kCPU));
    at::Tensor d = at::empty({sub.size(0)}, longs), p = at::empty({sub.size(0)}, scaled.options());
    model::parallel_rows(pool, sub.size(0), kMinRowsPerThread, [&](int64_t begin, int64_t end) {
      const int64_t n = end - begin;
      at::Tensor part_tokens, part_logprobs;
      sample_rows(sub.narrow(0, begin, n),
                  std::vector<const SamplingParams*>(rest_params.begin() + begin,
                                                     rest_params.begin() + end),
                  rest_u.narrow(0, begin, n), &part_tokens, &part_logprobs,
                  sub_norm.defined() ? sub_norm.narrow(0, begin, n) : sub_norm);
      d.narrow(0, begin, n).copy_(part_tokens);
      p.narrow(0, begin, n).copy_(part_logprobs);
    });
    drawn.index_copy_(0, which, d);
    drawn_logprobs.index_copy_(0, which, p);
  }
  *tokens = drawn;
  *logprobs = drawn_logprobs;
}

}  // namespace flywheel::rollout
