// MpiCommunicator under mpirun (1, 2 and 4 ranks): every collective against values each rank
// can compute on its own, sub-groups, and (with --stuck) a rank that stops responding.
#include "flywheel/comm/mpi_communicator.h"

#include <ATen/ATen.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "gtest/gtest.h"

namespace flywheel::comm {
namespace {

MpiRuntime* g_runtime = nullptr;

CommunicatorOptions options(const char* name, double timeout_s) {
  CommunicatorOptions o;
  o.name = name;
  o.timeout_s = timeout_s;
  return o;
}

std::unique_ptr<MpiCommunicator> world(double timeout_s = 60) {
  auto w = MpiCommunicator::world(*g_runtime, options("test", timeout_s));
  EXPECT_TRUE(w.ok()) << w.status();
  return std::move(*w);
}

TEST(MpiCommunicatorTest, AllReduceSumsMaxesAndMinsEveryDtype) {
  auto w = world();
  const int r = w->rank(), n = w->size();
  for (at::ScalarType dtype : {at::kFloat, at::kDouble, at::kLong, at::kBFloat16}) {
    at::Tensor t = at::arange(5, at::kDouble).add(r).to(dtype);
    w->all_reduce(t, ReduceOp::kSum);
    // sum over ranks of (i + r) = n i + n (n - 1) / 2
    at::Tensor want = at::arange(5, at::kDouble).mul(n).add(n * (n - 1) / 2.0);
    EXPECT_TRUE(at::equal(t.to(at::kDouble), want)) << dtype;
    at::Tensor m = at::full({3}, r, at::TensorOptions().dtype(dtype));
    w->all_reduce(m, ReduceOp::kMax);
    EXPECT_EQ(m[0].item<double>(), n - 1) << dtype;
    w->all_reduce(m, ReduceOp::kMin);
    EXPECT_EQ(m[2].item<double>(), n - 1) << dtype;
  }
  at::Tensor lo = at::full({2}, static_cast<float>(r));
  w->all_reduce(lo, ReduceOp::kMin);
  EXPECT_EQ(lo[1].item<float>(), 0.0f);
}

TEST(MpiCommunicatorTest, AllGatherAndReduceScatterAreInRankOrder) {
  auto w = world();
  const int r = w->rank(), n = w->size();
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16, at::kLong}) {
    at::Tensor shard = at::arange(3, at::kFloat).add(10 * r).to(dtype);
    at::Tensor full = at::empty({3 * n}, at::TensorOptions().dtype(dtype));
    w->all_gather(shard, full);
    for (int k = 0; k < n; ++k) {
      EXPECT_TRUE(
          at::equal(full.narrow(0, 3 * k, 3), at::arange(3, at::kFloat).add(10 * k).to(dtype)));
    }
    at::Tensor later = at::empty_like(full);
    auto work = w->all_gather_async(shard, later);
    work->wait();
    EXPECT_TRUE(at::equal(later, full));
  }
  // Each rank contributes full = [0, 1, ..., 2n) * (r + 1); rank k gets its slice of the sum.
  for (at::ScalarType dtype : {at::kFloat, at::kDouble, at::kBFloat16}) {
    at::Tensor full = at::arange(2 * n, at::kFloat).mul(r + 1).to(dtype);
    at::Tensor shard = at::empty({2}, at::TensorOptions().dtype(dtype));
    w->reduce_scatter(full, shard, ReduceOp::kSum);
    const double ranks = n * (n + 1) / 2.0;
    for (int i = 0; i < 2; ++i) {
      EXPECT_EQ(shard[i].item<double>(), (2 * r + i) * ranks) << dtype;
    }
  }
}

TEST(MpiCommunicatorTest, BroadcastFromEveryRootAndBarrier) {
  auto w = world();
  for (int root = 0; root < w->size(); ++root) {
    at::Tensor t = at::full({4}, w->rank() == root ? 7.0 + root : -1.0, at::kDouble);
    w->broadcast(t, root);
    EXPECT_EQ(t[3].item<double>(), 7.0 + root);
  }
  w->barrier();
}

// Rank 0's bytes on every rank, in chunks: a 1003-byte string in chunks of 64, 1003 and 5000
// bytes, the empty string, and bytes with zeros in them.
TEST(MpiCommunicatorTest, BroadcastStringSendsRankZerosBytesInChunks) {
  auto w = world();
  std::string value(1003, '\0');
  for (size_t i = 0; i < value.size(); ++i) value[i] = static_cast<char>((i * 7) % 256);
  for (int64_t chunk : {64, 1003, 5000}) {
    const std::string mine = w->rank() == 0 ? value : std::string("not rank 0");
    EXPECT_EQ(broadcast_string(*w, mine, chunk), value) << chunk;
  }
  EXPECT_EQ(broadcast_string(*w, w->rank() == 0 ? "" : "x"), "");
}

TEST(DeviceCheckTest, TwoRanksOnOneGpuAreNamed) {
  EXPECT_TRUE(
      check_distinct_devices({"a:0000:01:00.0", "a:0000:02:00.0", "b:0000:01:00.0"}, "g").ok());
  absl::Status s = check_distinct_devices(
      {"a:0000:01:00.0", "a:0000:02:00.0", "a:0000:01:00.0", "a:0000:01:00.0"}, "learners");
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("group 'learners': ranks 0, 2, 3 are all on a:0000:01:00.0"),
            std::string::npos)
      << s.message();
}

TEST(MpiCommunicatorTest, SplitMakesIndependentSubGroups) {
  auto w = world();
  auto half = w->split(w->rank() % 2, w->rank(), "parity");
  ASSERT_TRUE(half.ok()) << half.status();
  const int members = (w->size() + 1 - w->rank() % 2) / 2;
  EXPECT_EQ((*half)->size(), members);
  EXPECT_EQ((*half)->rank(), w->rank() / 2);
  EXPECT_EQ((*half)->options().name, "parity");
  at::Tensor t = at::full({1}, static_cast<double>(w->rank()), at::kDouble);
  (*half)->all_reduce(t, ReduceOp::kSum);
  double want = 0;
  for (int k = w->rank() % 2; k < w->size(); k += 2) want += k;
  EXPECT_EQ(t.item<double>(), want);
}

TEST(MpiCommunicatorTest, BadTensorsAreCheckedNotSent) {
  auto w = world();
  at::Tensor t = at::ones({4, 4}).t();  // not contiguous
  EXPECT_THROW(w->all_reduce(t, ReduceOp::kSum), c10::Error);
  at::Tensor shard = at::ones({2}), wrong = at::ones({3});
  EXPECT_THROW(w->all_gather(shard, wrong), c10::Error);
  EXPECT_FALSE(MpiCommunicator::world(*g_runtime, options("x", 0)).ok());
}

// Run with --stuck DIR under mpirun: after one all_reduce together, rank 1 stops responding;
// rank 0 must exit with the timeout message within its 2 s deadline, naming rank 1 from the
// progress records in DIR (the driving script checks the exit code and the message).
int run_stuck(const char* progress_dir) {
  CommunicatorOptions stuck = options("test", /*timeout_s=*/2);
  stuck.progress_dir = progress_dir;
  auto created = MpiCommunicator::world(*g_runtime, stuck);
  if (!created.ok()) return 1;
  std::unique_ptr<MpiCommunicator> w = std::move(*created);
  at::Tensor t = at::ones({8});
  w->all_reduce(t, ReduceOp::kSum);
  if (w->rank() == 1) {
    std::this_thread::sleep_for(std::chrono::seconds(120));
    return 0;
  }
  w->all_reduce(t, ReduceOp::kSum);
  std::fprintf(stderr, "all_reduce returned although rank 1 never joined\n");
  return 1;
}

}  // namespace
}  // namespace flywheel::comm

int main(int argc, char** argv) {
  auto runtime = flywheel::comm::MpiRuntime::init(&argc, &argv);
  if (!runtime.ok()) {
    std::fprintf(stderr, "%s\n", std::string(runtime.status().message()).c_str());
    return 1;
  }
  flywheel::comm::g_runtime = runtime->get();
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--stuck") == 0 && i + 1 < argc) {
      return flywheel::comm::run_stuck(argv[i + 1]);
    }
  }
  ::testing::InitGoogleTest(&argc, argv);
  // Only rank 0 prints gtest's progress; every rank's failures still fail the run.
  if ((*runtime)->world_rank() != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  return RUN_ALL_TESTS();
}
