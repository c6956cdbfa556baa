#include "flywheel/trainer/micro_batch.h"

#include <algorithm>
#include <map>
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

// What first fit packs: one sequence (prefix 0), or a tree of sequences whose prompts are equal,
// sharing its first `prefix` = P - 1 tokens.
struct PackUnit {
  std::vector<int64_t> members;  // sequence indices, in input order
  int64_t prefix = 0;
  int64_t length = 0;  // positions
};

// The units of `sequences`, ordered by their first member.
std::vector<PackUnit> pack_units(const std::vector<SequenceTokens>& sequences,
                                 const PackOptions& options) {
  const int64_t n = static_cast<int64_t>(sequences.size());
  bool share = options.shared_prefix;
  for (const SequenceTokens& s : sequences) {
    share = share && (s.routes == nullptr || s.routes->routes.empty());
  }
  // Sequences by prompt, groups in order of their first sequence.
  std::vector<std::vector<int64_t>> groups;
  std::map<std::vector<int32_t>, size_t> group_of;
  for (int64_t i = 0; i < n; ++i) {
    const std::vector<int32_t>& prompt = *sequences[i].prompt;
    if (!share || prompt.size() < 2) {
      groups.push_back({i});
      continue;
    }
    auto [it, fresh] = group_of.try_emplace(prompt, groups.size());  // copies new prompts only
    if (fresh) groups.emplace_back();
    groups[it->second].push_back(i);
  }
  std::vector<PackUnit> units;
  for (const std::vector<int64_t>& group : groups) {
    const int64_t P = sequences[group[0]].prompt->size();
    PackUnit unit;
    for (int64_t i : group) {
      const int64_t R = sequences[i].response->size();
      if (!unit.members.empty() && unit.length + R > options.max_tokens) {
        units.push_back(std::move(unit));
        unit = PackUnit{};
      }
      if (unit.members.empty()) unit.length = P - 1;
      unit.members.push_back(i);
      unit.length += R;
    }
    units.push_back(std::move(unit));
  }
  for (PackUnit& unit : units) {  // a tree of one branch is a plain sequence
    if (unit.members.size() > 1) unit.prefix = sequences[unit.members[0]].prompt->size() - 1;
  }
  std::stable_sort(units.begin(), units.end(), [](const PackUnit& a, const PackUnit& b) {
    return a.members[0] < b.members[0];
  });
  return units;
}

// Lays out the units of one micro-batch's row, T positions.
class RowWriter {
 public:
  RowWriter(int64_t T, int64_t max_response)
      : max_response_(max_response),
        tokens_(T),
        targets_(T),
        positions_(T),
        segments_(T),
        prefixes_(T, 0) {}

  void add(const std::vector<SequenceTokens>& sequences, const PackUnit& unit) {
    const std::vector<int32_t>& prompt = *sequences[unit.members[0]].prompt;
    int64_t prefix_segment = 0;
    if (unit.prefix > 0) {  // the prompt but its last token, once
      shared_ = true;
      prefix_segment = ++segment_;
      for (int64_t k = 0; k < unit.prefix; ++k) {
        put(prompt[k], prompt[k + 1], k, prefix_segment, 0);
      }
    }
    for (int64_t i : unit.members) {
      const std::vector<int32_t>& response = *sequences[i].response;
      const int64_t P = prompt.size(), R = response.size();
      const int64_t first = unit.prefix > 0 ? P - 1 : 0;  // the branch's first prompt token
      unshared_ += P + R - 1;
      ++segment_;
      auto token = [&](int64_t k) -> int64_t { return k < P ? prompt[k] : response[k - P]; };
      for (int64_t j = 0; j < R; ++j) {
        index_.push_back(offset_ + P - 1 - first + j);
        valid_.push_back(1);
      }
      for (int64_t j = R; j < max_response_; ++j) {
        index_.push_back(0);
        valid_.push_back(0);
      }
      for (int64_t k = first; k < P + R - 1; ++k) {
        put(token(k), token(k + 1), k, segment_, prefix_segment);
      }
      sequences_.push_back(i);
    }
  }

  // The micro-batch; prefix ids only where a unit shares its prompt.
  MicroBatch finish() {
    MicroBatch mb;
    const int64_t T = offset_, S = static_cast<int64_t>(sequences_.size());
    mb.tokens = T;
    mb.unshared_tokens = unshared_;
    mb.sequences = std::move(sequences_);
    mb.batch.tokens = at::tensor(tokens_, at::kLong).view({1, T});
    mb.batch.targets = at::tensor(targets_, at::kLong).view({1, T});
    mb.batch.positions = at::tensor(positions_, at::kLong).view({1, T});
    mb.batch.segment_ids = at::tensor(segments_, at::kLong).view({1, T});
    if (shared_) mb.batch.prefix_ids = at::tensor(prefixes_, at::kLong).view({1, T});
    mb.index = at::tensor(index_, at::kLong).view({S, max_response_});
    mb.valid = at::tensor(valid_, at::kByte).view({S, max_response_}).to(at::kBool);
    return mb;
  }

 private:
  void put(int64_t token, int64_t target, int64_t position, int64_t segment, int64_t prefix) {
    tokens_[offset_] = token;
    targets_[offset_] = target;
    positions_[offset_] = position;
    segments_[offset_] = segment;
    prefixes_[offset_] = prefix;
    ++offset_;
  }

  int64_t max_response_;
  std::vector<int64_t> tokens_, targets_, positions_, segments_, prefixes_;
  std::vector<int64_t> index_;
  std::vector<uint8_t> valid_;
  std::vector<int64_t> sequences_;
  int64_t offset_ = 0, segment_ = 0, unshared_ = 0;
  bool shared_ = false;
};

}  // namespace

absl::StatusOr<std::vector<MicroBatch>> pack_micro_batches(
    const std::vector<SequenceTokens>& sequences, const PackOptions& options) {
  const int64_t n = static_cast<int64_t>(sequences.size());
  const int64_t max_tokens = options.max_tokens, max_response = options.max_response;
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
    if (P + R - 1 > max_tokens) {
      return absl::InvalidArgumentError(
          absl::StrCat("sequence ", i, " needs ", P + R - 1, " positions (prompt ", P,
                       " + response ", R, " - 1) but trainer.micro_batch_tokens is ", max_tokens,
                       "; raise it (sequences are never truncated)"));
    }
  }
  const std::vector<PackUnit> units = pack_units(sequences, options);
  // First fit by decreasing length; ties keep the input order.
  std::vector<int64_t> order(units.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return units[a].length > units[b].length; });
  std::vector<std::vector<int64_t>> bins;
  std::vector<int64_t> used;
  for (int64_t u : order) {
    size_t b = 0;
    while (b < bins.size() && used[b] + units[u].length > max_tokens) ++b;
    if (b == bins.size()) {
      bins.emplace_back();
      used.push_back(0);
    }
    bins[b].push_back(u);
    used[b] += units[u].length;
  }
  std::vector<MicroBatch> out;
  for (size_t b = 0; b < bins.size(); ++b) {
    RowWriter row(used[b], max_response);
    for (int64_t u : bins[b]) row.add(sequences, units[u]);
    MicroBatch mb = row.finish();
    if (!mb.batch.prefix_ids.defined()) {  // routed sequences never share
      std::vector<int64_t> members;
      for (int64_t u : bins[b]) members.push_back(units[u].members[0]);
      mb.batch.routes = packed_routes(sequences, members, mb.tokens);
    }
    out.push_back(std::move(mb));
  }
  return out;
}

MicroBatch empty_micro_batch(int64_t max_response) {
  MicroBatch mb;
  mb.tokens = 1;
  mb.unshared_tokens = 1;
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
                                                   const PackOptions& options,
                                                   comm::Communicator& comm) {
  BalancedMicroBatches packed;
  std::vector<SequenceTokens> kept;
  for (size_t i = 0; i < sequences.size(); ++i) {
    if (sequences[i].response->empty()) continue;
    kept.push_back(sequences[i]);
    packed.ids.push_back(ids[i]);
  }
  absl::StatusOr<std::vector<MicroBatch>> mbs = pack_micro_batches(kept, options);
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
    packed.micro_batches.push_back(empty_micro_batch(options.max_response));
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
