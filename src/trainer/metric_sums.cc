#include "flywheel/trainer/metric_sums.h"

#include <algorithm>
#include <limits>
#include <set>
#include <vector>

#include <ATen/ATen.h>

#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace flywheel::trainer {
namespace {

// The union of every rank's `names`, sorted.
std::vector<std::string> agree_on_names(comm::Communicator& comm,
                                        const std::set<std::string>& names) {
  const std::string mine = absl::StrJoin(names, "\n");
  at::Tensor length = at::full({1}, static_cast<int64_t>(mine.size()), at::kLong);
  comm.all_reduce_host(length, comm::ReduceOp::kMax);
  const int64_t longest = length.item<int64_t>();
  at::Tensor bytes = at::zeros({longest + 1}, at::kByte);
  std::copy(mine.begin(), mine.end(), bytes.data_ptr<uint8_t>());
  at::Tensor all = at::empty({(longest + 1) * comm.size()}, at::kByte);
  comm.all_gather_host(bytes, all);
  std::set<std::string> together;
  for (int r = 0; r < comm.size(); ++r) {
    const char* text = reinterpret_cast<const char*>(all.data_ptr<uint8_t>()) + r * (longest + 1);
    for (absl::string_view name : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
      together.emplace(name);
    }
  }
  return {together.begin(), together.end()};
}

}  // namespace

void MetricSums::add_mean(const std::string& name, double value, double weight) {
  auto& [sum, total] = means_[name];
  sum += value * weight;
  total += weight;
}

void MetricSums::add_min(const std::string& name, double value) {
  auto it = mins_.find(name);
  mins_[name] = it == mins_.end() ? value : std::min(it->second, value);
}

void MetricSums::add_max(const std::string& name, double value) {
  auto it = maxs_.find(name);
  maxs_[name] = it == maxs_.end() ? value : std::max(it->second, value);
}

void MetricSums::add_diagnostic(const std::string& name, double value, double weight) {
  auto ends_with = [&](const char* suffix) {
    return name.size() > 4 && name.compare(name.size() - 4, 4, suffix) == 0;
  };
  if (ends_with("_min")) {
    add_min(name, value);
  } else if (ends_with("_max")) {
    add_max(name, value);
  } else {
    add_mean(name, value, weight);
  }
}

std::map<std::string, double> MetricSums::reduce(comm::Communicator& comm) const {
  // Names are prefixed by kind so that one name can be, say, both a mean and a sum.
  std::set<std::string> names;
  for (const auto& [n, v] : sums_) names.insert("s" + n);
  for (const auto& [n, v] : means_) names.insert("m" + n);
  for (const auto& [n, v] : mins_) names.insert("<" + n);
  for (const auto& [n, v] : maxs_) names.insert(">" + n);
  const std::vector<std::string> all = agree_on_names(comm, names);
  const double inf = std::numeric_limits<double>::infinity();
  // sums and means in one all-reduce (value, weight); minima and maxima as max of +-value.
  at::Tensor additive = at::zeros({static_cast<int64_t>(all.size()), 2}, at::kDouble);
  at::Tensor extreme = at::full({static_cast<int64_t>(all.size())}, -inf, at::kDouble);
  for (size_t i = 0; i < all.size(); ++i) {
    const char kind = all[i][0];
    const std::string n = all[i].substr(1);
    if (kind == 's' && sums_.count(n)) additive[i][0] = sums_.at(n);
    if (kind == 'm' && means_.count(n)) {
      additive[i][0] = means_.at(n).first;
      additive[i][1] = means_.at(n).second;
    }
    if (kind == '<' && mins_.count(n)) extreme[i] = -mins_.at(n);
    if (kind == '>' && maxs_.count(n)) extreme[i] = maxs_.at(n);
  }
  comm.all_reduce_host(additive, comm::ReduceOp::kSum);
  comm.all_reduce_host(extreme, comm::ReduceOp::kMax);
  std::map<std::string, double> out;
  for (size_t i = 0; i < all.size(); ++i) {
    const char kind = all[i][0];
    const std::string n = all[i].substr(1);
    const double value = additive[i][0].item<double>(), weight = additive[i][1].item<double>();
    if (kind == 's') out[n] = value;
    if (kind == 'm') out[n] = weight > 0 ? value / weight : 0.0;
    if (kind == '<') out[n] = -extreme[i].item<double>();
    if (kind == '>') out[n] = extreme[i].item<double>();
  }
  return out;
}

}  // namespace flywheel::trainer
