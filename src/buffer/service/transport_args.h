// HTTP/2 settings the controller's server and client share.
#pragma once

#include <grpc/grpc.h>

namespace flywheel::buffer {

// Each push stream may run 8 MiB ahead of the server's reads (gRPC's default is 64 KiB, which
// left the client waiting on window updates for most of every 1.7 MB group), in frames of up
// to 16 MiB (the HTTP/2 maximum) rather than 16 KiB. Measured with buffer_bench: large-group
// throughput ~1.6 -> ~2.3 GB/s together with the one-copy codec.
constexpr int kStreamWindowBytes = 8 << 20;
constexpr int kMaxFrameBytes = (1 << 24) - 1;

// Applies the settings through `set(name, value)` (ServerBuilder::AddChannelArgument or
// ChannelArguments::SetInt).
template <typename Setter>
void set_transport_args(Setter&& set) {
  set(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, kStreamWindowBytes);
  set(GRPC_ARG_HTTP2_MAX_FRAME_SIZE, kMaxFrameBytes);
}

}  // namespace flywheel::buffer
