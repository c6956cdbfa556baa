#include "flywheel/trainer/flat_unit.h"

#include <algorithm>

#include <ATen/ATen.h>

#include "absl/strings/match.h"

namespace flywheel::trainer {

bool takes_weight_decay(const std::string& name, bool decay_all) {
  if (decay_all) return true;
  return !(absl::StrContains(name, "norm") || absl::EndsWith(name, ".bias") ||
           absl::StrContains(name, "embed_tokens"));
}

FlatUnit::FlatUnit(std::string name, const std::vector<model::ParamSpec>& specs, int rank,
                   int world, bool decay_all, at::Device device)
    : name_(std::move(name)), rank_(rank), world_(world) {
  for (const model::ParamSpec& spec : specs) {
    FlatParam p;
    p.name = spec.name;
    p.shape = spec.shape;
    p.offset = numel_;
    p.numel = 1;
    for (int64_t d : spec.shape) p.numel *= d;
    p.decay = takes_weight_decay(spec.name, decay_all);
    numel_ += p.numel;
    params_.push_back(std::move(p));
  }
  shard_numel_ = (numel_ + world - 1) / world;
  const at::TensorOptions options = at::TensorOptions().dtype(at::kFloat).device(device);
  shard_ = at::zeros({shard_numel_}, options).requires_grad_(true);
  decay_mask_ = at::zeros({shard_numel_}, options);
  const int64_t begin = shard_begin(), end = begin + shard_numel_;
  for (const FlatParam& p : params_) {
    const int64_t lo = std::max(begin, p.offset), hi = std::min(end, p.offset + p.numel);
    if (p.decay && lo < hi) decay_mask_.narrow(0, lo - begin, hi - lo).fill_(1);
  }
}

std::map<std::string, at::Tensor> FlatUnit::views(const at::Tensor& full) const {
  TORCH_CHECK(full.dim() == 1 && full.numel() == padded_numel(), "unit '", name_,
              "': views need a flat tensor of ", padded_numel(), " elements");
  std::map<std::string, at::Tensor> out;
  for (const FlatParam& p : params_) out[p.name] = full.narrow(0, p.offset, p.numel).view(p.shape);
  return out;
}

void FlatUnit::set_param(const FlatParam& param, const at::Tensor& values) {
  TORCH_CHECK(values.numel() == param.numel, "unit '", name_, "': ", param.name, " needs ",
              param.numel, " values, got ", values.numel());
  const int64_t begin = shard_begin(), end = begin + shard_numel_;
  const int64_t lo = std::max(begin, param.offset), hi = std::min(end, param.offset + param.numel);
  if (lo >= hi) return;
  at::NoGradGuard no_grad;
  at::Tensor flat = values.reshape({-1});
  shard_.narrow(0, lo - begin, hi - lo).copy_(flat.narrow(0, lo - param.offset, hi - lo));
}

}  // namespace flywheel::trainer
