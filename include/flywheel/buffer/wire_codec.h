// flywheel.v1.TrajectoryGroup read from and written to the wire without a protobuf message in
// between. The bytes are exactly protobuf's (any client with the generated classes reads and
// writes them), but a group moves between the wire and the core's vectors in one copy: parsing
// into v1::TrajectoryGroup and then converting costs a second copy of every token, and at
// 1.7 MB per large group that was a third of the server's time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "flywheel/buffer/trajectory.h"

namespace google::protobuf::io {
class ZeroCopyInputStream;
}  // namespace google::protobuf::io

namespace flywheel::buffer {

struct DecodeLimits {
  // More trajectories than this is an error found while reading, before they are allocated
  // (a message of empty trajectories would otherwise cost ~100 bytes of memory per wire byte).
  int64_t max_trajectories = 1 << 16;
};

// Reads `size` bytes of one serialized flywheel.v1.TrajectoryGroup from `input` into `group`.
// Accepts what protobuf's parser accepts: fields in any order, repeated fields packed or not
// and split across occurrences, unknown fields (skipped), last-one-wins scalars.
// InvalidArgument naming the field for malformed bytes, truncation, strings that are not UTF-8,
// or too many trajectories; `group` then holds what was read before the error (the group_id,
// which comes first, for the acknowledgement). Validation of the values is validate_group()'s.
absl::Status decode_group(google::protobuf::io::ZeroCopyInputStream* input, size_t size,
                          const DecodeLimits& limits, TrajectoryGroup* group);

// The serialized size of `group` with its worker_id replaced by `worker_id`.
size_t encoded_size(const TrajectoryGroup& group, absl::string_view worker_id);

// Writes exactly encoded_size(group, worker_id) bytes to `out`: the bytes protobuf's
// deterministic serialization of the equivalent v1::TrajectoryGroup produces.
void encode_group(const TrajectoryGroup& group, absl::string_view worker_id, uint8_t* out);

// A piece of an encoded group: `size` bytes at `external` (a token array of the group, used in
// place) or, when `external` is null, at `offset` in the scratch buffer.
struct WireSegment {
  const uint8_t* external = nullptr;
  size_t offset = 0;
  size_t size = 0;
};

// The same bytes as encode_group() without copying the token arrays: tags, lengths, scalars
// and strings are written to `scratch` (replaced), and arrays of 4 KiB or more are referenced
// where they are (smaller ones are copied: one slice is cheaper for gRPC than many small
// ones). The segments are valid while `group` and `scratch` are unchanged.
std::vector<WireSegment> encode_group_segments(const TrajectoryGroup& group,
                                               absl::string_view worker_id, std::string* scratch);

}  // namespace flywheel::buffer
