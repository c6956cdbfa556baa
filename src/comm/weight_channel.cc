#include "flywheel/comm/weight_channel.h"

#include <algorithm>
#include <cstring>
#include <optional>

#include <ATen/ATen.h>

#include "absl/strings/str_cat.h"
#include "flywheel/core/crc32c.h"
#include "flywheel/core/status_macros.h"

namespace flywheel::comm {
namespace {

constexpr int kHeaderTag = 7301;
constexpr char kMagic[4] = {'F', 'W', 'W', '1'};
constexpr uint32_t kKindWeights = 1, kKindClose = 2;
// One broadcast call moves at most this many bytes (MPI counts are ints).
constexpr uint64_t kMaxChunk = 1ull << 30;
constexpr uint32_t kMaxString = 4096, kMaxDims = 16;

// The fixed part of a header; the manifest's tensors follow it.
struct Prefix {
  char magic[4];
  uint32_t kind;
  int64_t version;
  uint64_t payload_bytes;
  uint64_t bucket_bytes;
  uint32_t crc32c;
  uint32_t tensors;
};

template <typename T>
void put(std::string& out, const T& value) {
  out.append(reinterpret_cast<const char*>(&value), sizeof(T));
}

void put_string(std::string& out, const std::string& s) {
  put(out, static_cast<uint32_t>(s.size()));
  out += s;
}

// Reads a header's fields in order; every read is bounds-checked.
class Reader {
 public:
  explicit Reader(const std::string& bytes) : bytes_(bytes) {}
  template <typename T>
  bool get(T* value) {
    if (bytes_.size() - at_ < sizeof(T)) return false;
    std::memcpy(value, bytes_.data() + at_, sizeof(T));
    at_ += sizeof(T);
    return true;
  }
  bool get_string(std::string* s) {
    uint32_t n = 0;
    if (!get(&n) || n > kMaxString || bytes_.size() - at_ < n) return false;
    s->assign(bytes_.data() + at_, n);
    at_ += n;
    return true;
  }
  bool done() const { return at_ == bytes_.size(); }

 private:
  const std::string& bytes_;
  size_t at_ = 0;
};

absl::StatusOr<Prefix> decode_prefix(const std::string& bytes) {
  Prefix p;
  Reader reader(bytes);
  if (!reader.get(&p) || std::memcmp(p.magic, kMagic, sizeof(kMagic)) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("weight channel: a header of ", bytes.size(), " bytes is not one"));
  }
  if (p.kind != kKindWeights && p.kind != kKindClose) {
    return absl::InvalidArgumentError(absl::StrCat("weight channel: unknown kind ", p.kind));
  }
  if (p.kind == kKindWeights && p.bucket_bytes == 0) {
    return absl::InvalidArgumentError("weight channel: bucket size 0");
  }
  return p;
}

}  // namespace

WeightChannel::WeightChannel(comm::MpiCommunicator* control, comm::Communicator* data)
    : control_(control), data_(data) {
  TORCH_CHECK(control->size() == data->size() && control->rank() == data->rank(),
              "weight channel: the control and data communicators differ in ranks");
}

std::string WeightChannel::encode_header(const core::PublishedWeights& weights) {
  Prefix p;
  std::memcpy(p.magic, kMagic, sizeof(kMagic));
  p.kind = kKindWeights;
  p.version = weights.version;
  p.payload_bytes = weights.payload.size();
  p.bucket_bytes = weights.bucket_bytes;
  p.crc32c = weights.crc32c;
  p.tensors = static_cast<uint32_t>(weights.tensors.size());
  std::string out;
  put(out, p);
  for (const core::WeightTensor& t : weights.tensors) {
    put_string(out, t.name);
    put_string(out, t.dtype);
    put(out, static_cast<uint32_t>(t.shape.size()));
    for (int64_t d : t.shape) put(out, d);
    put(out, t.offset);
    put(out, t.size);
  }
  return out;
}

absl::StatusOr<uint64_t> WeightChannel::decode_header(const std::string& bytes,
                                                      core::PublishedWeights* out) {
  FLYWHEEL_ASSIGN_OR_RETURN(Prefix p, decode_prefix(bytes));
  if (p.kind != kKindWeights) return absl::InvalidArgumentError("weight channel: not weights");
  Reader reader(bytes);
  Prefix skipped;
  reader.get(&skipped);
  out->version = p.version;
  out->bucket_bytes = p.bucket_bytes;
  out->crc32c = p.crc32c;
  out->bucket_crc32c.clear();
  out->tensors.clear();
  for (uint32_t i = 0; i < p.tensors; ++i) {
    core::WeightTensor t;
    uint32_t dims = 0;
    bool ok = reader.get_string(&t.name) && reader.get_string(&t.dtype) && reader.get(&dims) &&
              dims <= kMaxDims;
    for (uint32_t d = 0; ok && d < dims; ++d) {
      int64_t size = 0;
      ok = reader.get(&size);
      t.shape.push_back(size);
    }
    if (!(ok && reader.get(&t.offset) && reader.get(&t.size))) {
      return absl::InvalidArgumentError(
          absl::StrCat("weights v", p.version, ": manifest entry ", i, " is malformed"));
    }
    out->tensors.push_back(std::move(t));
  }
  if (!reader.done()) {
    return absl::InvalidArgumentError(
        absl::StrCat("weights v", p.version, ": bytes after the manifest"));
  }
  return p.payload_bytes;
}

void WeightChannel::move_payload(char* data, uint64_t bytes, uint64_t bucket_bytes) {
  const uint64_t chunk = std::min(bucket_bytes, kMaxChunk);
  const bool root = control_->rank() == 0;
  const bool staged = !data_->device().is_cpu();
  at::Tensor staging;
  if (staged && bytes > 0) {
    staging = at::empty({static_cast<int64_t>(std::min(chunk, bytes))},
                        at::TensorOptions().dtype(at::kByte).device(data_->device()));
  }
  for (uint64_t at = 0; at < bytes; at += chunk) {
    const int64_t n = static_cast<int64_t>(std::min(chunk, bytes - at));
    at::Tensor host = at::from_blob(data + at, {n}, at::TensorOptions().dtype(at::kByte));
    if (!staged) {
      data_->broadcast(host, 0);
      continue;
    }
    at::Tensor device = staging.narrow(0, 0, n);
    if (root) device.copy_(host);
    data_->broadcast(device, 0);
    if (!root) host.copy_(device);
  }
}

void WeightChannel::send(const core::PublishedWeights& weights) {
  TORCH_CHECK(control_->rank() == 0, "weight channel: only rank 0 sends");
  const std::string header = encode_header(weights);
  for (int r = 1; r < control_->size(); ++r) control_->send_bytes(r, kHeaderTag, header);
  // The root only reads the payload.
  move_payload(const_cast<char*>(weights.payload.data()), weights.payload.size(),
               weights.bucket_bytes);
}

void WeightChannel::close() {
  TORCH_CHECK(control_->rank() == 0, "weight channel: only rank 0 closes");
  if (closed_) return;
  Prefix p{};
  std::memcpy(p.magic, kMagic, sizeof(kMagic));
  p.kind = kKindClose;
  std::string header;
  put(header, p);
  for (int r = 1; r < control_->size(); ++r) control_->send_bytes(r, kHeaderTag, header);
  closed_ = true;
}

absl::StatusOr<WeightChannel::Received> WeightChannel::receive(core::PublishedWeights* into) {
  TORCH_CHECK(control_->rank() != 0, "weight channel: rank 0 sends");
  if (closed_) return Received::kClosed;
  std::optional<std::string> header = control_->try_receive_bytes(0, kHeaderTag);
  if (!header) return Received::kNothing;
  absl::StatusOr<Prefix> prefix = decode_prefix(*header);
  if (!prefix.ok()) {
    // Without the sizes this rank cannot take part in the buckets' broadcasts.
    return absl::InternalError(absl::StrCat(prefix.status().message(), " (from learner rank 0)"));
  }
  if (prefix->kind == kKindClose) {
    closed_ = true;
    return Received::kClosed;
  }
  // The payload first, whatever the manifest says: the root broadcasts every bucket.
  into->payload.resize(prefix->payload_bytes);
  move_payload(into->payload.data(), prefix->payload_bytes, prefix->bucket_bytes);
  FLYWHEEL_ASSIGN_OR_RETURN(uint64_t decoded, decode_header(*header, into));
  absl::Status valid = core::validate_tensors(into->tensors, into->payload.size());
  if (!valid.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("weights v", into->version, ": ", valid.message()));
  }
  const uint32_t crc = core::crc32c_extend(0, into->payload.data(), into->payload.size());
  if (crc != into->crc32c) {
    return absl::DataLossError(absl::StrCat("weights v", into->version,
                                            ": the payload's CRC-32C is ", crc, ", published ",
                                            into->crc32c));
  }
  return Received::kWeights;
}

}  // namespace flywheel::comm
