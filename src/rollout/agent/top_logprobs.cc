#include "top_logprobs.h"

#include <ATen/ATen.h>

namespace flywheel::rollout::agent {

std::vector<std::vector<std::pair<int64_t, float>>> top_logprobs(
    const model::DecoderModel& model, const std::vector<int64_t>& prompt_ids,
    const std::vector<int64_t>& completion_ids, int64_t k, double temperature) {
  std::vector<std::vector<std::pair<int64_t, float>>> out;
  if (completion_ids.empty() || k < 1) return out;
  std::vector<int64_t> tokens = prompt_ids;
  tokens.insert(tokens.end(), completion_ids.begin(), completion_ids.end() - 1);
  const int64_t length = static_cast<int64_t>(tokens.size());
  at::NoGradGuard no_grad;
  const at::Device device = model.lm_head_weight().device();
  model::ForwardBatch batch;
  batch.tokens = at::tensor(tokens, at::kLong).view({1, length}).to(device);
  batch.positions = at::arange(length, at::kLong).view({1, length}).to(device);
  const int64_t first = static_cast<int64_t>(prompt_ids.size()) - 1;
  at::Tensor hidden = model.forward(batch).narrow(1, first, length - first);
  at::Tensor logits = model.logits(hidden).squeeze(0);
  const double t = temperature > 0 ? temperature : 1.0;
  at::Tensor logprobs = at::log_softmax(logits / t, -1);
  auto [values, ids] = at::topk(logprobs, std::min<int64_t>(k, logprobs.size(-1)), -1);
  values = values.to(at::kCPU, at::kFloat).contiguous();
  ids = ids.to(at::kCPU).contiguous();
  const float* v = values.data_ptr<float>();
  const int64_t* id = ids.data_ptr<int64_t>();
  const int64_t kk = values.size(1);
  for (int64_t row = 0; row < values.size(0); ++row) {
    std::vector<std::pair<int64_t, float>> top;
    for (int64_t j = 0; j < kk; ++j) top.emplace_back(id[row * kk + j], v[row * kk + j]);
    out.push_back(std::move(top));
  }
  return out;
}

}  // namespace flywheel::rollout::agent
