// safetensors files: a little-endian u64 header length, a JSON header
// {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, "__metadata__": {..}}
// and the raw tensor bytes. Reading maps the file (mmap) and hands out zero-copy tensors;
// every header field is checked so that a corrupt or hostile file is an error, never a crash.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace flywheel::model {

// Largest header accepted (the format's reference implementation uses 100 MB).
constexpr uint64_t kMaxSafetensorsHeaderBytes = 100'000'000;

struct SafetensorsEntry {
  std::string name;
  at::ScalarType dtype;
  std::vector<int64_t> shape;
  uint64_t begin = 0;  // byte offsets into the data section
  uint64_t end = 0;
};

// "F32" <-> kFloat, "F16" <-> kHalf, "BF16" <-> kBFloat16; others are InvalidArgument.
absl::StatusOr<at::ScalarType> safetensors_dtype(const std::string& name);
absl::StatusOr<std::string> safetensors_dtype_name(at::ScalarType dtype);

// A mapped, validated safetensors file. Thread-safe (read-only after open()).
class SafetensorsFile {
 public:
  // Errors (all naming the file): NotFound, or InvalidArgument for a truncated file, an absurd
  // header size, malformed JSON, an unsupported dtype, offsets outside the data section or not
  // matching dtype x shape, and overlapping tensors.
  static absl::StatusOr<std::unique_ptr<SafetensorsFile>> open(const std::string& path);
  ~SafetensorsFile();

  const std::string& path() const { return path_; }
  const std::vector<SafetensorsEntry>& entries() const { return entries_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  bool contains(const std::string& name) const;

  // A CPU tensor viewing the mapped bytes; it keeps the mapping alive. NotFound if absent.
  absl::StatusOr<at::Tensor> tensor(const std::string& name) const;

 private:
  struct Mapping;
  SafetensorsFile() = default;

  std::string path_;
  std::shared_ptr<Mapping> mapping_;
  std::vector<SafetensorsEntry> entries_;
  std::map<std::string, size_t> index_;
  std::map<std::string, std::string> metadata_;
  uint64_t data_start_ = 0;
};

// Writes `tensors` (contiguous or not; F32/F16/BF16) to `path`, sorted by name, with the header
// padded to a multiple of 8 bytes. The output is a function of its inputs only, so writing the
// same tensors twice gives identical bytes. Written to a temporary file, then renamed.
absl::Status write_safetensors(const std::string& path,
                               const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                               const std::map<std::string, std::string>& metadata = {
                                   {"format", "pt"}});

}  // namespace flywheel::model
