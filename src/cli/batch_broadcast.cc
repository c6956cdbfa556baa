#include "batch_broadcast.h"

#include <cstring>

#include <google/protobuf/io/zero_copy_stream_impl_lite.h>

#include "absl/strings/str_cat.h"
#include "learner_job.h"
#include "wire_codec.h"

namespace flywheel::cli {
namespace {

void put_u64(std::string* out, uint64_t v) { out->append(reinterpret_cast<const char*>(&v), 8); }

bool get_u64(const std::string& in, size_t* at, uint64_t* v) {
  if (*at + 8 > in.size()) return false;
  std::memcpy(v, in.data() + *at, 8);
  *at += 8;
  return true;
}

}  // namespace

absl::StatusOr<BroadcastBatch> broadcast_batch(comm::Communicator& comm,
                                               const BroadcastBatch& batch) {
  std::string bytes;
  if (comm.rank() == 0) {
    put_u64(&bytes, batch.tag.size());
    bytes += batch.tag;
    put_u64(&bytes, batch.groups.size());
    for (const buffer::TrajectoryGroup& group : batch.groups) {
      const size_t size = buffer::encoded_size(group, group.worker_id);
      put_u64(&bytes, size);
      const size_t at = bytes.size();
      bytes.resize(at + size);
      buffer::encode_group(group, group.worker_id, reinterpret_cast<uint8_t*>(&bytes[at]));
    }
  }
  const std::string all = comm::broadcast_string(comm, bytes);
  BroadcastBatch out;
  size_t at = 0;
  uint64_t size = 0, count = 0;
  auto truncated = [] { return absl::DataLossError("the broadcast batch is truncated"); };
  if (!get_u64(all, &at, &size) || at + size > all.size()) return truncated();
  out.tag = all.substr(at, size);
  at += size;
  if (!get_u64(all, &at, &count)) return truncated();
  for (uint64_t i = 0; i < count; ++i) {
    if (!get_u64(all, &at, &size) || at + size > all.size()) return truncated();
    google::protobuf::io::ArrayInputStream input(all.data() + at, static_cast<int>(size));
    buffer::TrajectoryGroup group;
    absl::Status s = buffer::decode_group(&input, size, {}, &group);
    if (!s.ok()) return absl::DataLossError(absl::StrCat("broadcast group ", i, ": ", s.message()));
    out.groups.push_back(std::move(group));
    at += size;
  }
  return out;
}

}  // namespace flywheel::cli
