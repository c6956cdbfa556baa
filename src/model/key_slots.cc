// make_key_slots (decoder.h): the slots of a forward's sequences for the engine's attention kernel.

#include <algorithm>
#include <map>
#include <memory>
#include <set>
#include <vector>

#include <ATen/ATen.h>

#include "flywheel/model/decoder.h"

namespace flywheel::model {
namespace {

// A [B, T] tensor's values on the host (undefined: empty).
std::vector<int64_t> host_values(const at::Tensor& t) {
  if (!t.defined()) return {};
  const at::Tensor c = t.to(at::kCPU).to(at::kLong).contiguous();
  return std::vector<int64_t>(c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel());
}

}  // namespace

std::shared_ptr<const KeySlots> make_key_slots(const ForwardBatch& batch) {
  TORCH_CHECK(batch.tokens.dim() == 2 && batch.positions.sizes() == batch.tokens.sizes(),
              "make_key_slots: tokens and positions of shape [B, T] expected");
  const int64_t B = batch.tokens.size(0), T = batch.tokens.size(1);
  const std::vector<int64_t> segments = host_values(batch.segment_ids);
  const std::vector<int64_t> prefixes = host_values(batch.prefix_ids);
  const std::vector<int64_t> positions = host_values(batch.positions);
  auto plan = std::make_shared<KeySlots>();
  plan->token_slot.assign(B * T, 0);
  plan->token_length.assign(B * T, 0);
  std::vector<std::vector<int64_t>> slot_keys;
  for (int64_t b = 0; b < B; ++b) {
    std::map<int64_t, std::vector<int64_t>> members;  // segment -> its tokens, in row order
    std::map<int64_t, int64_t> prefix_of;             // segment -> the prefix it reads
    std::set<int64_t> read_as_prefix;
    for (int64_t t = 0; t < T; ++t) {
      const int64_t at = b * T + t;
      const int64_t s = segments.empty() ? 1 : segments[at];
      if (s == 0) continue;  // padding
      members[s].push_back(at);
      const int64_t p = prefixes.empty() ? 0 : prefixes[at];
      if (p != 0 && p != s) {
        auto [it, added] = prefix_of.emplace(s, p);
        TORCH_CHECK(added || it->second == p, "make_key_slots: row ", b, ": segment ", s,
                    " reads two prefixes");
        read_as_prefix.insert(p);
      }
    }
    for (const auto& [s, tokens] : members) {
      // A prefix's tokens read the first keys of a slot of a segment that reads it.
      if (read_as_prefix.count(s) != 0) continue;
      std::vector<int64_t> keys;
      auto p = prefix_of.find(s);
      if (p != prefix_of.end()) {
        auto prefix = members.find(p->second);
        TORCH_CHECK(prefix != members.end(), "make_key_slots: row ", b, ": segment ", s,
                    " reads prefix ", p->second, ", which has no token");
        keys = prefix->second;
      }
      keys.insert(keys.end(), tokens.begin(), tokens.end());
      const int64_t slot = static_cast<int64_t>(slot_keys.size());
      for (size_t i = 0; i < keys.size(); ++i) {
        if (plan->token_length[keys[i]] != 0) continue;  // a prefix token placed already
        plan->token_slot[keys[i]] = slot;
        plan->token_length[keys[i]] = static_cast<int64_t>(i) + 1;
      }
      slot_keys.push_back(std::move(keys));
    }
  }
  for (int64_t i = 0; i < B * T; ++i) {
    const bool padding = !segments.empty() && segments[i] == 0;
    TORCH_CHECK(padding || plan->token_length[i] == positions[i] + 1, "make_key_slots: token ", i,
                " at position ", positions[i], " reads ", plan->token_length[i],
                " keys: its sequence's positions must count 0, 1, ... in row order");
  }
  if (slot_keys.empty()) slot_keys.push_back({0});  // only padding: one slot nobody reads
  plan->slots = static_cast<int64_t>(slot_keys.size());
  for (const auto& keys : slot_keys) {
    plan->max_len = std::max(plan->max_len, static_cast<int64_t>(keys.size()));
  }
  std::vector<int64_t> gather(plan->slots * plan->max_len, 0);
  for (int64_t s = 0; s < plan->slots; ++s) {
    std::copy(slot_keys[s].begin(), slot_keys[s].end(), gather.begin() + s * plan->max_len);
  }
  plan->gather = at::tensor(gather, at::kLong);
  return plan;
}

}  // namespace flywheel::model
