#include "flywheel/core/published_weights.h"

#include <set>

#include "absl/strings/str_cat.h"

namespace flywheel::core {

int dtype_bytes(const std::string& dtype) {
  if (dtype == "F32") return 4;
  if (dtype == "BF16" || dtype == "F16") return 2;
  return 0;
}

absl::Status validate_tensors(const std::vector<WeightTensor>& tensors, uint64_t payload_bytes) {
  std::set<std::string> names;
  uint64_t end = 0;  // of the previous tensor
  for (size_t i = 0; i < tensors.size(); ++i) {
    const WeightTensor& t = tensors[i];
    const std::string who = absl::StrCat("tensor ", i, " '", t.name, "'");
    if (t.name.empty()) return absl::InvalidArgumentError(absl::StrCat("tensor ", i, ": no name"));
    if (!names.insert(t.name).second) {
      return absl::InvalidArgumentError(absl::StrCat(who, ": duplicate name"));
    }
    const int element = dtype_bytes(t.dtype);
    if (element == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(who, ": unknown dtype '", t.dtype, "' (F32, BF16 or F16)"));
    }
    uint64_t expected = static_cast<uint64_t>(element);
    for (int64_t d : t.shape) {
      if (d < 0 || (d > 0 && expected > payload_bytes / static_cast<uint64_t>(d))) {
        return absl::InvalidArgumentError(
            absl::StrCat(who, ": shape dimension ", d, " is negative or too large"));
      }
      expected *= static_cast<uint64_t>(d);
    }
    if (t.size != expected) {
      return absl::InvalidArgumentError(
          absl::StrCat(who, ": size ", t.size, " bytes != ", expected, " (shape x ", t.dtype, ")"));
    }
    if (t.offset < end) {
      return absl::InvalidArgumentError(absl::StrCat(
          who, ": offset ", t.offset, " overlaps the tensor before it or is not ascending"));
    }
    if (t.offset > payload_bytes || t.size > payload_bytes - t.offset) {
      return absl::InvalidArgumentError(absl::StrCat(who, ": bytes [", t.offset, ", ",
                                                     t.offset + t.size, ") are past the payload (",
                                                     payload_bytes, " bytes)"));
    }
    end = t.offset + t.size;
  }
  return absl::OkStatus();
}

}  // namespace flywheel::core
