// Weight publication over MPI or NCCL (weight_sync.transport: mpi | nccl) for jobs whose rollout
// workers are ranks of the learners' MPMD mpirun: learner rank 0 (the channel's rank 0) sends
// every published version to all other ranks of the channel.
//
//   root:     channel.send(*store.latest());  ...  channel.close();
//   receiver: while (!channel.closed())
//               if (*channel.receive(&weights) == Received::kWeights) apply(weights);
//
// A version travels as a header (version, payload size, bucket size, the payload's CRC-32C and
// the manifest: names, dtypes, shapes, byte ranges) sent point to point over `control`, then the
// payload in buckets of bucket_bytes broadcast over `data` (the control communicator itself, or a
// NCCL communicator of the same ranks, through a device staging buffer). Receivers poll for the
// header without blocking, so a worker waits for the next version as long as the learners take,
// while every bucket broadcast runs under the communicators' deadline (a rank that stops
// responding ends the job with a message, never a hang). A receiver checks the manifest and the
// payload's CRC-32C before handing the version out: DataLoss or InvalidArgument otherwise, and
// the channel stays usable for the next version.
//
// Thread safety: one thread uses a channel (on a rollout worker, its weight fetcher thread).
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "flywheel/comm/communicator.h"
#include "flywheel/comm/mpi_communicator.h"
#include "flywheel/core/published_weights.h"

namespace flywheel::comm {

class WeightChannel {
 public:
  enum class Received { kNothing, kWeights, kClosed };

  // `control` and `data` have the same ranks in the same order; rank 0 sends. Not owned.
  WeightChannel(comm::MpiCommunicator* control, comm::Communicator* data);

  // Root: sends `weights` (its crc32c as published) to every receiver; collective over `data`.
  void send(const core::PublishedWeights& weights);
  // Root: tells every receiver that no more versions come.
  void close();

  // Receiver: kNothing when no version was announced since the last call (returns at once);
  // kWeights with the next version in `into` (its payload's memory reused), manifest and
  // checksum verified; kClosed once the root closed the channel. DataLoss (checksum) or
  // InvalidArgument (manifest) for a version that arrived damaged: nothing in `into` is usable,
  // and the next version is received as usual.
  absl::StatusOr<Received> receive(core::PublishedWeights* into);
  bool closed() const { return closed_; }

  int rank() const { return control_->rank(); }
  int size() const { return control_->size(); }

  // The header of a version, as sent: exposed for its tests.
  static std::string encode_header(const core::PublishedWeights& weights);
  // Decodes a header into `out` (version, bucket_bytes, crc32c, tensors; payload left as is)
  // and its payload size. InvalidArgument naming what is malformed.
  static absl::StatusOr<uint64_t> decode_header(const std::string& bytes,
                                                core::PublishedWeights* out);

 private:
  // Broadcasts `bytes` bytes at `data` in buckets (root: from it; receivers: into it).
  void move_payload(char* data, uint64_t bytes, uint64_t bucket_bytes);

  comm::MpiCommunicator* control_;
  comm::Communicator* data_;
  bool closed_ = false;
};

}  // namespace flywheel::comm
