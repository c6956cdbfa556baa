#include "flywheel/trainer/micro_batch.h"

#include <algorithm>
#include <numeric>

#include <ATen/ATen.h>

#include "absl/strings/str_cat.h"

namespace flywheel::trainer {

namespace {

// The routes of a row packing `bin` (T positions), [1, T, layers, k] int64 with -1 where a
// sequence has none; undefined when none of them has any.
at::Tensor packed_routes(const std::vector<SequenceTokens>& sequences,
                         const std::vector<int64_t>& bin, int64_t T) {
  const buffer::Trajectory* first = nullptr;
  for (int64_t i : bin) {
    const buffer::Trajectory* t = sequences[i].routes;
    if (t != nullptr && !t->routes.empty()) first = first != nullptr ? first : t;
  }
  if (first == nullptr) return {};
  const int64_t layers = first->route_layers, k = first->route_k, width = layers * k;
  std::vector<int64_t> ids(T * width, -1);
  int64_t offset = 0;
  for (int64_t i : bin) {
    const int64_t n = sequences[i].prompt->size() + sequences[i].response->size() - 1;
    const buffer::Trajectory* t = sequences[i].routes;
    if (t != nullptr && t->route_layers == layers && t->route_k == k) {
      for (int64_t j = 0; j < n * width && !t->routes.empty(); ++j) {
        ids[offset * width + j] = t->route_id(static_cast<size_t>(j));
      }
    }
    offset += n;
  }
  return at::tensor(ids, at::kLong).view({1, T, layers, k});
}

}  // namespace

absl::StatusOr<std::vector<MicroBatch>> pack_micro_batches(
    const std::vector<SequenceTokens>& sequences, int64_t max_tokens, int64_t max_response) {
  const int64_t n = static_cast<int64_t>(sequences.size());
  std::vector<int64_t> length(n);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t P = sequences[i].prompt->size(), R = sequences[i].response->size();
    if (P < 1 || R < 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "sequence ", i, ": needs a prompt and a response (got ", P, " and ", R, " tokens)"));
    }
    if (R > max_response) {
      return absl::InvalidArgumentError(
          absl::StrCat("sequence ", i, ": response of ", R, " tokens exceeds ", max_response));
    }
    length[i] = P + R - 1;
    if (length[i] > max_tokens) {
      return absl::InvalidArgumentError(
          absl::StrCat("sequence ", i, " needs ", length[i], " positions (prompt ", P,
                       " + response ", R, " - 1) but trainer.micro_batch_tokens is ", max_tokens,
                       "; raise it (sequences are never truncated)"));
    }
  }
  // First fit by decreasing length; ties keep the input order.
  std::vector<int64_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return length[a] > length[b]; });
  std::vector<std::vector<int64_t>> bins;
  std::vector<int64_t> used;
  for (int64_t i : order) {
    size_t b = 0;
    while (b < bins.size() && used[b] + length[i] > max_tokens) ++b;
    if (b == bins.size()) {
      bins.emplace_back();
      used.push_back(0);
    }
    bins[b].push_back(i);
    used[b] += length[i];
  }
  std::vector<MicroBatch> out;
  for (size_t b = 0; b < bins.size(); ++b) {
    MicroBatch mb;
    const int64_t T = used[b];
    mb.tokens = T;
    std::vector<int64_t> tokens(T), targets(T), positions(T), segments(T);
    const int64_t S = static_cast<int64_t>(bins[b].size());
    std::vector<int64_t> index(S * max_response, 0);
    std::vector<uint8_t> valid(S * max_response, 0);
    int64_t offset = 0;
    for (int64_t s = 0; s < S; ++s) {
      const int64_t i = bins[b][s];
      const auto& prompt = *sequences[i].prompt;
      const auto& response = *sequences[i].response;
      const int64_t P = prompt.size(), R = response.size();
      auto token = [&](int64_t k) -> int64_t { return k < P ? prompt[k] : response[k - P]; };
      for (int64_t k = 0; k < P + R - 1; ++k) {
        tokens[offset + k] = token(k);
        targets[offset + k] = token(k + 1);
        positions[offset + k] = k;
        segments[offset + k] = s + 1;
      }
      for (int64_t j = 0; j < R; ++j) {
        index[s * max_response + j] = offset + P - 1 + j;
        valid[s * max_response + j] = 1;
      }
      offset += P + R - 1;
      mb.sequences.push_back(i);
    }
    mb.batch.routes = packed_routes(sequences, bins[b], T);
    mb.batch.tokens = at::tensor(tokens, at::kLong).view({1, T});
    mb.batch.targets = at::tensor(targets, at::kLong).view({1, T});
    mb.batch.positions = at::tensor(positions, at::kLong).view({1, T});
    mb.batch.segment_ids = at::tensor(segments, at::kLong).view({1, T});
    mb.index = at::tensor(index, at::kLong).view({S, max_response});
    mb.valid = at::tensor(valid, at::kByte).view({S, max_response}).to(at::kBool);
    out.push_back(std::move(mb));
  }
  return out;
}

MicroBatch empty_micro_batch(int64_t max_response) {
  MicroBatch mb;
  mb.tokens = 1;
  mb.batch.tokens = at::zeros({1, 1}, at::kLong);
  mb.batch.targets = at::zeros({1, 1}, at::kLong);
  mb.batch.positions = at::zeros({1, 1}, at::kLong);
  mb.batch.segment_ids = at::zeros({1, 1}, at::kLong);  // padding
  mb.index = at::zeros({0, max_response}, at::kLong);
  mb.valid = at::zeros({0, max_response}, at::kBool);
  return mb;
}

at::Tensor BalancedMicroBatches::rows_of(const MicroBatch& mb) const {
  std::vector<int64_t> rows;
  for (int64_t s : mb.sequences) rows.push_back(ids[s]);
  return at::tensor(rows, at::kLong);
}

absl::StatusOr<BalancedMicroBatches> pack_balanced(const std::vector<SequenceTokens>& sequences,
                                                   const std::vector<int64_t>& ids,
                                                   int64_t max_tokens, int64_t max_response,
                                                   comm::Communicator& comm) {
  BalancedMicroBatches packed;
  std::vector<SequenceTokens> kept;
  for (size_t i = 0; i < sequences.size(); ++i) {
    if (sequences[i].response->empty()) continue;
    kept.push_back(sequences[i]);
    packed.ids.push_back(ids[i]);
  }
  absl::StatusOr<std::vector<MicroBatch>> mbs = pack_micro_batches(kept, max_tokens, max_response);
  // Every rank learns whether any failed, so that none is left waiting in a collective.
  at::Tensor failed = at::full({1}, mbs.ok() ? 0 : 1, at::kLong);
  comm.all_reduce_host(failed, comm::ReduceOp::kMax);
  if (!mbs.ok()) return mbs.status();
  if (failed.item<int64_t>() != 0) {
    return absl::InvalidArgumentError("another learner rank could not pack its micro-batches");
  }
  packed.micro_batches = std::move(*mbs);
  at::Tensor count = at::full({1}, static_cast<int64_t>(packed.micro_batches.size()), at::kLong);
  comm.all_reduce_host(count, comm::ReduceOp::kMax);
  while (static_cast<int64_t>(packed.micro_batches.size()) < count.item<int64_t>()) {
    packed.micro_batches.push_back(empty_micro_batch(max_response));
  }
  return packed;
}

at::Tensor unpack(const MicroBatch& micro_batch, const at::Tensor& per_position) {
  at::Tensor flat = per_position.reshape({-1});
  at::Tensor index = micro_batch.index.to(flat.device());
  at::Tensor values = flat.index_select(0, index.reshape({-1})).view(index.sizes());
  return at::where(micro_batch.valid.to(values.device()), values, at::zeros_like(values));
}

}  // namespace flywheel::trainer
