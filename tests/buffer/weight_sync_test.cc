// Weight publication over the controller's gRPC service: WeightStore, GetWeightsManifest /
// StreamWeights / AckWeights, and ControllerClient::fetch_weights / ack_weights over loopback TCP.
#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <random>
#include <thread>

#include <grpcpp/grpcpp.h>

#include "absl/synchronization/mutex.h"
#include "flywheel/buffer/weight_delta.h"
#include "flywheel/buffer/weight_store.h"
#include "flywheel/core/crc32c.h"
#include "flywheel/v1/controller.grpc.pb.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "service_fixture.h"

namespace flywheel::buffer {
namespace {

using ::testing::HasSubstr;

std::string random_bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(rng());
  return s;
}

// Three tensors (F32, BF16, F16) over 10,006 of `payload_bytes` >= 10,006 bytes.
core::PublishedWeights small_weights(int64_t version, uint64_t bucket_bytes = 1000,
                                     size_t payload_bytes = 10007) {
  core::PublishedWeights w;
  w.version = version;
  w.bucket_bytes = bucket_bytes;
  w.tensors = {{"a", "F32", {10, 100}, 0, 4000},
               {"b", "BF16", {3000}, 4000, 6000},
               {"c", "F16", {3}, 10000, 6}};
  w.payload = random_bytes(payload_bytes, static_cast<uint32_t>(version));
  return w;
}

// One F32 tensor over the whole payload.
core::PublishedWeights flat_weights(int64_t version, size_t bytes, uint64_t bucket_bytes) {
  core::PublishedWeights w;
  w.version = version;
  w.bucket_bytes = bucket_bytes;
  w.tensors = {{"flat", "F32", {static_cast<int64_t>(bytes / 4)}, 0, bytes / 4 * 4}};
  w.payload = random_bytes(bytes, static_cast<uint32_t>(version) + 7);
  return w;
}

// A controller on loopback TCP that serves `store`.
struct WeightsFixture {
  explicit WeightsFixture(ControllerServerOptions server_options = {}, int keep_versions = 2,
                          int delta_level = 0)
      : store(keep_versions, {delta_level, 1}) {
    core = std::move(*ControllerCore::create(core_options(8)));
    data = dataset(8);
    auto started = ControllerServer::start(core.get(), data.get(), server_options, nullptr, &store);
    EXPECT_TRUE(started.ok()) << started.status();
    server = std::move(*started);
  }
  std::unique_ptr<ControllerClient> client(ControllerClientOptions o = {}) {
    o.address = "127.0.0.1:" + std::to_string(server->port());
    if (o.worker_id.empty()) o.worker_id = "w";
    return std::move(*ControllerClient::connect(o));
  }
  WeightStore store;
  std::unique_ptr<ControllerCore> core;
  std::unique_ptr<PromptDataset> data;
  std::unique_ptr<ControllerServer> server;
};

TEST(WeightCrcTest, MatchesTheTableCrcExtendsAndCombines) {
  EXPECT_EQ(core::crc32c_extend(0, "123456789", 9), 0xE3069283u);
  const std::string bytes = random_bytes(100003, 1);
  for (size_t n : {0, 1, 7, 8, 9, 31, 32, 33, 1000, 100003}) {
    EXPECT_EQ(core::crc32c_extend(0, bytes.data(), n), core::crc32c(bytes.data(), n)) << n;
  }
  for (size_t split : {0, 1, 13, 4096, 99999}) {
    const uint32_t a = core::crc32c_extend(0, bytes.data(), split);
    const uint32_t b = core::crc32c_extend(0, bytes.data() + split, bytes.size() - split);
    const uint32_t whole = core::crc32c(bytes.data(), bytes.size());
    EXPECT_EQ(core::crc32c_extend(a, bytes.data() + split, bytes.size() - split), whole) << split;
    EXPECT_EQ(core::crc32c_combine(a, b, bytes.size() - split), whole) << split;
  }
}

TEST(WeightStoreTest, PublishComputesChecksumsAndKeepsTheNewestVersions) {
  WeightStore store(2);
  EXPECT_EQ(store.latest(), nullptr);
  EXPECT_EQ(store.latest_version(), -1);
  for (int64_t v = 1; v <= 3; ++v) ASSERT_TRUE(store.publish(small_weights(v)).ok());
  EXPECT_EQ(store.latest_version(), 3);
  EXPECT_EQ(store.get(1), nullptr);  // beyond keep_versions
  ASSERT_NE(store.get(2), nullptr);
  auto latest = store.latest();
  ASSERT_NE(latest, nullptr);
  EXPECT_EQ(latest->version, 3);
  EXPECT_EQ(latest->crc32c, core::crc32c(latest->payload.data(), latest->payload.size()));
  ASSERT_EQ(latest->bucket_crc32c.size(), 11u);  // 10,007 bytes in 1,000-byte buckets
  EXPECT_EQ(latest->bucket_crc32c[10], core::crc32c(latest->payload.data() + 10000, 7));
}

TEST(WeightStoreTest, PublishRejectsBadManifestsNamingTheTensor) {
  WeightStore store;
  auto rejected = [&](core::PublishedWeights w, const std::string& what) {
    absl::Status s = store.publish(std::move(w));
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << what;
    EXPECT_THAT(std::string(s.message()), HasSubstr(what));
  };
  core::PublishedWeights overlap = small_weights(1);
  overlap.tensors[1].offset = 3996;
  rejected(overlap, "'b': offset 3996 overlaps");
  core::PublishedWeights dtype = small_weights(1);
  dtype.tensors[2].dtype = "F64";
  rejected(dtype, "'c': unknown dtype 'F64'");
  core::PublishedWeights size = small_weights(1);
  size.tensors[0].shape = {10, 99};
  rejected(size, "'a': size 4000 bytes != 3960");
  core::PublishedWeights past = small_weights(1);
  past.payload.resize(10005);
  rejected(past, "'c': bytes [10000, 10006) are past the payload");
  core::PublishedWeights unnamed = small_weights(1);
  unnamed.tensors[0].name = "";
  rejected(unnamed, "tensor 0: no name");
  core::PublishedWeights twice = small_weights(1);
  twice.tensors[2].name = "a";
  rejected(twice, "duplicate name");
  core::PublishedWeights no_buckets = small_weights(1);
  no_buckets.bucket_bytes = 0;
  rejected(no_buckets, "bucket_bytes");
  ASSERT_TRUE(store.publish(small_weights(5)).ok());
  rejected(small_weights(5), "version 5 is not newer than the latest published (5)");
  rejected(small_weights(4), "not newer");
  EXPECT_EQ(store.latest_version(), 5);
}

TEST(WeightStoreTest, AcknowledgeChecksTheVersionAndCrc) {
  WeightStore store(1);
  ASSERT_TRUE(store.publish(small_weights(1)).ok());
  const uint32_t crc1 = store.latest()->crc32c;
  ASSERT_TRUE(store.publish(small_weights(2)).ok());
  EXPECT_TRUE(store.acknowledge("w1", 1, crc1).ok());  // dropped from the store, still known
  EXPECT_EQ(store.acknowledge("w1", 2, crc1).code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(store.acknowledge("w2", 3, crc1).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(store.acknowledge("w2", 0, crc1).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(store.acknowledge("w2", 2, store.latest()->crc32c).ok());
  const WeightStore::AckCounters c = store.ack_counters();
  EXPECT_EQ(c.acks, 2);
  EXPECT_EQ(c.mismatches, 1);
  EXPECT_EQ(c.rejected, 2);
  EXPECT_EQ(store.worker_versions(), (std::map<std::string, int64_t>{{"w1", 1}, {"w2", 2}}));
}

TEST(WeightSyncTest, FetchIsByteIdenticalAcrossBucketsAndNothingNewerIsNullopt) {
  WeightsFixture f;
  ASSERT_TRUE(f.store.publish(small_weights(3)).ok());
  auto client = f.client();
  auto fetched = client->fetch_weights(-1, 10);
  ASSERT_TRUE(fetched.ok()) << fetched.status();
  ASSERT_TRUE(fetched->has_value());
  const core::PublishedWeights& w = **fetched;
  const auto published = f.store.latest();
  EXPECT_EQ(w.version, 3);
  EXPECT_EQ(w.payload, published->payload);
  EXPECT_EQ(w.crc32c, published->crc32c);
  EXPECT_EQ(w.bucket_bytes, 1000u);
  EXPECT_EQ(w.bucket_crc32c, published->bucket_crc32c);
  ASSERT_EQ(w.tensors.size(), 3u);
  EXPECT_EQ(w.tensors[1].name, "b");
  EXPECT_EQ(w.tensors[1].dtype, "BF16");
  EXPECT_EQ(w.tensors[1].shape, std::vector<int64_t>{3000});
  EXPECT_EQ(w.tensors[1].offset, 4000u);
  EXPECT_EQ(w.tensors[1].size, 6000u);
  auto same = client->fetch_weights(3, 10);
  ASSERT_TRUE(same.ok()) << same.status();
  EXPECT_FALSE(same->has_value());
}

TEST(WeightSyncTest, WallClockNothingPublishedIsNulloptAtOnce) {
  WeightsFixture f;
  const auto start = std::chrono::steady_clock::now();
  auto fetched = f.client()->fetch_weights(-1, 10);
  ASSERT_TRUE(fetched.ok()) << fetched.status();
  EXPECT_FALSE(fetched->has_value());
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(1));  // no retries
}

TEST(WeightSyncTest, ServerWithoutAStoreSaysUnimplemented) {
  Fixture f;
  auto fetched = f.tcp_client()->fetch_weights(-1, 10);
  EXPECT_EQ(fetched.status().code(), absl::StatusCode::kUnimplemented);
}

TEST(WeightSyncTest, ACorruptedBucketIsRequestedAgain) {
  WeightsFixture f;
  ASSERT_TRUE(f.store.publish(small_weights(1)).ok());
  std::atomic<int> calls{0}, corrupted{0};
  ControllerClientOptions o;
  o.corrupt_bucket_for_test = [&](uint64_t offset, char* data, size_t) {
    ++calls;
    if (offset == 3000 && corrupted++ < 2) data[17] ^= 1;  // twice: two re-requests
  };
  auto fetched = f.client(o)->fetch_weights(0, 10);
  ASSERT_TRUE(fetched.ok()) << fetched.status();
  ASSERT_TRUE(fetched->has_value());
  EXPECT_EQ((*fetched)->payload, f.store.latest()->payload);
  EXPECT_EQ(calls.load(), 11 + 2);
}

TEST(WeightSyncTest, ABucketCorruptedEveryTimeIsDataLoss) {
  WeightsFixture f;
  ASSERT_TRUE(f.store.publish(small_weights(1)).ok());
  ControllerClientOptions o;
  o.corrupt_bucket_for_test = [](uint64_t offset, char* data, size_t size) {
    if (offset == 10000) data[size - 1] ^= 0x40;
  };
  auto fetched = f.client(o)->fetch_weights(0, 10);
  EXPECT_EQ(fetched.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(fetched.status().message()), HasSubstr("bucket 10"));
}

TEST(WeightSyncTest, AVersionDroppedMidTransferIsReplacedByTheNewest) {
  WeightsFixture f({}, /*keep_versions=*/1);
  ASSERT_TRUE(f.store.publish(small_weights(1)).ok());
  std::atomic<bool> published{false};
  ControllerClientOptions o;
  // The first bucket of version 1 arrives corrupted and, before it is requested again, versions
  // 2 and 3 replace version 1 in the store.
  o.corrupt_bucket_for_test = [&](uint64_t offset, char* data, size_t) {
    if (offset == 0 && !published.exchange(true)) {
      data[0] ^= 1;
      ASSERT_TRUE(f.store.publish(small_weights(2)).ok());
      ASSERT_TRUE(f.store.publish(small_weights(3)).ok());
    }
  };
  auto fetched = f.client(o)->fetch_weights(0, 10);
  ASSERT_TRUE(fetched.ok()) << fetched.status();
  ASSERT_TRUE(fetched->has_value());
  EXPECT_EQ((*fetched)->version, 3);
  EXPECT_EQ((*fetched)->payload, f.store.latest()->payload);
}

// `w` as the next version: the low byte of every other element of each tensor changed, as a
// small optimizer step changes weights.
core::PublishedWeights stepped(const core::PublishedWeights& w, int64_t version) {
  core::PublishedWeights next = w;
  next.version = version;
  for (const core::WeightTensor& t : next.tensors) {
    const int width = core::dtype_bytes(t.dtype);
    for (uint64_t at = t.offset; at < t.offset + t.size; at += 2 * width) {
      next.payload[at] = static_cast<char>(next.payload[at] + 1 + (at / 8) % 5);
    }
  }
  return next;
}

// A worker that fetched `v1`, published to `f`'s store, into `*held` (whole).
std::unique_ptr<ControllerClient> holding(WeightsFixture& f, const core::PublishedWeights& v1,
                                          core::PublishedWeights* held,
                                          ControllerClientOptions o = {}) {
  EXPECT_TRUE(f.store.publish(v1).ok());
  auto client = f.client(std::move(o));
  auto fetched = client->fetch_weights_into(-1, 10, held);
  EXPECT_TRUE(fetched.ok() && *fetched) << fetched.status();
  EXPECT_EQ(held->version, v1.version);
  return client;
}

// The versions `client` fetched whole, as deltas, and the deltas that failed (fetched whole).
void expect_fetches(const ControllerClient& client, int64_t full, int64_t deltas,
                    int64_t failures) {
  const ControllerClient::WeightFetchCounters counters = client.weight_fetch_counters();
  EXPECT_EQ(counters.full, full);
  EXPECT_EQ(counters.deltas, deltas);
  EXPECT_EQ(counters.delta_failures, failures);
}

TEST(WeightSyncTest, TheNextVersionArrivesAsADeltaEqualToTheWhole) {
  WeightsFixture f({}, /*keep_versions=*/2, /*delta_level=*/3);
  const core::PublishedWeights v1 = small_weights(1);
  core::PublishedWeights held;
  auto client = holding(f, v1, &held);
  ASSERT_TRUE(f.store.publish(stepped(v1, 2)).ok());
  auto got = client->fetch_weights_into(1, 10, &held);
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_TRUE(*got);
  const auto published = f.store.latest();
  EXPECT_EQ(held.version, 2);
  EXPECT_EQ(held.payload, published->payload);
  EXPECT_EQ(held.crc32c, published->crc32c);
  EXPECT_EQ(held.bucket_crc32c, published->bucket_crc32c);
  EXPECT_EQ(held.tensors.size(), 3u);
  expect_fetches(*client, /*full=*/1, /*deltas=*/1, /*failures=*/0);
  const WeightStore::DeltaCounters deltas = f.store.delta_counters();
  EXPECT_EQ(deltas.encoded, 1);
  EXPECT_EQ(deltas.full_bytes, published->payload.size());
  EXPECT_LT(deltas.bytes, published->payload.size() / 2);  // mostly equal bytes
  EXPECT_EQ(client->weight_fetch_counters().bytes, v1.payload.size() + deltas.bytes);
  // A second worker holding version 1 gets the delta already encoded.
  auto other = f.client();
  core::PublishedWeights other_held = *f.store.get(1);  // as fetched: with its checksums
  ASSERT_TRUE(*other->fetch_weights_into(1, 10, &other_held));
  EXPECT_EQ(other_held.payload, published->payload);
  EXPECT_EQ(other->weight_fetch_counters().deltas, 1);
  EXPECT_EQ(f.store.delta_counters().encoded, 1);
  // Each version is a delta of the last from here on.
  for (int64_t v = 3; v <= 5; ++v) {
    ASSERT_TRUE(f.store.publish(stepped(*f.store.latest(), v)).ok());
    ASSERT_TRUE(*client->fetch_weights_into(v - 1, 10, &held));
    EXPECT_EQ(held.payload, f.store.latest()->payload) << v;
  }
  EXPECT_EQ(client->weight_fetch_counters().deltas, 4);
  EXPECT_EQ(f.store.delta_counters().encoded, 4);
}

// Polls `holds` for up to 30 s (the encoder thread's work, on a loaded machine).
bool eventually(const std::function<bool()>& holds) {
  for (int i = 0; i < 3000 && !holds(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return holds();
}

TEST(WeightStoreDeltaTest, DeltasAreEncodedOnTheStoresThreadNotTheAskers) {
  WeightStore store(2, {1, 1});
  const core::PublishedWeights v1 = small_weights(1);
  ASSERT_TRUE(store.publish(v1).ok());
  ASSERT_TRUE(store.publish(stepped(v1, 2)).ok());
  const uint32_t base_crc = store.get(1)->crc32c;
  EXPECT_EQ(store.kept_delta(2, 1, base_crc), nullptr);  // nobody asked: nothing encoded ahead
  EXPECT_EQ(store.delta_counters().encoded, 0);

  // Not kept: answered on another thread, once, with the delta.
  const std::thread::id asker = std::this_thread::get_id();
  std::atomic<int> answers{0};
  std::atomic<bool> on_asker{true};
  std::shared_ptr<const core::PublishedWeights> got;
  absl::Mutex mu;
  store.delta_async(2, 1, base_crc, [&](std::shared_ptr<const core::PublishedWeights> d) {
    absl::MutexLock lock(&mu);
    on_asker = std::this_thread::get_id() == asker;
    got = std::move(d);
    ++answers;
  });
  ASSERT_TRUE(eventually([&] { return answers.load() == 1; }));
  EXPECT_FALSE(on_asker.load());
  {
    absl::MutexLock lock(&mu);
    ASSERT_NE(got, nullptr);
    EXPECT_EQ(got->version, 2);
  }
  // Kept: answered at once, on the asker's thread, without encoding again.
  bool at_once = false;
  store.delta_async(2, 1, base_crc, [&](std::shared_ptr<const core::PublishedWeights> d) {
    at_once = d != nullptr && std::this_thread::get_id() == asker;
  });
  EXPECT_TRUE(at_once);
  // Cannot be made (a base of other bytes, a version not held): null at once.
  bool refused = false;
  store.delta_async(2, 1, base_crc ^ 1u, [&](std::shared_ptr<const core::PublishedWeights> d) {
    refused = d == nullptr;
  });
  EXPECT_TRUE(refused);
  EXPECT_EQ(store.delta(7, 2, base_crc), nullptr);
  EXPECT_EQ(store.delta_counters().encoded, 1);

  // From now on each version's delta from the one before is encoded when it is published.
  ASSERT_TRUE(store.publish(stepped(*store.latest(), 3)).ok());
  const uint32_t crc2 = store.get(2)->crc32c;
  ASSERT_TRUE(eventually([&] { return store.kept_delta(3, 2, crc2) != nullptr; }));
  EXPECT_EQ(store.delta_counters().encoded, 2);
  EXPECT_NE(store.kept_delta(2, 1, base_crc), nullptr);  // the two newest deltas are kept
  ASSERT_TRUE(store.publish(stepped(*store.latest(), 4)).ok());
  ASSERT_TRUE(eventually([&] { return store.delta_counters().encoded == 3; }));
  EXPECT_EQ(store.kept_delta(2, 1, base_crc), nullptr);
  ASSERT_NE(store.kept_delta(4, 3, store.get(3)->crc32c), nullptr);
  // The delta encoded ahead is exact: applied to version 3 it gives version 4.
  DeltaBuffers buffers;
  std::string payload = store.get(3)->payload;
  ASSERT_TRUE(apply_weight_delta(store.kept_delta(4, 3, store.get(3)->crc32c)->payload,
                                 store.get(3)->tensors, &payload, &buffers)
                  .ok());
  EXPECT_EQ(payload, store.latest()->payload);
}

TEST(WeightStoreDeltaTest, EveryAskerIsAnsweredOnceEvenWhenTheStoreGoesFirst) {
  // Askers of several deltas, and a store destroyed while they are queued or encoding: each is
  // answered exactly once (with the delta or null), so that no manifest RPC is left hanging.
  for (int round = 0; round < 5; ++round) {
    std::atomic<int> answers{0};
    constexpr int kAskers = 6;
    {
      WeightStore store(3, {1, 1});
      const core::PublishedWeights v1 = flat_weights(1, 1 << 20, 1 << 16);
      ASSERT_TRUE(store.publish(v1).ok());
      ASSERT_TRUE(store.publish(stepped(v1, 2)).ok());
      ASSERT_TRUE(store.publish(stepped(v1, 3)).ok());
      const uint32_t crc1 = store.get(1)->crc32c, crc2 = store.get(2)->crc32c;
      for (int i = 0; i < kAskers; ++i) {
        const bool from_first = i % 2 == 0;
        store.delta_async(3, from_first ? 1 : 2, from_first ? crc1 : crc2,
                          [&](std::shared_ptr<const core::PublishedWeights>) { ++answers; });
      }
      if (round % 2 == 1) {
        ASSERT_TRUE(eventually([&] { return answers.load() == kAskers; }));
      }
    }
    EXPECT_EQ(answers.load(), kAskers) << round;
  }
}

TEST(WeightSyncTest, ADeltaOnTheWrongBaseFailsItsChecksumAndIsFetchedWhole) {
  WeightsFixture f({}, 2, 1);
  const core::PublishedWeights v1 = small_weights(1);
  core::PublishedWeights held;
  auto client = holding(f, v1, &held);
  held.payload[4321] ^= 0x10;  // damaged in memory, its checksums not updated
  ASSERT_TRUE(f.store.publish(stepped(v1, 2)).ok());
  auto got = client->fetch_weights_into(1, 10, &held);
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_TRUE(*got);
  EXPECT_EQ(held.payload, f.store.latest()->payload);
  EXPECT_EQ(held.crc32c, f.store.latest()->crc32c);
  expect_fetches(*client, /*full=*/2, /*deltas=*/0, /*failures=*/1);
}

TEST(WeightSyncTest, ACorruptedDeltaBucketIsRequestedAgain) {
  WeightsFixture f({}, 2, 1);
  const core::PublishedWeights v1 = small_weights(1, /*bucket_bytes=*/64);
  ASSERT_TRUE(f.store.publish(v1).ok());
  std::atomic<int> corrupted{0};
  ControllerClientOptions o;
  std::atomic<bool> armed{false};
  o.corrupt_bucket_for_test = [&](uint64_t offset, char* data, size_t) {
    if (armed.load() && offset == 64 && corrupted++ == 0) data[3] ^= 1;
  };
  auto client = f.client(o);
  core::PublishedWeights held;
  ASSERT_TRUE(*client->fetch_weights_into(-1, 10, &held));
  ASSERT_TRUE(f.store.publish(stepped(v1, 2)).ok());
  armed = true;
  ASSERT_GT(f.store.delta(2, 1, held.crc32c)->payload.size(), 128u);  // more than 2 buckets
  ASSERT_TRUE(*client->fetch_weights_into(1, 10, &held));
  EXPECT_EQ(held.payload, f.store.latest()->payload);
  EXPECT_EQ(corrupted.load(), 2);  // bucket 1 of the delta, then its good copy
  EXPECT_EQ(client->weight_fetch_counters().deltas, 1);
}

TEST(WeightSyncTest, VersionsWithoutADeltaComeWhole) {
  // Deltas off at the controller, or at the worker.
  for (const auto& [level, ask] : {std::pair{0, true}, std::pair{1, false}}) {
    WeightsFixture f({}, 2, level);
    const core::PublishedWeights v1 = small_weights(1);
    ControllerClientOptions o;
    o.weight_deltas = ask;
    core::PublishedWeights held;
    auto client = holding(f, v1, &held, o);
    ASSERT_TRUE(f.store.publish(stepped(v1, 2)).ok());
    ASSERT_TRUE(*client->fetch_weights_into(1, 10, &held));
    EXPECT_EQ(held.payload, f.store.latest()->payload);
    EXPECT_EQ(client->weight_fetch_counters().full, 2) << level;
    EXPECT_EQ(f.store.delta_counters().encoded, 0);
  }
  WeightsFixture f({}, 2, 1);
  const core::PublishedWeights v1 = small_weights(1);
  core::PublishedWeights held;
  auto client = holding(f, v1, &held);
  // The version held is no longer in the store (two newer ones are).
  ASSERT_TRUE(f.store.publish(stepped(v1, 2)).ok());
  ASSERT_TRUE(f.store.publish(stepped(v1, 3)).ok());
  ASSERT_TRUE(*client->fetch_weights_into(1, 10, &held));
  EXPECT_EQ(held.version, 3);
  EXPECT_EQ(held.payload, f.store.latest()->payload);
  // Another layout.
  core::PublishedWeights reshaped = stepped(*f.store.latest(), 4);
  reshaped.tensors[0].shape = {100, 10};
  ASSERT_TRUE(f.store.publish(reshaped).ok());
  ASSERT_TRUE(*client->fetch_weights_into(3, 10, &held));
  EXPECT_EQ(held.payload, f.store.latest()->payload);
  EXPECT_EQ(held.tensors[0].shape, (std::vector<int64_t>{100, 10}));
  // The caller knows another version than the one held: no delta from it.
  ASSERT_TRUE(f.store.publish(stepped(reshaped, 5)).ok());
  ASSERT_TRUE(*client->fetch_weights_into(2, 10, &held));
  EXPECT_EQ(held.payload, f.store.latest()->payload);
  expect_fetches(*client, /*full=*/4, /*deltas=*/0, /*failures=*/0);
}

TEST(WeightSyncTest, BucketsFitTheSmallerMessageLimit) {
  ControllerServerOptions so;
  so.max_message_bytes = 1 << 20;
  WeightsFixture f(so);
  ASSERT_TRUE(f.store.publish(flat_weights(1, 5 << 20, 64 << 20)).ok());
  ControllerClientOptions o;
  o.max_message_bytes = 300 << 10;  // the client's limit is smaller still
  auto fetched = f.client(o)->fetch_weights(0, 10);
  ASSERT_TRUE(fetched.ok()) << fetched.status();
  EXPECT_EQ((*fetched)->bucket_bytes, (300u << 10) - 1024);
  EXPECT_EQ((*fetched)->payload, f.store.latest()->payload);
  // Served from a server limit below the publication's bucket size.
  auto server_limited = f.client()->fetch_weights(0, 10);
  ASSERT_TRUE(server_limited.ok()) << server_limited.status();
  EXPECT_EQ((*server_limited)->bucket_bytes, (1u << 20) - 1024);
  EXPECT_EQ((*server_limited)->crc32c, f.store.latest()->crc32c);
}

// The hand-written buckets parse with protobuf's generated classes; ranges and versions are
// checked.
TEST(WeightSyncTest, GeneratedClientsReadRangesAndMissingVersionsAreNotFound) {
  WeightsFixture f;
  ASSERT_TRUE(f.store.publish(small_weights(4)).ok());
  auto channel = grpc::CreateChannel("127.0.0.1:" + std::to_string(f.server->port()),
                                     grpc::InsecureChannelCredentials());
  auto stub = v1::Controller::NewStub(channel);
  const std::string& payload = f.store.latest()->payload;
  {
    grpc::ClientContext context;
    v1::WeightsRequest request;
    request.set_version(4);
    request.set_offset(2500);
    request.set_length(1700);
    auto reader = stub->StreamWeights(&context, request);
    v1::WeightsBucket bucket;
    std::string got;
    std::vector<uint64_t> offsets;
    while (reader->Read(&bucket)) {
      EXPECT_EQ(bucket.version(), 4);
      EXPECT_EQ(bucket.crc32c(), core::crc32c(bucket.data().data(), bucket.data().size()));
      offsets.push_back(bucket.offset());
      got += bucket.data();
    }
    ASSERT_TRUE(reader->Finish().ok());
    EXPECT_EQ(offsets, (std::vector<uint64_t>{2500, 3500}));
    EXPECT_EQ(got, payload.substr(2500, 1700));
  }
  {
    grpc::ClientContext context;
    v1::WeightsRequest request;
    request.set_latest(true);
    request.set_offset(10000);
    request.set_length(8);
    auto reader = stub->StreamWeights(&context, request);
    v1::WeightsBucket bucket;
    while (reader->Read(&bucket)) {
    }
    EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::OUT_OF_RANGE);
  }
  {
    grpc::ClientContext context;
    v1::WeightsRequest request;
    request.set_version(3);
    v1::WeightsManifest manifest;
    EXPECT_EQ(stub->GetWeightsManifest(&context, request, &manifest).error_code(),
              grpc::StatusCode::NOT_FOUND);
  }
  {
    grpc::ClientContext context;
    v1::WeightsRequest request;
    request.set_version(3);
    auto reader = stub->StreamWeights(&context, request);
    v1::WeightsBucket bucket;
    EXPECT_FALSE(reader->Read(&bucket));
    EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::NOT_FOUND);
  }
}

// Version 0 (the initial weights) is a version like any other: asking for it while version 1
// is published gets version 0's manifest and buckets, never version 1's.
TEST(WeightSyncTest, VersionZeroIsNotTheLatest) {
  WeightsFixture f;
  ASSERT_TRUE(f.store.publish(small_weights(0)).ok());
  ASSERT_TRUE(f.store.publish(small_weights(1)).ok());
  auto stub = v1::Controller::NewStub(grpc::CreateChannel(
      "127.0.0.1:" + std::to_string(f.server->port()), grpc::InsecureChannelCredentials()));
  for (bool latest : {false, true}) {
    grpc::ClientContext context;
    v1::WeightsRequest request;
    request.set_version(0);
    request.set_latest(latest);
    v1::WeightsManifest manifest;
    ASSERT_TRUE(stub->GetWeightsManifest(&context, request, &manifest).ok());
    EXPECT_EQ(manifest.version(), latest ? 1 : 0);
    EXPECT_EQ(manifest.crc32c(), f.store.get(latest ? 1 : 0)->crc32c);
  }
  grpc::ClientContext context;
  v1::WeightsRequest request;
  request.set_version(0);
  auto reader = stub->StreamWeights(&context, request);
  v1::WeightsBucket bucket;
  std::string got;
  while (reader->Read(&bucket)) {
    EXPECT_EQ(bucket.version(), 0);
    got += bucket.data();
  }
  ASSERT_TRUE(reader->Finish().ok());
  EXPECT_EQ(got, f.store.get(0)->payload);
}

TEST(WeightSyncTest, AcksOverTheRpcAreCheckedAndCounted) {
  WeightsFixture f;
  ASSERT_TRUE(f.store.publish(small_weights(2)).ok());
  ControllerClientOptions o;
  o.worker_id = "acker";
  auto client = f.client(o);
  auto fetched = client->fetch_weights(-1, 10);
  ASSERT_TRUE(fetched.ok() && fetched->has_value()) << fetched.status();
  EXPECT_TRUE(client->ack_weights(2, (*fetched)->crc32c).ok());
  EXPECT_EQ(client->ack_weights(2, (*fetched)->crc32c ^ 1).code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(client->ack_weights(9, (*fetched)->crc32c).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(f.store.worker_versions().at("acker"), 2);
  auto status = client->status();
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(status->counters().at("weight_acks"), 1);
  EXPECT_EQ(status->counters().at("weight_ack_mismatches"), 1);
  EXPECT_EQ(status->counters().at("weight_acks_rejected"), 1);
  EXPECT_EQ(status->counters().at("weights_version"), 2);
}

TEST(WeightSyncTest, TheWeightRpcsNeedTheToken) {
  ControllerServerOptions so;
  so.token = "sesame";
  WeightsFixture f(so);
  ASSERT_TRUE(f.store.publish(small_weights(1)).ok());
  auto anonymous = f.client();
  EXPECT_EQ(anonymous->fetch_weights(-1, 10).status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(anonymous->ack_weights(1, f.store.latest()->crc32c).code(),
            absl::StatusCode::kUnauthenticated);
  auto stub = v1::Controller::NewStub(grpc::CreateChannel(
      "127.0.0.1:" + std::to_string(f.server->port()), grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  auto reader = stub->StreamWeights(&context, v1::WeightsRequest());
  v1::WeightsBucket bucket;
  EXPECT_FALSE(reader->Read(&bucket));
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(f.store.ack_counters().rejected, 0);

  ControllerClientOptions o;
  o.token = "sesame";
  auto client = f.client(o);
  auto fetched = client->fetch_weights(-1, 10);
  ASSERT_TRUE(fetched.ok() && fetched->has_value()) << fetched.status();
  EXPECT_TRUE(client->ack_weights(1, (*fetched)->crc32c).ok());
}

TEST(WeightSyncTest, WallClockASlowTransferEndsWithDeadlineExceeded) {
  WeightsFixture f;
  ASSERT_TRUE(f.store.publish(flat_weights(1, 1 << 20, 16 << 10)).ok());  // 64 buckets
  ControllerClientOptions o;
  o.corrupt_bucket_for_test = [](uint64_t, char*, size_t) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  };
  const auto start = std::chrono::steady_clock::now();
  auto fetched = f.client(o)->fetch_weights(-1, 0.3);
  EXPECT_EQ(fetched.status().code(), absl::StatusCode::kDeadlineExceeded) << fetched.status();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
}

TEST(WeightSyncTest, ATinyTimeoutOnALargePayloadIsDeadlineExceeded) {
  WeightsFixture f;
  ASSERT_TRUE(f.store.publish(flat_weights(1, 32 << 20, 1 << 20)).ok());
  auto fetched = f.client()->fetch_weights(-1, 0.002);
  EXPECT_EQ(fetched.status().code(), absl::StatusCode::kDeadlineExceeded) << fetched.status();
}

}  // namespace
}  // namespace flywheel::buffer
