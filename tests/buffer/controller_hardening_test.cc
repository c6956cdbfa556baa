// Regression tests of the controller service against hostile and careless clients (issue 10):
// acks that always parse, AcquireWork replies that never lose leases, shutdown with idle
// streams, and a fuzz test of the push stream.
#include <grpcpp/grpcpp.h>

#include <random>
#include <thread>

#include "absl/synchronization/notification.h"
#include "flywheel/v1/controller.grpc.pb.h"
#include "gmock/gmock.h"
#include "google/protobuf/stubs/logging.h"
#include "group_message.h"
#include "gtest/gtest.h"
#include "raw_push_client.h"
#include "server_push_stream.h"
#include "service_fixture.h"

namespace flywheel::buffer {
namespace {

using ::testing::HasSubstr;

std::string serialized(const v1::TrajectoryGroup& message) {
  google::protobuf::LogSilencer quiet;  // protobuf warns about strings that are not UTF-8
  return message.SerializeAsString();
}

// Every message the server sends parses as a PushAck with protobuf's generated classes.
std::vector<v1::PushAck> parse_acks(const std::vector<std::string>& raw) {
  std::vector<v1::PushAck> acks;
  for (size_t i = 0; i < raw.size(); ++i) {
    v1::PushAck ack;
    EXPECT_TRUE(ack.ParseFromString(raw[i])) << "ack " << i << " does not parse";
    acks.push_back(ack);
  }
  return acks;
}

TEST(ControllerHardeningTest, AcksParseWhateverGroupIdWasPushed) {
  Fixture f;
  auto work = f.local_client()->acquire_work(2);
  ASSERT_TRUE(work.ok());
  v1::TrajectoryGroup not_utf8 = to_message(group_for(work->leases(0).lease_id(), 0), "w");
  not_utf8.set_group_id("bad\xC3\x28id");
  v1::TrajectoryGroup long_id = to_message(group_for(work->leases(0).lease_id(), 0), "w");
  long_id.set_group_id(std::string(100000, 'x'));
  v1::TrajectoryGroup hostile_name = to_message(group_for(work->leases(0).lease_id(), 0), "w");
  (*hostile_name.mutable_trajectories(0)->mutable_reward_breakdown())[std::string(5000, 'k')] = NAN;
  v1::TrajectoryGroup good = to_message(group_for(work->leases(1).lease_id(), 0), "w");
  RawPushCall call(f.server->in_process_channel(), {serialized(not_utf8), serialized(long_id),
                                                    serialized(hostile_name), serialized(good)});
  ASSERT_TRUE(call.wait().ok());
  std::vector<v1::PushAck> acks = parse_acks(call.acks());
  ASSERT_EQ(acks.size(), 4u);
  EXPECT_EQ(acks[0].group_id(), "");  // not echoed: acks are matched by order
  EXPECT_EQ(acks[0].code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(acks[0].message(), HasSubstr("group_id"));
  EXPECT_EQ(acks[1].group_id(), "");
  EXPECT_EQ(acks[1].code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(acks[1].message(), HasSubstr("group_id: 100000 bytes exceed the limit of 256"));
  EXPECT_EQ(acks[2].code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_LE(acks[2].ByteSizeLong(), ServerPushStream::kMaxAckBytes);
  EXPECT_EQ(acks[3].group_id(), good.group_id());
  EXPECT_EQ(acks[3].outcome(), "accepted");
}

// Random and mutated messages, some valid: one parseable ack per message, in order, and the
// server keeps serving.
TEST(ControllerHardeningTest, FuzzedPushStreamsGetOneParseableAckPerMessage) {
  ControllerOptions o = core_options(/*prompts=*/400);
  o.groups_per_step = 400;
  o.capacity_groups = 400;
  Fixture f(o);
  auto client = f.local_client();
  std::mt19937_64 rng(7);
  auto uniform = [&](int64_t n) { return static_cast<int64_t>(rng() % static_cast<uint64_t>(n)); };
  int64_t accepted_expected_at_most = 0;
  for (int round = 0; round < 20; ++round) {
    auto work = client->acquire_work(16);
    ASSERT_TRUE(work.ok());
    std::vector<std::string> messages;
    for (const auto& lease : work->leases()) {
      v1::TrajectoryGroup message = to_message(group_for(lease.lease_id(), 0), "w");
      std::string bytes = serialized(message);
      switch (uniform(6)) {
        case 0:  // valid
          ++accepted_expected_at_most;
          break;
        case 1:  // flipped bytes
          for (int k = 0; k < 1 + uniform(4); ++k) bytes[uniform(bytes.size())] ^= 1 << uniform(8);
          ++accepted_expected_at_most;  // a flip may leave it valid
          break;
        case 2:  // truncated
          bytes.resize(uniform(bytes.size()));
          break;
        case 3: {  // random bytes inserted
          std::string noise(1 + uniform(64), '\0');
          for (char& c : noise) c = static_cast<char>(uniform(256));
          bytes.insert(uniform(bytes.size() + 1), noise);
          ++accepted_expected_at_most;
          break;
        }
        case 4: {  // a hostile group id
          std::string id(1 + uniform(600), '\0');
          for (char& c : id) c = static_cast<char>(uniform(256));
          message.set_group_id(id);
          bytes = serialized(message);
          ++accepted_expected_at_most;
          break;
        }
        default: {  // pure noise
          bytes.assign(uniform(300), '\0');
          for (char& c : bytes) c = static_cast<char>(uniform(256));
        }
      }
      messages.push_back(std::move(bytes));
    }
    RawPushCall call(f.server->in_process_channel(), messages);
    ASSERT_TRUE(call.wait().ok());
    std::vector<v1::PushAck> acks = parse_acks(call.acks());
    ASSERT_EQ(acks.size(), messages.size()) << "round " << round;
    for (const v1::PushAck& ack : acks) {
      EXPECT_LE(ack.ByteSizeLong(), ServerPushStream::kMaxAckBytes);
      if (ack.code() == 0) EXPECT_FALSE(ack.outcome().empty());
    }
  }
  EXPECT_LE(f.core->counters().accepted, accepted_expected_at_most);
  // Still serving.
  auto work = client->acquire_work(1);
  ASSERT_TRUE(work.ok());
  auto acks = client->push_groups({group_for(work->leases(0).lease_id(), 0, "after-fuzz")});
  ASSERT_TRUE(acks.ok());
  EXPECT_EQ((*acks)[0].outcome(), "accepted");
}

// A reply that would exceed max_message_bytes carries fewer leases; none is granted without
// being delivered.
TEST(ControllerHardeningTest, AcquireWorkGrantsOnlyWhatItsReplyCarries) {
  ControllerOptions o = core_options(/*prompts=*/2000);
  o.groups_per_step = 2000;
  o.capacity_groups = 2000;
  std::vector<std::string> lines;
  for (int i = 0; i < 2000; ++i) {
    lines.push_back("{\"prompt\": \"" + std::string(1000, 'a' + i % 26) + "\"}");
  }
  auto core = std::move(*ControllerCore::create(o));
  auto data = std::move(*PromptDataset::from_lines(lines, "test"));
  ControllerServerOptions so;
  so.max_message_bytes = 64 << 10;
  auto server = ControllerServer::start(core.get(), data.get(), so);
  ASSERT_TRUE(server.ok()) << server.status();
  ControllerClientOptions co;
  co.worker_id = "w";
  co.max_message_bytes = so.max_message_bytes;
  auto client = std::move(*ControllerClient::over((*server)->in_process_channel(), co));
  auto work = client->acquire_work(1000000);
  ASSERT_TRUE(work.ok()) << work.status();
  EXPECT_GT(work->leases_size(), 10);
  EXPECT_LT(work->leases_size(), 2000);
  EXPECT_LE(static_cast<int64_t>(work->ByteSizeLong()), so.max_message_bytes);
  EXPECT_EQ(core->in_flight(), work->leases_size());
  // A prompt line that can never fit refuses to start.
  lines.push_back("{\"prompt\": \"" + std::string(70000, 'z') + "\"}");
  auto too_long = std::move(*PromptDataset::from_lines(lines, "test"));
  o.num_prompts = too_long->size();
  auto core2 = std::move(*ControllerCore::create(o));
  auto refused = ControllerServer::start(core2.get(), too_long.get(), so);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("does not fit"));
}

// shutdown() ends idle push streams at once instead of waiting out its deadline (an hour here).
TEST(ControllerHardeningTest, ShutdownClosesIdlePushStreamsAtOnce) {
  ControllerServerOptions so;
  so.shutdown_timeout_s = 3600;
  Fixture f(so);
  auto stub = v1::Controller::NewStub(grpc::CreateChannel(
      "127.0.0.1:" + std::to_string(f.server->port()), grpc::InsecureChannelCredentials()));
  auto work = f.local_client()->acquire_work(1);
  ASSERT_TRUE(work.ok());
  grpc::ClientContext context;
  auto stream = stub->PushGroups(&context);
  // One group and its ack: the stream is live on the server, then idle (waiting to read).
  ASSERT_TRUE(stream->Write(to_message(group_for(work->leases(0).lease_id(), 0), "w")));
  v1::PushAck ack;
  ASSERT_TRUE(stream->Read(&ack));
  EXPECT_EQ(ack.outcome(), "accepted");
  absl::Notification stopped;
  std::thread stopper([&] {
    f.server->shutdown();
    stopped.Notify();
  });
  // A hang detector, not a timing assertion: without the fix this waits an hour.
  const bool prompt = stopped.WaitForNotificationWithTimeout(absl::Seconds(60));
  if (!prompt) context.TryCancel();  // unblocks the server so that the test can end
  stopper.join();
  EXPECT_TRUE(prompt) << "shutdown waited for an idle push stream";
  EXPECT_FALSE(stream->Read(&ack));
  EXPECT_FALSE(stream->Finish().ok());
}

}  // namespace
}  // namespace flywheel::buffer
