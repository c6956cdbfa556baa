// HTTP/2 settings the controller's server and client share.
#pragma once

#include <grpc/grpc.h>

#include <algorithm>

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
  // The server accepts the clients' keepalive pings (client_keepalive_args) however often they
  // come: workers are the controller's own, and a refused ping would close their connection.
  set(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 100);
  set(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0);
}

// A call on a connection whose peer stops answering (a stopped or frozen controller, a link
// that went down: TCP alone notices neither for minutes) fails with UNAVAILABLE after
// 2 x `deadline_s` instead of waiting for its own deadline: the client pings the server every
// `deadline_s` while calls run and closes the connection when a ping is not answered within
// `deadline_s`. That bounds the weight stream, whose deadline is the much longer
// weight_sync.timeout_s.
template <typename Setter>
void client_keepalive_args(double deadline_s, Setter&& set) {
  const int ms = static_cast<int>(std::max(1.0, deadline_s) * 1000);
  set(GRPC_ARG_KEEPALIVE_TIME_MS, ms);
  set(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, ms);
  set(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
}

}  // namespace flywheel::buffer
