#include "flywheel/buffer/weight_store.h"

#include <algorithm>
#include <cstring>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "crc32c.h"  // flywheel_core's table CRC: the fallback without a crc32 instruction

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace flywheel::buffer {
namespace {

constexpr uint32_t kPolynomial = 0x82F63B78u;  // reversed Castagnoli polynomial

// GF(2) 32x32 matrices acting on a CRC register (zlib's crc32_combine).
uint32_t gf2_times(const uint32_t* mat, uint32_t vec) {
  uint32_t sum = 0;
  for (; vec != 0; vec >>= 1, ++mat) {
    if (vec & 1u) sum ^= *mat;
  }
  return sum;
}

void gf2_square(uint32_t* square, const uint32_t* mat) {
  for (int n = 0; n < 32; ++n) square[n] = gf2_times(mat, mat[n]);
}

#if defined(__x86_64__)
bool have_crc_instruction() {
  static const bool have = __builtin_cpu_supports("sse4.2");
  return have;
}

// The register (not inverted) after `size` bytes, starting from `state`.
__attribute__((target("sse4.2"))) uint32_t crc32c_hw(uint32_t state, const unsigned char* p,
                                                     size_t size) {
  uint64_t c = state;
  for (; size > 0 && (reinterpret_cast<uintptr_t>(p) & 7u) != 0; --size) {
    c = _mm_crc32_u8(static_cast<uint32_t>(c), *p++);
  }
  for (; size >= 32; size -= 32, p += 32) {
    uint64_t v[4];
    std::memcpy(v, p, sizeof(v));
    c = _mm_crc32_u64(c, v[0]);
    c = _mm_crc32_u64(c, v[1]);
    c = _mm_crc32_u64(c, v[2]);
    c = _mm_crc32_u64(c, v[3]);
  }
  for (; size >= 8; size -= 8, p += 8) {
    uint64_t v;
    std::memcpy(&v, p, sizeof(v));
    c = _mm_crc32_u64(c, v);
  }
  for (; size > 0; --size) c = _mm_crc32_u8(static_cast<uint32_t>(c), *p++);
  return static_cast<uint32_t>(c);
}
#endif

}  // namespace

uint32_t crc32c_combine(uint32_t crc_a, uint32_t crc_b, uint64_t size_b) {
  if (size_b == 0) return crc_a;
  uint32_t even[32];  // operator for an even power of two zero bits
  uint32_t odd[32];   // and for an odd one
  odd[0] = kPolynomial;
  uint32_t row = 1;
  for (int n = 1; n < 32; ++n, row <<= 1) odd[n] = row;
  gf2_square(even, odd);  // 2 zero bits
  gf2_square(odd, even);  // 4 zero bits
  // Applies size_b zero bytes to crc_a, one bit of size_b at a time (the first square gives 8).
  do {
    gf2_square(even, odd);
    if (size_b & 1u) crc_a = gf2_times(even, crc_a);
    size_b >>= 1;
    if (size_b == 0) break;
    gf2_square(odd, even);
    if (size_b & 1u) crc_a = gf2_times(odd, crc_a);
    size_b >>= 1;
  } while (size_b != 0);
  return crc_a ^ crc_b;
}

uint32_t crc32c_extend(uint32_t crc, const void* data, size_t size) {
#if defined(__x86_64__)
  if (have_crc_instruction()) {
    return ~crc32c_hw(~crc, static_cast<const unsigned char*>(data), size);
  }
#endif
  return crc32c_combine(crc, core::crc32c(data, size), size);
}

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

WeightStore::WeightStore(int keep_versions)
    : keep_versions_(static_cast<size_t>(std::max(keep_versions, 1))) {}

absl::Status WeightStore::publish(PublishedWeights weights) {
  if (weights.bucket_bytes < 1) return absl::InvalidArgumentError("bucket_bytes must be >= 1");
  if (absl::Status s = validate_tensors(weights.tensors, weights.payload.size()); !s.ok()) {
    return s;
  }
  {
    absl::MutexLock lock(&mu_);
    if (weights.version <= latest_version_) {
      return absl::InvalidArgumentError(absl::StrCat("version ", weights.version,
                                                     " is not newer than the latest published (",
                                                     latest_version_, ")"));
    }
  }
  // The checksums are computed outside the lock (~50 ms for 400 MB): one pass over the buckets,
  // the payload's from theirs.
  const std::string& payload = weights.payload;
  weights.bucket_crc32c.clear();
  weights.bucket_crc32c.reserve(payload.size() / weights.bucket_bytes + 1);
  uint32_t crc = 0;
  for (uint64_t at = 0; at < payload.size(); at += weights.bucket_bytes) {
    const uint64_t n = std::min<uint64_t>(weights.bucket_bytes, payload.size() - at);
    const uint32_t bucket = crc32c_extend(0, payload.data() + at, n);
    weights.bucket_crc32c.push_back(bucket);
    crc = crc32c_combine(crc, bucket, n);
  }
  weights.crc32c = crc;
  auto shared = std::make_shared<const PublishedWeights>(std::move(weights));
  std::shared_ptr<const PublishedWeights> dropped;  // freed outside the lock
  absl::MutexLock lock(&mu_);
  if (shared->version <= latest_version_) {  // a concurrent publish won
    return absl::InvalidArgumentError(absl::StrCat("version ", shared->version,
                                                   " is not newer than the latest published (",
                                                   latest_version_, ")"));
  }
  latest_version_ = shared->version;
  published_crcs_[shared->version] = shared->crc32c;
  while (published_crcs_.size() > kRememberedVersions)
    published_crcs_.erase(published_crcs_.begin());
  held_.push_back(std::move(shared));
  if (held_.size() > keep_versions_) {
    dropped = std::move(held_.front());
    held_.erase(held_.begin());
  }
  return absl::OkStatus();
}

std::shared_ptr<const PublishedWeights> WeightStore::latest() const {
  absl::MutexLock lock(&mu_);
  return held_.empty() ? nullptr : held_.back();
}

std::shared_ptr<const PublishedWeights> WeightStore::get(int64_t version) const {
  absl::MutexLock lock(&mu_);
  for (const auto& w : held_) {
    if (w->version == version) return w;
  }
  return nullptr;
}

int64_t WeightStore::latest_version() const {
  absl::MutexLock lock(&mu_);
  return latest_version_;
}

absl::Status WeightStore::acknowledge(const std::string& worker, int64_t version, uint32_t crc32c) {
  absl::MutexLock lock(&mu_);
  auto it = published_crcs_.find(version);
  if (it == published_crcs_.end()) {
    ++counters_.rejected;
    return absl::FailedPreconditionError(
        version > latest_version_
            ? absl::StrCat("version ", version, " was not published (the latest is ",
                           latest_version_, ")")
            : absl::StrCat("version ", version, " was never published or is too old to check"));
  }
  if (it->second != crc32c) {
    ++counters_.mismatches;
    return absl::DataLossError(absl::StrCat("version ", version, ": crc32c ", crc32c,
                                            " differs from the published ", it->second));
  }
  ++counters_.acks;
  worker_versions_[worker] = version;
  return absl::OkStatus();
}

WeightStore::AckCounters WeightStore::ack_counters() const {
  absl::MutexLock lock(&mu_);
  return counters_;
}

std::map<std::string, int64_t> WeightStore::worker_versions() const {
  absl::MutexLock lock(&mu_);
  return worker_versions_;
}

}  // namespace flywheel::buffer
