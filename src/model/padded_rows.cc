#include "flywheel/model/padded_rows.h"

#include <algorithm>

#include <ATen/ATen.h>

namespace flywheel::model {

std::vector<std::vector<size_t>> length_sorted_batches(
    const std::vector<std::vector<int64_t>>& rows, std::vector<size_t> include,
    int64_t batch_size) {
  std::stable_sort(include.begin(), include.end(),
                   [&](size_t a, size_t b) { return rows[a].size() > rows[b].size(); });
  std::vector<std::vector<size_t>> batches;
  const size_t per = static_cast<size_t>(std::max<int64_t>(1, batch_size));
  for (size_t begin = 0; begin < include.size(); begin += per) {
    const size_t end = std::min(include.size(), begin + per);
    batches.emplace_back(include.begin() + begin, include.begin() + end);
  }
  return batches;
}

at::Tensor hidden_states(const DecoderModel& model,
                         const std::vector<const std::vector<int64_t>*>& rows) {
  at::NoGradGuard no_grad;
  const int64_t B = static_cast<int64_t>(rows.size());
  int64_t T = 0;
  for (const std::vector<int64_t>* ids : rows) T = std::max<int64_t>(T, ids->size());
  ForwardBatch batch;
  batch.tokens = at::zeros({B, T}, at::kLong);
  batch.positions = at::zeros({B, T}, at::kLong);
  auto tokens = batch.tokens.accessor<int64_t, 2>();
  auto positions = batch.positions.accessor<int64_t, 2>();
  for (int64_t b = 0; b < B; ++b) {
    const std::vector<int64_t>& ids = *rows[b];
    for (int64_t t = 0; t < static_cast<int64_t>(ids.size()); ++t) {
      tokens[b][t] = ids[t];
      positions[b][t] = t;
    }
  }
  const at::Device device = model.options().device;
  batch.tokens = batch.tokens.to(device);
  batch.positions = batch.positions.to(device);
  return model.forward(batch);  // [B, T, H]
}

at::Tensor hidden_at(const DecoderModel& model,
                     const std::vector<const std::vector<int64_t>*>& rows,
                     const std::vector<int64_t>& read) {
  const at::Tensor hidden = hidden_states(model, rows);
  const int64_t B = hidden.size(0), T = hidden.size(1);
  std::vector<int64_t> flat(B);  // into the flattened [B * T, hidden]
  for (int64_t b = 0; b < B; ++b) flat[b] = b * T + read[b];
  return hidden.reshape({B * T, hidden.size(2)})
      .index_select(0, at::tensor(flat, at::kLong).to(hidden.device()));
}

}  // namespace flywheel::model
