#include "flywheel/trainer/batch_source.h"

#include <cstring>
#include <iterator>
#include <utility>

#include <google/protobuf/io/zero_copy_stream_impl_lite.h>

#include "absl/strings/str_cat.h"
#include "flywheel/buffer/wire_codec.h"

namespace flywheel::trainer {
namespace {

void put_u64(std::string* out, uint64_t v) { out->append(reinterpret_cast<const char*>(&v), 8); }

bool get_u64(const std::string& in, size_t* at, uint64_t* v) {
  if (*at + 8 > in.size()) return false;
  std::memcpy(v, in.data() + *at, 8);
  *at += 8;
  return true;
}

constexpr TrainingBatch::Kind kKinds[] = {
    TrainingBatch::Kind::kGroups, TrainingBatch::Kind::kWait, TrainingBatch::Kind::kStop,
    TrainingBatch::Kind::kExhausted, TrainingBatch::Kind::kNoProgress};

}  // namespace

const char* batch_kind_name(TrainingBatch::Kind kind) {
  switch (kind) {
    case TrainingBatch::Kind::kGroups:
      return "groups";
    case TrainingBatch::Kind::kWait:
      return "wait";
    case TrainingBatch::Kind::kStop:
      return "stop";
    case TrainingBatch::Kind::kExhausted:
      return "exhausted";
    case TrainingBatch::Kind::kNoProgress:
      return "no_progress";
  }
  return "unknown";
}

absl::StatusOr<TrainingBatch> BroadcastBatchSource::next(int64_t version,
                                                         const StopRequested& stop) {
  TrainingBatch batch;
  if (comm_->rank() == 0) {
    absl::StatusOr<TrainingBatch> from_root = root_->next(version, stop);
    // An error of rank 0's source ends rank 0 (the job aborts the others).
    if (!from_root.ok()) return from_root.status();
    batch = std::move(*from_root);
  }
  return broadcast_batch(*comm_, batch);
}

absl::StatusOr<TrainingBatch> broadcast_batch(comm::Communicator& comm,
                                              const TrainingBatch& batch) {
  std::string bytes;
  if (comm.rank() == 0) {
    put_u64(&bytes, static_cast<uint64_t>(batch.kind));
    put_u64(&bytes, batch.why.size());
    bytes += batch.why;
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
  TrainingBatch out;
  size_t at = 0;
  uint64_t kind = 0, size = 0, count = 0;
  auto truncated = [] { return absl::DataLossError("the broadcast batch is truncated"); };
  if (!get_u64(all, &at, &kind)) return truncated();
  if (kind >= std::size(kKinds)) {
    return absl::DataLossError(absl::StrCat("the broadcast batch has an unknown kind ", kind));
  }
  out.kind = kKinds[kind];
  if (!get_u64(all, &at, &size) || at + size > all.size()) return truncated();
  out.why = all.substr(at, size);
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

}  // namespace flywheel::trainer
