#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <thread>

#include "flywheel/buffer/service/controller_client.h"
#include "flywheel/buffer/service/controller_server.h"
#include "flywheel/v1/controller.grpc.pb.h"
#include "gmock/gmock.h"
#include "google/protobuf/stubs/logging.h"
#include "group_message.h"
#include "gtest/gtest.h"
#include "service_fixture.h"
#include "testing/scratch_dir.h"

namespace flywheel::buffer {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

TEST(ControllerServiceTest, RegisterAcquirePushAndStatusInProcess) {
  Fixture f;
  auto client = f.local_client();
  auto reg = client->register_worker({{"device", "cpu"}});
  ASSERT_TRUE(reg.ok()) << reg.status();
  EXPECT_EQ(reg->group_size(), 2);
  auto work = client->acquire_work(3);
  ASSERT_TRUE(work.ok()) << work.status();
  ASSERT_EQ(work->kind(), v1::AcquireWorkReply::WORK);
  ASSERT_EQ(work->leases_size(), 3);
  EXPECT_THAT(work->leases(0).prompt_json(), HasSubstr("\"prompt\": \"q"));
  std::vector<TrajectoryGroup> groups;
  for (const auto& l : work->leases()) groups.push_back(group_for(l.lease_id(), 0));
  auto acks = client->push_groups(groups);
  ASSERT_TRUE(acks.ok()) << acks.status();
  for (const auto& ack : *acks) {
    EXPECT_EQ(ack.code(), 0) << ack.message();
    EXPECT_EQ(ack.outcome(), "accepted");
  }
  auto status = client->status();
  ASSERT_TRUE(status.ok());
  EXPECT_EQ(status->buffered(), 3);
  EXPECT_EQ(status->counters().at("accepted"), 3);
}

TEST(ControllerServiceTest, BadGroupsAreRejectedWithTheRightStatusAndTheStreamContinues) {
  Fixture f;
  auto client = f.local_client();
  auto work = client->acquire_work(2);
  ASSERT_TRUE(work.ok());
  TrajectoryGroup bad = group_for(work->leases(0).lease_id(), 0);
  bad.trajectories[0].response_ids[1] = 100;
  TrajectoryGroup future = group_for(work->leases(1).lease_id(), 7, "future");
  TrajectoryGroup no_lease = group_for(999, 0);
  TrajectoryGroup good = group_for(work->leases(1).lease_id(), 0);
  auto acks = client->push_groups({bad, future, no_lease, good});
  ASSERT_TRUE(acks.ok()) << acks.status();
  EXPECT_EQ((*acks)[0].code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT((*acks)[0].message(), HasSubstr("trajectories[0].response_ids[1]"));
  EXPECT_EQ((*acks)[1].code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT((*acks)[1].message(), HasSubstr("versions"));
  EXPECT_EQ((*acks)[2].code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ((*acks)[3].code(), grpc::StatusCode::OK);
  EXPECT_EQ(f.core->buffered(), 1);
  auto bad_request = client->acquire_work(0);
  EXPECT_EQ(bad_request.status().code(), absl::StatusCode::kInvalidArgument);
}

// A client with protobuf's generated classes gets one ack per message, in the order sent,
// including for bytes the server cannot decode (here a string that is not UTF-8).
TEST(ControllerServiceTest, GeneratedClientsGetOneAckPerGroupInOrder) {
  Fixture f;
  auto work = f.local_client()->acquire_work(3);
  ASSERT_TRUE(work.ok());
  std::vector<v1::TrajectoryGroup> sent;
  for (int i = 0; i < 3; ++i)
    sent.push_back(to_message(group_for(work->leases(i).lease_id(), 0), "w"));
  v1::TrajectoryGroup undecodable = sent[1];
  undecodable.set_group_id("undecodable");
  undecodable.mutable_trajectories(0)->set_finish_reason("\xC0\x80");
  v1::TrajectoryGroup unknown_lease = to_message(group_for(12345, 0), "w");
  sent.insert(sent.begin() + 1, undecodable);
  sent.insert(sent.begin() + 3, unknown_lease);
  auto stub = v1::Controller::NewStub(f.server->in_process_channel());
  grpc::ClientContext context;
  auto stream = stub->PushGroups(&context);
  {
    google::protobuf::LogSilencer quiet;  // protobuf warns about the string as it serializes
    for (const auto& p : sent) ASSERT_TRUE(stream->Write(p));
  }
  ASSERT_TRUE(stream->WritesDone());
  std::vector<v1::PushAck> acks;
  for (v1::PushAck ack; stream->Read(&ack);) acks.push_back(ack);
  ASSERT_TRUE(stream->Finish().ok());
  ASSERT_EQ(acks.size(), sent.size());
  for (size_t i = 0; i < sent.size(); ++i) EXPECT_EQ(acks[i].group_id(), sent[i].group_id());
  EXPECT_EQ(acks[0].outcome(), "accepted");
  EXPECT_EQ(acks[1].code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(acks[1].message(), HasSubstr("trajectories[0].finish_reason"));
  EXPECT_EQ(acks[2].outcome(), "accepted");
  EXPECT_EQ(acks[3].code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(acks[4].outcome(), "accepted");
  EXPECT_EQ(f.core->buffered(), 3);
}

// The server decodes a stream's next group while it pushes the previous one, but buffers them
// in the order sent: large and small groups alternate so that decodes finish out of order.
TEST(ControllerServiceTest, OneStreamsGroupsAreBufferedInTheOrderSent) {
  ControllerOptions o = core_options(48);
  o.groups_per_step = 48;
  Fixture f(o);
  auto client = f.local_client();
  for (int round = 0; round < 3; ++round) {
    auto work = client->acquire_work(16);
    ASSERT_TRUE(work.ok());
    ASSERT_EQ(work->leases_size(), 16);
    std::vector<TrajectoryGroup> groups;
    for (int i = 0; i < 16; ++i) {
      TrajectoryGroup g = group_for(work->leases(i).lease_id(), 0);
      if (i % 2 == 0) {
        for (Trajectory& t : g.trajectories) {
          const size_t n = 200000;
          t.response_ids.assign(n, 3);
          t.loss_mask.assign(n, 1);
          t.logprobs.assign(n, -0.5f);
          t.versions.assign(n, 0);
        }
      }
      groups.push_back(std::move(g));
    }
    auto acks = client->push_groups(groups);
    ASSERT_TRUE(acks.ok());
    for (const auto& ack : *acks) ASSERT_EQ(ack.outcome(), "accepted") << ack.message();
    auto batch = f.core->take_batch(16);
    ASSERT_TRUE(batch.ok());
    for (int i = 0; i < 16; ++i) EXPECT_EQ((*batch)[i].group_id, groups[i].group_id) << i;
  }
}

TEST(ControllerServiceTest, ConcurrentPushersAndASamplerOverLoopbackTcp) {
  Fixture f({}, /*prompts=*/200);
  std::atomic<int64_t> accepted_acks{0}, stale_acks{0};
  std::atomic<bool> done{false};
  std::vector<std::thread> workers;
  for (int w = 0; w < 4; ++w) {
    workers.emplace_back([&, w] {
      ControllerClientOptions o;
      o.worker_id = "w" + std::to_string(w);
      auto client = f.tcp_client(o);
      for (int round = 0; round < 200 && !done; ++round) {
        auto work = client->acquire_work(2);
        if (!work.ok() || work->kind() == v1::AcquireWorkReply::DONE) break;
        if (work->kind() == v1::AcquireWorkReply::WAIT) {
          std::this_thread::sleep_for(std::chrono::milliseconds(2));
          continue;
        }
        std::vector<TrajectoryGroup> groups;
        for (const auto& l : work->leases())
          groups.push_back(group_for(l.lease_id(), work->version()));
        auto acks = client->push_groups(groups);
        ASSERT_TRUE(acks.ok()) << acks.status();
        for (const auto& a : *acks) {
          ASSERT_EQ(a.code(), 0) << a.message();
          accepted_acks += a.outcome() == "accepted";
          stale_acks += a.outcome() == "stale_dropped";
        }
      }
    });
  }
  int64_t consumed = 0;
  for (int step = 0; step < 20; ++step) {
    while (true) {
      auto batch = f.core->take_batch(4);
      if (batch.ok()) {
        for (const auto& g : *batch) EXPECT_GE(g.min_version(), f.core->version() - 1);
        consumed += 4;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    f.core->set_version(step + 1);
  }
  done = true;
  for (auto& t : workers) t.join();
  ControllerCounters c = f.core->counters();
  EXPECT_EQ(consumed, 80);
  EXPECT_EQ(c.accepted, accepted_acks.load());
  // Conservation: every accepted group was consumed, is buffered, or was evicted as stale.
  const int64_t evicted = c.stale_dropped - stale_acks.load();
  EXPECT_EQ(c.accepted, c.consumed + f.core->buffered() + evicted);
}

TEST(ControllerServiceTest, AClientKilledMidStreamLosesNoAckedGroupAndDuplicatesNone) {
  Fixture f;
  auto client = f.local_client();
  auto work = client->acquire_work(6);
  ASSERT_TRUE(work.ok());
  std::vector<TrajectoryGroup> groups;
  for (const auto& l : work->leases()) groups.push_back(group_for(l.lease_id(), 0));
  {
    // A raw stream: push 3 and read their acks, push a 4th, then die without reading its ack.
    auto stub = v1::Controller::NewStub(f.server->in_process_channel());
    grpc::ClientContext context;
    auto stream = stub->PushGroups(&context);
    v1::PushAck ack;
    for (size_t i = 0; i < 4; ++i) {
      const v1::TrajectoryGroup p = to_message(groups[i], "w");
      ASSERT_TRUE(stream->Write(p));
      if (i < 3) {
        ASSERT_TRUE(stream->Read(&ack));
      }
    }
    context.TryCancel();
    EXPECT_EQ(stream->Finish().error_code(), grpc::StatusCode::CANCELLED);
  }
  // The worker restarts and pushes everything again.
  auto acks = client->push_groups(groups);
  ASSERT_TRUE(acks.ok()) << acks.status();
  int accepted = 0, duplicates = 0;
  for (const auto& a : *acks) {
    ASSERT_EQ(a.code(), 0) << a.message();
    accepted += a.outcome() == "accepted";
    duplicates += a.outcome() == "duplicate";
  }
  EXPECT_EQ(accepted + duplicates, 6);
  EXPECT_GE(duplicates, 3);
  EXPECT_EQ(f.core->buffered(), 6);  // every group exactly once
}

TEST(ControllerServiceTest, TokenAuthentication) {
  ControllerServerOptions o;
  o.token = "s3cret-token";
  Fixture f(o);
  EXPECT_EQ(f.tcp_client()->status().status().code(), absl::StatusCode::kUnauthenticated);
  ControllerClientOptions wrong;
  wrong.token = "s3cret-tokeN";
  EXPECT_EQ(f.tcp_client(wrong)->acquire_work(1).status().code(),
            absl::StatusCode::kUnauthenticated);
  ControllerClientOptions right;
  right.token = "s3cret-token";
  EXPECT_TRUE(f.tcp_client(right)->status().ok());
  auto acks = f.tcp_client(wrong)->push_groups({group_for(1, 0)});
  EXPECT_EQ(acks.status().code(), absl::StatusCode::kUnauthenticated);
}

TEST(ControllerServiceTest, TokenFromFileOrEnvironment) {
  std::string path = ::testing::TempDir() + "/flywheel_token_" + std::to_string(getpid());
  std::ofstream(path) << "  abc123\n";
  EXPECT_EQ(*read_token(path, ""), "abc123");
  setenv("FLYWHEEL_TEST_TOKEN", "xyz", 1);
  EXPECT_EQ(*read_token("", "FLYWHEEL_TEST_TOKEN"), "xyz");
  EXPECT_EQ(read_token("", "FLYWHEEL_TEST_TOKEN_MISSING").status().code(),
            absl::StatusCode::kNotFound);
  std::remove(path.c_str());
}

// A controller whose buffer holds one group, holding pushes back for `push_timeout_s`.
ControllerOptions one_group_buffer() {
  ControllerOptions o = core_options(20);
  o.groups_per_step = 1;
  o.max_staleness = 5;
  o.capacity_groups = 1;
  return o;
}

ControllerServerOptions push_timeout(double seconds) {
  ControllerServerOptions so;
  so.push_timeout_s = seconds;
  return so;
}

TEST(ControllerServiceTest, AFullBufferMakesThePushWaitThenResourceExhausted) {
  Fixture f(one_group_buffer(), push_timeout(1.0));
  auto client = f.local_client();
  auto work = client->acquire_work(3);
  ASSERT_TRUE(work.ok());
  ASSERT_GE(work->leases_size(), 3);
  auto acks = client->push_groups(
      {group_for(work->leases(0).lease_id(), 0), group_for(work->leases(1).lease_id(), 0)});
  ASSERT_TRUE(acks.ok());
  EXPECT_EQ((*acks)[0].code(), 0);
  EXPECT_EQ((*acks)[1].code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  // A learner frees space while a push waits: the push then succeeds.
  std::thread learner([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    EXPECT_TRUE(f.core->take_batch(1).ok());
  });
  auto later = client->push_groups({group_for(work->leases(1).lease_id(), 0)});
  learner.join();
  ASSERT_TRUE(later.ok());
  EXPECT_EQ((*later)[0].code(), 0) << (*later)[0].message();
}

// Issue 26, item 11: the controller holds a push back on a full buffer for longer than the
// client's deadline. The client pushes the unacknowledged group again (its id makes that safe)
// rather than failing, and the push succeeds once the learners take a batch.
TEST(ControllerServiceTest, APushHeldBackPastTheDeadlineIsPushedAgainNotFailed) {
  Fixture f(one_group_buffer(), push_timeout(5.0));
  ControllerClientOptions co;
  co.deadline_s = 0.3;
  co.backoff_initial_s = 0.01;
  co.max_attempts = 1000;
  auto client = f.local_client(co);
  auto work = client->acquire_work(2);
  ASSERT_TRUE(work.ok());
  ASSERT_EQ(work->leases_size(), 2);
  auto first = client->push_groups({group_for(work->leases(0).lease_id(), 0)});
  ASSERT_TRUE(first.ok());
  ASSERT_EQ((*first)[0].code(), 0);  // the buffer is full now
  absl::StatusOr<std::vector<v1::PushAck>> held;
  std::thread pusher(
      [&] { held = client->push_groups({group_for(work->leases(1).lease_id(), 0)}); });
  // Two deadlines passed while the buffer stayed full, then the learners take a batch.
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (client->reconnects() < 2 && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_GE(client->reconnects(), 2);
  EXPECT_TRUE(f.core->take_batch(1).ok());
  pusher.join();
  ASSERT_TRUE(held.ok()) << held.status();
  EXPECT_EQ((*held)[0].code(), 0) << (*held)[0].message();
  EXPECT_EQ(f.core->buffered(), 1);
}

TEST(ControllerServiceTest, UnreachableControllerIsRetriedWithBackoffThenUnavailable) {
  ControllerClientOptions o;
  o.address = "127.0.0.1:1";  // nothing listens on port 1
  o.worker_id = "w";
  o.max_attempts = 3;
  o.backoff_initial_s = 0.01;
  o.deadline_s = 1;
  auto client = std::move(*ControllerClient::connect(o));
  const absl::Status s = client->status().status();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  // The error names who did not answer which call, so that a worker that gives up says why.
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("the controller at 127.0.0.1:1 did not answer GetStatus for"));
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("(3 attempts; buffer.server.reconnect_timeout_s"));
  EXPECT_EQ(client->reconnects(), 3);
}

// The server's clock in a test: seconds that move only when the test says, and how often the
// server read them (once per RPC).
struct FakeClock {
  std::atomic<double> now{0};
  std::atomic<int64_t> reads{0};
  std::function<double()> function() {
    return [this] {
      ++reads;
      return now.load();
    };
  }
  // Moves to `t`, then waits until two more RPCs read the clock: with heartbeats the only RPCs
  // in flight, sent one by one, the first of them was recorded at `t`. False after 60 s.
  bool advance_past_heartbeat(double t) {
    now = t;
    const int64_t seen = reads.load();
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (reads.load() < seen + 2) {
      if (std::chrono::steady_clock::now() > give_up) return false;
      std::this_thread::yield();
    }
    return true;
  }
};

TEST(ControllerServiceTest, HeartbeatsKeepLeasesAlive) {
  ControllerOptions o = core_options(20);
  o.worker_timeout_s = 1.0;
  FakeClock clock;
  Fixture f(o, {}, clock.function());
  ControllerClientOptions co;
  co.worker_id = "silent";
  ASSERT_TRUE(f.local_client(co)->acquire_work(2).ok());  // at 0, and never heard again
  co.worker_id = "beating";
  auto client = f.local_client(co);
  ASSERT_TRUE(client->acquire_work(2).ok());
  client->start_heartbeats(0.01);
  // 2.5 worker timeouts on the server's clock, heard every half timeout.
  for (double t : {0.5, 1.0, 1.5, 2.0, 2.5}) {
    ASSERT_TRUE(clock.advance_past_heartbeat(t)) << "no heartbeat heard at " << t;
  }
  f.core->expire(2.5);
  EXPECT_EQ(f.core->in_flight(), 2);         // the beating worker's
  EXPECT_EQ(f.core->counters().expired, 2);  // the silent one's
}

TEST(ControllerServiceTest, WeightRpcsSayNotImplemented) {
  Fixture f;
  auto stub = v1::Controller::NewStub(f.server->in_process_channel());
  grpc::ClientContext context;
  v1::WeightsManifest manifest;
  EXPECT_EQ(stub->GetWeightsManifest(&context, v1::WeightsRequest(), &manifest).error_code(),
            grpc::StatusCode::UNIMPLEMENTED);
}

std::string read_file(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Test certificates made with openssl at test time: a CA, a server certificate for localhost /
// 127.0.0.1 and a client certificate.
class TlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string d = dir_.string();
    const std::string script =
        "cd " + d +
        " && "
        "openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 1 "
        "-subj /CN=flywheel-test-ca >/dev/null 2>&1 && "
        "printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\\n' > san.ext && "
        "openssl req -newkey rsa:2048 -nodes -keyout server.key -out server.csr "
        "-subj /CN=localhost >/dev/null 2>&1 && "
        "openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial "
        "-out server.pem -days 1 -extfile san.ext >/dev/null 2>&1 && "
        "openssl req -newkey rsa:2048 -nodes -keyout client.key -out client.csr "
        "-subj /CN=worker >/dev/null 2>&1 && "
        "openssl x509 -req -in client.csr -CA ca.pem -CAkey ca.key -CAcreateserial "
        "-out client.pem -days 1 >/dev/null 2>&1";
    ASSERT_EQ(std::system(script.c_str()), 0) << "openssl failed";
  }
  std::string pem(const char* name) { return read_file(dir_ / name); }
  flywheel::testing::ScratchDir scratch_{"flywheel_tls"};
  const fs::path& dir_ = scratch_.path();
};

TEST_F(TlsTest, ServerTlsAndMutualTls) {
  ControllerServerOptions o;
  o.tls_cert_pem = pem("server.pem");
  o.tls_key_pem = pem("server.key");
  {
    Fixture f(o);
    ControllerClientOptions tls;
    tls.tls_root_ca_pem = pem("ca.pem");
    tls.tls_target_name = "localhost";
    tls.max_attempts = 2;
    tls.deadline_s = 5;
    EXPECT_TRUE(f.tcp_client(tls)->status().ok());
    ControllerClientOptions plain;
    plain.max_attempts = 1;
    plain.deadline_s = 2;
    EXPECT_FALSE(f.tcp_client(plain)->status().ok());
  }
  o.tls_client_ca_pem = pem("ca.pem");  // now require client certificates
  Fixture f(o);
  ControllerClientOptions no_cert;
  no_cert.tls_root_ca_pem = pem("ca.pem");
  no_cert.tls_target_name = "localhost";
  no_cert.max_attempts = 1;
  no_cert.deadline_s = 2;
  EXPECT_FALSE(f.tcp_client(no_cert)->status().ok());
  ControllerClientOptions with_cert = no_cert;
  with_cert.tls_cert_pem = pem("client.pem");
  with_cert.tls_key_pem = pem("client.key");
  EXPECT_TRUE(f.tcp_client(with_cert)->status().ok());
}

}  // namespace
}  // namespace flywheel::buffer
