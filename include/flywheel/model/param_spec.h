// A parameter of a model: Hugging Face name and shape.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace flywheel::model {

struct ParamSpec {
  std::string name;
  std::vector<int64_t> shape;
};

// N of a parameter named "model.layers.N.<rest>" (and, when `rest` is given, what follows
// "N."); -1 for any other name (embeddings, final norm, head).
inline int64_t layer_index(std::string_view name, std::string_view* rest = nullptr) {
  constexpr std::string_view kPrefix = "model.layers.";
  if (name.substr(0, kPrefix.size()) != kPrefix) return -1;
  name.remove_prefix(kPrefix.size());
  int64_t layer = 0;
  size_t digits = 0;
  for (; digits < name.size() && name[digits] >= '0' && name[digits] <= '9'; ++digits) {
    if (digits == 18) return -1;  // no model has 10^18 layers: not a layer index
    layer = layer * 10 + (name[digits] - '0');
  }
  if (digits == 0 || digits >= name.size() || name[digits] != '.') return -1;
  if (rest != nullptr) *rest = name.substr(digits + 1);
  return layer;
}

}  // namespace flywheel::model
