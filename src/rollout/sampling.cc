#include "flywheel/rollout/sampling.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include <ATen/ATen.h>

#include "absl/strings/str_cat.h"
#include "top_p_cut.h"

namespace flywheel::rollout {

absl::Status SamplingParams::validate() const {
  if (!(temperature >= 0) || !std::isfinite(temperature)) {
    return absl::InvalidArgumentError(absl::StrCat("temperature must be >= 0, got ", temperature));
  }
  if (temperature > 0 && temperature < kMinTemperature) {
    // logits / temperature would overflow float32 (or the temperature itself underflow).
    return absl::InvalidArgumentError(absl::StrCat(
        "temperature must be 0 (greedy) or >= ", kMinTemperature, ", got ", temperature));
  }
  if (top_k < 0) return absl::InvalidArgumentError(absl::StrCat("top_k must be >= 0, got ", top_k));
  if (!(top_p > 0 && top_p <= 1)) {
    return absl::InvalidArgumentError(absl::StrCat("top_p must be in (0, 1], got ", top_p));
  }
  if (!(min_p >= 0 && min_p <= 1)) {
    return absl::InvalidArgumentError(absl::StrCat("min_p must be in [0, 1], got ", min_p));
  }
  if (max_new_tokens < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_new_tokens must be >= 1, got ", max_new_tokens));
  }
  for (const std::string& s : stop_strings) {
    if (s.empty()) return absl::InvalidArgumentError("stop strings must not be empty");
  }
  return absl::OkStatus();
}

void truncate_logits(at::Tensor& scaled, const SamplingParams& params) {
  at::Tensor rows = scaled.unsqueeze(0);  // a view: truncated in place
  truncate_logits_rows(rows, {&params});
}

namespace {

// Each row's truncation limits, as the filters read them (the same for both sampling paths).
struct RowLimits {
  std::vector<int64_t> top_k;  // 0 = off (also for top_k >= vocab)
  std::vector<float> top_p;    // 2 = off: a threshold no cumulative probability reaches
  std::vector<float> min_p;
  int64_t max_k = 0;
  bool any_top_p = false, any_min_p = false;
};

RowLimits row_limits(const std::vector<const SamplingParams*>& params, int64_t vocab) {
  RowLimits l;
  for (const SamplingParams* p : params) {
    const int64_t k = p->top_k > 0 && p->top_k < vocab ? p->top_k : 0;
    l.top_k.push_back(k);
    l.max_k = std::max(l.max_k, k);
    l.top_p.push_back(p->top_p < 1.0 ? static_cast<float>(p->top_p) : 2.0f);
    l.any_top_p |= p->top_p < 1.0;
    l.min_p.push_back(static_cast<float>(p->min_p));
    l.any_min_p |= p->min_p > 0.0;
  }
  return l;
}

// The candidates of row `r` of `scaled` (float32, contiguous rows) without a top-k over the row:
// every entry within `width` nats of the row's maximum, when there are at most `candidates` of
// them, in descending order of value (ties by index), into top/order (the rest of the row of
// `top` stays -inf). `most` is the row's maximum. False when more entries are that close, or the
// maximum is not finite: the caller takes at::topk.
bool candidates_near_max(const float* row, int64_t vocab, float most, float width,
                         int64_t candidates, float* top, int64_t* order) {
  if (!std::isfinite(most)) return false;
  const float floor = most - width;
  std::vector<std::pair<float, int64_t>> kept;
  kept.reserve(static_cast<size_t>(candidates));
  for (int64_t i = 0; i < vocab; ++i) {
    if (row[i] < floor) continue;
    if (static_cast<int64_t>(kept.size()) == candidates) return false;
    kept.emplace_back(row[i], i);
  }
  std::sort(kept.begin(), kept.end(), [](const auto& a, const auto& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  });
  for (size_t j = 0; j < kept.size(); ++j) {
    top[j] = kept[j].first;
    order[j] = kept[j].second;
  }
  return true;
}

// `values` as a [rows, 1] column of `dtype` on `device`.
template <typename T>
at::Tensor column(const std::vector<T>& values, at::ScalarType dtype, const at::Device& device) {
  return at::tensor(values, at::TensorOptions().dtype(dtype))
      .to(device)
      .view({static_cast<int64_t>(values.size()), 1});
}

// Top-p on every row of `scaled` [R, V] by sorting it: row r keeps, in descending order, the
// tokens before which the probability is below top_p[r] (2 = off).
void top_p_by_sorting(at::Tensor& scaled, const std::vector<float>& top_p) {
  auto [sorted, order] = at::sort(scaled, /*dim=*/-1, /*descending=*/true);
  at::Tensor probs = at::softmax(sorted, -1);
  // Drop a token when the tokens before it already reach top_p (the crossing token stays).
  at::Tensor before = probs.cumsum(-1) - probs;
  at::Tensor drop_sorted = before >= column(top_p, at::kFloat, scaled.device());
  drop_sorted.narrow(-1, 0, 1).fill_(false);
  at::Tensor drop = at::zeros_like(drop_sorted).scatter_(-1, order, drop_sorted);
  scaled.masked_fill_(drop, -std::numeric_limits<float>::infinity());
}

}  // namespace

void truncate_logits_rows(at::Tensor& scaled, const std::vector<const SamplingParams*>& params) {
  const float kNegInf = -std::numeric_limits<float>::infinity();
  const int64_t rows = scaled.size(0), vocab = scaled.size(-1);
  TORCH_CHECK(static_cast<int64_t>(params.size()) == rows, "truncate_logits_rows: ", rows,
              " rows but ", params.size(), " parameter sets");
  const RowLimits l = row_limits(params, vocab);
  const int64_t max_k = l.max_k;
  std::vector<int64_t> kth_index(rows);
  std::vector<uint8_t> no_top_k(rows);
  for (int64_t r = 0; r < rows; ++r) {
    kth_index[r] = std::max<int64_t>(l.top_k[r] - 1, 0);
    no_top_k[r] = l.top_k[r] == 0;
  }
  const at::Device device = scaled.device();
  if (max_k > 0) {
    at::Tensor top = std::get<0>(at::topk(scaled, max_k, -1));  // descending
    at::Tensor kth = top.gather(-1, column(kth_index, at::kLong, device));
    kth.masked_fill_(column(no_top_k, at::kByte, device).to(at::kBool), kNegInf);
    scaled.masked_fill_(scaled < kth, kNegInf);
  }
  // Top-p row by row on the CPU (TopPCut); on other devices, and for rows it declines, by
  // sorting.
  if (l.any_top_p && device.is_cpu() && scaled.scalar_type() == at::kFloat &&
      scaled.is_contiguous()) {
    const at::Tensor norm = at::logsumexp(scaled, -1).contiguous();
    float* data = scaled.data_ptr<float>();
    const float* norm_of = norm.data_ptr<float>();
    TopPCut cut(vocab);
    std::vector<int64_t> declined;
    std::vector<float> declined_top_p;
    for (int64_t r = 0; r < rows; ++r) {
      if (params[r]->top_p >= 1.0) continue;
      if (cut.cut(data + r * vocab, norm_of[r], params[r]->top_p)) {
        cut.drop_from(data + r * vocab);
      } else {
        declined.push_back(r);
        declined_top_p.push_back(l.top_p[r]);
      }
    }
    if (!declined.empty()) {
      const at::Tensor which = at::tensor(declined, at::kLong);
      at::Tensor sub = scaled.index_select(0, which);
      top_p_by_sorting(sub, declined_top_p);
      scaled.index_copy_(0, which, sub);
    }
  } else if (l.any_top_p) {
    top_p_by_sorting(scaled, l.top_p);
  }
  if (l.any_min_p) {
    at::Tensor probs = at::softmax(scaled, -1);
    at::Tensor threshold =
        std::get<0>(probs.max(-1, /*keepdim=*/true)) * column(l.min_p, at::kFloat, device);
    scaled.masked_fill_(probs < threshold, kNegInf);
  }
}

at::Tensor sample_among_candidates(const at::Tensor& scaled,
                                   const std::vector<const SamplingParams*>& params,
                                   const at::Tensor& uniforms, int64_t candidates,
                                   at::Tensor* tokens, at::Tensor* logprobs,
                                   const at::Tensor& scaled_norm) {
  const float kNegInf = -std::numeric_limits<float>::infinity();
  const int64_t rows = scaled.size(0), vocab = scaled.size(-1);
  if (!scaled.device().is_cpu() || candidates <= 0 || candidates >= vocab) return at::Tensor();
  TORCH_CHECK(static_cast<int64_t>(params.size()) == rows, "sample_among_candidates: ", rows,
              " rows but ", params.size(), " parameter sets");
  RowLimits l = row_limits(params, vocab);
  std::vector<uint8_t> too_wide(rows);  // a top-k that may keep more than the candidates
  for (int64_t r = 0; r < rows; ++r) {
    too_wide[r] = l.top_k[r] > candidates;
    if (too_wide[r]) l.top_k[r] = 0;
  }
  const at::Device cpu(at::kCPU);
  at::Tensor k = column(l.top_k, at::kLong, cpu), p = column(l.top_p, at::kFloat, cpu);
  at::Tensor m = column(l.min_p, at::kFloat, cpu);
  // Each row's `candidates` most likely tokens, descending. A row without top-k whose top-p
  // (or min-p) cut lies within `width` nats of its maximum needs only the entries that close:
  // every other token has probability below exp(-width) <= (1 - top_p) / vocab (or below min_p
  // times the most likely one), so what lies outside holds less than 1 - top_p (or is cut by
  // min-p), and the row is covered. Found in one scan instead of a top-k over the row; rows with
  // more entries that close, and the others, take at::topk.
  const at::Tensor rows_of = scaled.contiguous();
  at::Tensor top = at::full({rows, candidates}, kNegInf, scaled.options());
  at::Tensor order = at::zeros({rows, candidates}, scaled.options().dtype(at::kLong));
  const at::Tensor row_norm =
      scaled_norm.defined() ? scaled_norm : at::logsumexp(scaled, -1, /*keepdim=*/true);
  const at::Tensor row_max = std::get<0>(rows_of.max(-1)).contiguous();
  const at::Tensor norm_of = row_norm.contiguous();
  std::vector<uint8_t> near_max(rows, 0);
  std::vector<int64_t> by_topk;
  // Rows that cannot be covered skip at::topk: a top-k wider than the candidates, and rows
  // without top-k or min-p whose candidates cannot reach top_p (at most `candidates` times the
  // largest probability: random weights' flat rows) or that have no top-p.
  auto cannot_be_covered = [&](int64_t r) {
    if (too_wide[r]) return true;
    if (l.top_k[r] != 0 || l.min_p[r] > 0.0f) return false;
    const double largest =
        std::exp(static_cast<double>(row_max.data_ptr<float>()[r]) - norm_of.data_ptr<float>()[r]);
    return l.top_p[r] >= 1.0f || static_cast<double>(candidates) * largest < l.top_p[r];
  };
  for (int64_t r = 0; r < rows; ++r) {
    float width = std::numeric_limits<float>::infinity();
    if (l.top_k[r] == 0 && !too_wide[r] && l.top_p[r] < 1.0f) {
      width = std::log(static_cast<float>(vocab) / (1.0f - l.top_p[r]));
    }
    if (l.top_k[r] == 0 && !too_wide[r] && l.min_p[r] > 0.0f) {
      width = std::min(width, -std::log(l.min_p[r]));
    }
    near_max[r] =
        std::isfinite(width) && candidates_near_max(rows_of.data_ptr<float>() + r * vocab, vocab,
                                                    row_max.data_ptr<float>()[r], width, candidates,
                                                    top.data_ptr<float>() + r * candidates,
                                                    order.data_ptr<int64_t>() + r * candidates);
    if (!near_max[r] && !cannot_be_covered(r)) by_topk.push_back(r);
  }
  if (by_topk.empty() && std::find(near_max.begin(), near_max.end(), 1) == near_max.end()) {
    // No row can be covered (flat rows, no top-k): skip the passes over the candidates.
    *tokens = at::zeros({rows}, at::kLong);
    *logprobs = at::zeros({rows}, at::kFloat);
    return at::zeros({rows}, at::kBool);
  }
  if (!by_topk.empty()) {
    const at::Tensor which = at::tensor(by_topk, at::kLong);
    auto [values, indices] = at::topk(scaled.index_select(0, which), candidates, -1);
    top.index_copy_(0, which, values);
    order.index_copy_(0, which, indices);
  }
  // Top-k, then top-p on the distribution top-k left (the first k candidates, or the whole row).
  at::Tensor has_k = k > 0;
  at::Tensor logits = top.masked_fill(has_k & (at::arange(candidates).view({1, -1}) >= k), kNegInf);
  at::Tensor norm = at::where(has_k, at::logsumexp(logits, -1, /*keepdim=*/true), row_norm);
  at::Tensor probs = (logits - norm).exp();
  at::Tensor reached = probs.cumsum(-1);
  at::Tensor drop = (reached - probs) >= p;
  drop.narrow(-1, 0, 1).fill_(false);
  // Min-p: below min_p times the most likely token (the first candidate, never dropped).
  at::Tensor below = probs < probs.narrow(-1, 0, 1) * m;
  // A row is drawn here when its kept tokens end within its candidates.
  at::Tensor last = at::full({rows, 1}, candidates - 1, at::kLong);
  at::Tensor covered = ((has_k | (reached.gather(-1, last) >= p) | below.gather(-1, last)) &
                        column(too_wide, at::kByte, cpu).logical_not()) |
                       column(near_max, at::kByte, cpu).to(at::kBool);
  logits.masked_fill_(drop | below, kNegInf);
  at::Tensor kept = at::softmax(logits, -1);
  at::Tensor index = sample_from_probs(kept, uniforms).view({-1, 1});
  *tokens = order.gather(-1, index).view({-1});
  *logprobs = kept.gather(-1, index).view({-1}).log();
  return covered.view({-1});
}

void sample_rows(const at::Tensor& scaled, const std::vector<const SamplingParams*>& params,
                 const at::Tensor& uniforms, at::Tensor* tokens, at::Tensor* logprobs,
                 const at::Tensor& scaled_norm) {
  const int64_t rows = scaled.size(0), vocab = scaled.size(-1);
  TORCH_CHECK(static_cast<int64_t>(params.size()) == rows, "sample_rows: ", rows, " rows but ",
              params.size(), " parameter sets");
  const at::Tensor u = uniforms.to(at::kCPU, at::kDouble).contiguous();
  const double* u_of = u.data_ptr<double>();
  at::Tensor drawn = at::empty({rows}, at::kLong), drawn_logprobs = at::empty({rows}, at::kFloat);
  std::vector<int64_t> general;  // rows for truncate_logits_rows + softmax + sample_from_probs
  if (scaled.device().is_cpu() && scaled.scalar_type() == at::kFloat) {
    const at::Tensor rows_of = scaled.contiguous();
    const at::Tensor norm = (scaled_norm.defined() ? scaled_norm : at::logsumexp(rows_of, -1))
                                .reshape({rows})
                                .contiguous();
    const float* data = rows_of.data_ptr<float>();
    const float* norm_of = norm.data_ptr<float>();
    int64_t* token_of = drawn.data_ptr<int64_t>();
    float* logprob_of = drawn_logprobs.data_ptr<float>();
    const RowLimits l = row_limits(params, vocab);
    TopPCut cut(vocab);
    for (int64_t r = 0; r < rows; ++r) {
      const bool top_p_alone = l.top_k[r] == 0 && l.min_p[r] == 0.0f;
      if (top_p_alone && cut.cut(data + r * vocab, norm_of[r], params[r]->top_p)) {
        const auto [token, logprob] = cut.draw(u_of[r]);
        token_of[r] = token;
        logprob_of[r] = static_cast<float>(logprob);
      } else {
        general.push_back(r);
      }
    }
  } else {
    for (int64_t r = 0; r < rows; ++r) general.push_back(r);
  }
  const at::Device device = scaled.device();
  *tokens = drawn.to(device);
  *logprobs = drawn_logprobs.to(device);
  if (general.empty()) return;
  const at::Tensor which = at::tensor(general, at::kLong);
  std::vector<const SamplingParams*> general_params;
  for (int64_t r : general) general_params.push_back(params[r]);
  at::Tensor sub = scaled.index_select(0, which.to(device));  // a copy: truncated in place
  truncate_logits_rows(sub, general_params);
  const at::Tensor probs = at::softmax(sub, -1);
  const at::Tensor picked = sample_from_probs(probs, u.index_select(0, which));
  tokens->index_copy_(0, which.to(device), picked);
  logprobs->index_copy_(0, which.to(device),
                        probs.gather(-1, picked.view({-1, 1})).view({-1}).log());
}

uint64_t sample_seed(uint64_t seed, int64_t index) {
  // splitmix64 of the pair.
  uint64_t z = seed + 0x9E3779B97F4A7C15ull * (static_cast<uint64_t>(index) + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

double sample_uniform(uint64_t seed, int64_t position) {
  // The top 53 bits of splitmix64(seed, position): uniform over [0, 1) in steps of 2^-53.
  return static_cast<double>(sample_seed(seed, position) >> 11) * 0x1.0p-53;
}

at::Tensor sample_from_probs(const at::Tensor& probs, const at::Tensor& uniforms) {
  const int64_t vocab = probs.size(-1);
  // Accumulated in float64 (no drift over a large vocabulary), without a float64 copy of probs.
  at::Tensor cdf = probs.cumsum(-1, at::kDouble);
  at::Tensor total = cdf.narrow(-1, vocab - 1, 1);
  // Strictly below the total, so that the draw lands on a token with positive probability: the
  // first j with cdf[j] > target has cdf[j - 1] <= target < cdf[j].
  at::Tensor target =
      at::minimum(uniforms.to(cdf.options()).view({-1, 1}) * total, total * (1.0 - 0x1.0p-52));
  at::Tensor index = at::searchsorted(cdf, target, /*out_int32=*/false, /*right=*/true);
  return index.view({-1}).clamp_max(vocab - 1);
}

}  // namespace flywheel::rollout
