// The real `flywheel buffer` binary: a lease held across a restart from the snapshot, and the
// memory one push stream can make it hold when its client never reads the acks.
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <thread>

#include "buffer_process.h"
#include "flywheel/buffer/service/controller_client.h"
#include "gmock/gmock.h"
#include "group_message.h"
#include "gtest/gtest.h"
#include "raw_push_client.h"
#include "server_push_stream.h"
#include "service_fixture.h"

namespace flywheel::buffer {
namespace {

std::unique_ptr<ControllerClient> client_for(const BufferProcess& server) {
  ControllerClientOptions o;
  o.address = server.address();
  o.worker_id = "w";
  auto client = ControllerClient::connect(o);
  EXPECT_TRUE(client.ok()) << client.status();
  return std::move(*client);
}

// A lease granted before SIGTERM is still valid after a restart from the snapshot: restored
// deadlines count from the restart on the server's own clock (they were given 0 and expired).
TEST(BufferProcessTest, ALeaseHeldAcrossARestartIsStillValid) {
  const std::string dir = BufferProcess::make_job("restart", /*prompts=*/4, /*group_size=*/2);
  uint64_t lease_id = 0;
  {
    BufferProcess server(dir);
    ASSERT_GT(server.port(), 0);
    auto work = client_for(server)->acquire_work(1);
    ASSERT_TRUE(work.ok()) << work.status();
    ASSERT_EQ(work->leases_size(), 1);
    lease_id = work->leases(0).lease_id();
    ASSERT_EQ(server.stop(), 0);
  }
  BufferProcess restarted(dir);
  ASSERT_GT(restarted.port(), 0);
  auto client = client_for(restarted);
  auto status = client->status();
  ASSERT_TRUE(status.ok());
  EXPECT_EQ(status->in_flight(), 1);
  auto acks = client->push_groups({group_for(lease_id, 0, "held-across-restart")});
  ASSERT_TRUE(acks.ok()) << acks.status();
  EXPECT_EQ((*acks)[0].code(), 0) << (*acks)[0].message();
  EXPECT_EQ((*acks)[0].outcome(), "accepted");
  EXPECT_EQ(restarted.stop(), 0);
}

// A client that streams groups with 200 KB ids and never reads an ack, over a connection whose
// receive window it keeps small: the server stops reading once kMaxUnacked acks are unwritten,
// so its memory grows by at most the documented bound (docs/controller.md: the transport's
// memory quota plus the groups in process) instead of by every message (+100 MiB for 500
// before).
TEST(BufferProcessTest, AClientThatNeverReadsAcksCannotGrowTheServersMemory) {
  const int64_t message_bytes = 200 << 10;
  const int64_t transport_bytes = 16 << 20;
  const std::string dir = BufferProcess::make_job(
      "slow_reader", /*prompts=*/4, /*group_size=*/2,
      "buffer: {server: {transport_memory_bytes: " + std::to_string(transport_bytes) + "}}\n");
  // Blocks of 64 KiB or more are mmapped and unmapped when freed, so that the resident size
  // follows what the server holds rather than what malloc keeps after frees.
  BufferProcess server(dir, {"MALLOC_MMAP_THRESHOLD_=65536"});
  ASSERT_GT(server.port(), 0);
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, 16 << 10);
  args.SetInt(GRPC_ARG_HTTP2_BDP_PROBE, 0);
  auto channel =
      grpc::CreateCustomChannel(server.address(), grpc::InsecureChannelCredentials(), args);
  {  // warm up the server's allocator and gRPC before the baseline
    RawPushCall warm(channel, std::vector<std::string>(20, "\x0a\x01x"));
    ASSERT_TRUE(warm.wait().ok());
  }
  const int64_t baseline = server.rss_bytes();
  ASSERT_GT(baseline, 0);
  v1::TrajectoryGroup message = to_message(group_for(/*lease_id=*/1, 0));
  std::vector<std::string> messages;
  for (int i = 0; i < 600; ++i) {
    message.set_group_id(std::string(message_bytes, 'a' + i % 26));
    messages.push_back(message.SerializeAsString());
  }
  RawPushOptions never_read;
  never_read.read_acks = false;
  RawPushCall call(channel, messages, never_read);
  // Wait until the client's writes stall (or all went out): a predicate polled, not a sleep
  // that decides the outcome.
  int64_t last = -1;
  auto last_progress = std::chrono::steady_clock::now();
  while (!call.done() && call.written() < static_cast<int64_t>(messages.size()) &&
         std::chrono::steady_clock::now() - last_progress < std::chrono::seconds(3)) {
    if (call.written() != last) {
      last = call.written();
      last_progress = std::chrono::steady_clock::now();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  const int64_t grown = server.rss_bytes() - baseline;
  // The transport's quota, plus what the stream holds itself (docs/controller.md, "Memory").
  const int64_t bound =
      transport_bytes + 2 * ServerPushStream::kMaxInProcess * message_bytes +
      ServerPushStream::kMaxUnacked * static_cast<int64_t>(ServerPushStream::kMaxAckBytes);
  const int64_t slack = 8 << 20;  // allocator and gRPC bookkeeping
  std::cerr << "client wrote " << call.written() << " of " << messages.size()
            << " messages; server RSS grew by " << grown / 1024 << " KiB (bound " << bound / 1024
            << " KiB + " << slack / 1024 << " KiB slack)\n";
  EXPECT_LE(grown, bound + slack);
  call.cancel();
  call.wait();
  // The server is unharmed.
  auto status = client_for(server)->status();
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(server.stop(), 0);
}

}  // namespace
}  // namespace flywheel::buffer
