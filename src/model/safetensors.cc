#include "flywheel/model/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>

#include <ATen/ATen.h>

#include "absl/strings/str_cat.h"
#include "flywheel/core/file_io.h"
#include "flywheel/core/json.h"

namespace flywheel::model {

struct SafetensorsFile::Mapping {
  void* data = nullptr;
  size_t size = 0;
  ~Mapping() {
    if (data != nullptr && data != MAP_FAILED) munmap(data, size);
  }
};

absl::StatusOr<at::ScalarType> safetensors_dtype(const std::string& name) {
  if (name == "F32") return at::kFloat;
  if (name == "F16") return at::kHalf;
  if (name == "BF16") return at::kBFloat16;
  return absl::InvalidArgumentError(
      absl::StrCat("unsupported safetensors dtype '", name, "'; supported: F32, F16, BF16"));
}

absl::StatusOr<std::string> safetensors_dtype_name(at::ScalarType dtype) {
  switch (dtype) {
    case at::kFloat:
      return std::string("F32");
    case at::kHalf:
      return std::string("F16");
    case at::kBFloat16:
      return std::string("BF16");
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("cannot write dtype ", c10::toString(dtype), " to safetensors"));
  }
}

SafetensorsFile::~SafetensorsFile() = default;

namespace {

bool checked_numel_bytes(const std::vector<int64_t>& shape, size_t element_size, uint64_t* out) {
  uint64_t n = element_size;
  for (int64_t d : shape) {
    if (d < 0) return false;
    if (d != 0 && n > std::numeric_limits<uint64_t>::max() / static_cast<uint64_t>(d)) {
      return false;
    }
    n *= static_cast<uint64_t>(d);
  }
  *out = n;
  return true;
}

}  // namespace

absl::StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::open(const std::string& path) {
  auto bad = [&](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat("safetensors file '", path, "': ", why));
  };
  // O_NONBLOCK: opening a FIFO without a writer returns at once (it is refused below).
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    return absl::NotFoundError(
        absl::StrCat("cannot open safetensors file '", path, "': ", std::strerror(errno)));
  }
  struct stat st;
  if (fstat(fd, &st) != 0) {
    const int error = errno;
    ::close(fd);
    return bad(absl::StrCat("cannot stat: ", std::strerror(error)));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return bad(absl::StrCat("not a regular file (it is ", core::file_type_name(st.st_mode), ")"));
  }
  auto mapping = std::make_shared<Mapping>();
  mapping->size = static_cast<size_t>(st.st_size);
  if (mapping->size < 8) {
    ::close(fd);
    return bad(
        absl::StrCat("truncated: ", mapping->size, " bytes, shorter than the 8-byte header"));
  }
  mapping->data = mmap(nullptr, mapping->size, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (mapping->data == MAP_FAILED) return bad(absl::StrCat("mmap failed: ", std::strerror(errno)));

  const auto* bytes = static_cast<const unsigned char*>(mapping->data);
  uint64_t header_size = 0;
  for (int i = 7; i >= 0; --i) header_size = (header_size << 8) | bytes[i];
  if (header_size > kMaxSafetensorsHeaderBytes) {
    return bad(absl::StrCat("header size ", header_size, " exceeds the limit of ",
                            kMaxSafetensorsHeaderBytes, " bytes"));
  }
  if (header_size > mapping->size - 8) {
    return bad(absl::StrCat("truncated: header of ", header_size, " bytes but only ",
                            mapping->size - 8, " bytes follow"));
  }
  absl::StatusOr<core::Json> header =
      core::Json::parse(absl::string_view(reinterpret_cast<const char*>(bytes + 8), header_size));
  if (!header.ok()) return bad(absl::StrCat("malformed header JSON: ", header.status().message()));
  if (!header->is_object()) return bad("header is not a JSON object");

  std::unique_ptr<SafetensorsFile> file(new SafetensorsFile());
  file->path_ = path;
  file->data_start_ = 8 + header_size;
  const uint64_t data_size = mapping->size - file->data_start_;
  for (const auto& [name, value] : header->as_object()) {
    if (name == "__metadata__") {
      if (!value.is_object()) return bad("__metadata__ is not an object");
      for (const auto& [k, v] : value.as_object()) {
        if (!v.is_string()) return bad(absl::StrCat("__metadata__.", k, " is not a string"));
        file->metadata_[k] = v.as_string();
      }
      continue;
    }
    const core::Json* dtype = value.find("dtype");
    const core::Json* shape = value.find("shape");
    const core::Json* offsets = value.find("data_offsets");
    if (dtype == nullptr || !dtype->is_string() || shape == nullptr || !shape->is_array() ||
        offsets == nullptr || !offsets->is_array() || offsets->as_array().size() != 2) {
      return bad(
          absl::StrCat("tensor '", name, "' needs dtype, shape and data_offsets [begin, end]"));
    }
    SafetensorsEntry entry;
    entry.name = name;
    absl::StatusOr<at::ScalarType> st_dtype = safetensors_dtype(dtype->as_string());
    if (!st_dtype.ok())
      return bad(absl::StrCat("tensor '", name, "': ", st_dtype.status().message()));
    entry.dtype = *st_dtype;
    for (const core::Json& d : shape->as_array()) {
      if (!d.is_integer() || d.as_int() < 0) {
        return bad(absl::StrCat("tensor '", name, "' has an invalid shape"));
      }
      entry.shape.push_back(d.as_int());
    }
    const core::Json& b = offsets->as_array()[0];
    const core::Json& e = offsets->as_array()[1];
    if (!b.is_integer() || !e.is_integer() || b.as_int() < 0 || e.as_int() < b.as_int()) {
      return bad(absl::StrCat("tensor '", name, "' has invalid data_offsets"));
    }
    entry.begin = static_cast<uint64_t>(b.as_int());
    entry.end = static_cast<uint64_t>(e.as_int());
    if (entry.end > data_size) {
      return bad(absl::StrCat("tensor '", name, "' ends at byte ", entry.end,
                              " beyond the data section of ", data_size, " bytes (truncated?)"));
    }
    uint64_t expected;
    if (!checked_numel_bytes(entry.shape, c10::elementSize(entry.dtype), &expected) ||
        expected != entry.end - entry.begin) {
      return bad(absl::StrCat("tensor '", name, "' has ", entry.end - entry.begin,
                              " bytes but its dtype and shape need a different size"));
    }
    if (file->index_.count(name)) return bad(absl::StrCat("tensor '", name, "' listed twice"));
    file->index_[name] = file->entries_.size();
    file->entries_.push_back(std::move(entry));
  }
  // Tensors must not overlap.
  std::vector<const SafetensorsEntry*> by_offset;
  for (const auto& entry : file->entries_) by_offset.push_back(&entry);
  std::sort(by_offset.begin(), by_offset.end(),
            [](const auto* a, const auto* b) { return a->begin < b->begin; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    if (by_offset[i]->begin < by_offset[i - 1]->end) {
      return bad(absl::StrCat("tensors '", by_offset[i - 1]->name, "' and '", by_offset[i]->name,
                              "' overlap"));
    }
  }
  file->mapping_ = std::move(mapping);
  return file;
}

bool SafetensorsFile::contains(const std::string& name) const { return index_.count(name) > 0; }

absl::StatusOr<at::Tensor> SafetensorsFile::tensor(const std::string& name) const {
  auto it = index_.find(name);
  if (it == index_.end()) {
    return absl::NotFoundError(absl::StrCat("tensor '", name, "' not in '", path_, "'"));
  }
  const SafetensorsEntry& entry = entries_[it->second];
  char* data = static_cast<char*>(mapping_->data) + data_start_ + entry.begin;
  std::shared_ptr<Mapping> keep = mapping_;
  return at::from_blob(
      data, entry.shape, [keep](void*) mutable { keep.reset(); },
      at::TensorOptions().dtype(entry.dtype).device(at::kCPU));
}

absl::Status write_safetensors(const std::string& path,
                               const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                               const std::map<std::string, std::string>& metadata) {
  std::vector<std::pair<std::string, at::Tensor>> sorted = tensors;
  std::sort(sorted.begin(), sorted.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  core::Json header = core::Json::object();
  if (!metadata.empty()) {
    core::Json meta = core::Json::object();
    for (const auto& [k, v] : metadata) meta.set(k, core::Json(v));
    header.set("__metadata__", std::move(meta));
  }
  uint64_t offset = 0;
  for (size_t i = 0; i < sorted.size(); ++i) {
    auto& [name, tensor] = sorted[i];
    if (i > 0 && sorted[i - 1].first == name) {
      return absl::InvalidArgumentError(absl::StrCat("tensor '", name, "' given twice"));
    }
    absl::StatusOr<std::string> dtype = safetensors_dtype_name(tensor.scalar_type());
    if (!dtype.ok())
      return absl::InvalidArgumentError(absl::StrCat(name, ": ", dtype.status().message()));
    tensor = tensor.detach().to(at::kCPU).contiguous();
    core::Json shape = core::Json::array();
    for (int64_t d : tensor.sizes()) shape.push_back(core::Json(d));
    uint64_t bytes = tensor.numel() * tensor.element_size();
    core::Json entry = core::Json::object();
    entry.set("dtype", core::Json(*dtype));
    entry.set("shape", std::move(shape));
    entry.set("data_offsets",
              core::Json::array({core::Json(static_cast<int64_t>(offset)),
                                 core::Json(static_cast<int64_t>(offset + bytes))}));
    header.set(name, std::move(entry));
    offset += bytes;
  }
  std::string header_text = header.dump();
  header_text.append((8 - header_text.size() % 8) % 8, ' ');

  std::string tmp = path + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (f == nullptr) {
    return absl::UnavailableError(absl::StrCat("cannot write '", tmp, "': ", std::strerror(errno)));
  }
  bool ok = true;
  unsigned char size_bytes[8];
  uint64_t n = header_text.size();
  for (int i = 0; i < 8; ++i) size_bytes[i] = static_cast<unsigned char>((n >> (8 * i)) & 0xFF);
  ok = ok && std::fwrite(size_bytes, 1, 8, f) == 8;
  ok = ok && std::fwrite(header_text.data(), 1, header_text.size(), f) == header_text.size();
  for (const auto& [name, tensor] : sorted) {
    size_t bytes = tensor.numel() * tensor.element_size();
    ok = ok && std::fwrite(tensor.data_ptr(), 1, bytes, f) == bytes;
  }
  ok = (std::fclose(f) == 0) && ok;
  if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return absl::UnavailableError(
        absl::StrCat("writing '", path, "' failed: ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

}  // namespace flywheel::model
