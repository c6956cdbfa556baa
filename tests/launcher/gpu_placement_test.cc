// The launcher's GPU placement (issue 26, item 12): one GPU per learner rank, then one per
// worker; clear errors where NCCL would fail.
#include "flywheel/launcher/gpu_placement.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace flywheel::launcher {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(GpuPlacementTest, LearnersThenWorkersEachOnTheirOwnGpu) {
  auto p = place_on_gpus({/*learners=*/2, /*workers=*/2, {"0", "1", "2", "3"}});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->learners, "0,1");
  EXPECT_THAT(p->workers, ElementsAre("2", "3"));
  EXPECT_EQ(p->note, "");
}

TEST(GpuPlacementTest, WorkersBeyondTheGpusShareWhatIsLeftAndSaySo) {
  auto p = place_on_gpus({2, 3, {"4", "6", "7"}});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->learners, "4,6");
  EXPECT_THAT(p->workers, ElementsAre("7", "7", "7"));
  EXPECT_THAT(p->note, HasSubstr("5 processes on 3 GPU(s)"));
  // No GPU left after the learners: workers share all of them, round-robin.
  auto all = place_on_gpus({2, 3, {"0", "1"}});
  ASSERT_TRUE(all.ok());
  EXPECT_THAT(all->workers, ElementsAre("0", "1", "0"));
}

TEST(GpuPlacementTest, TooFewGpusForTheLearnersOrTheNcclWeightGroupIsAnError) {
  EXPECT_THAT(std::string(place_on_gpus({2, 1, {}}).status().message()),
              HasSubstr("no GPU is visible"));
  EXPECT_THAT(
      std::string(place_on_gpus({3, 1, {"0", "1"}}).status().message()),
      HasSubstr("cluster.num_learners 3 needs one GPU per learner rank, and 2 are visible"));
  GpuPlacementRequest mpmd{2, 2, {"0", "1", "2"}, /*mpmd=*/true, /*nccl_weights=*/true};
  EXPECT_EQ(place_on_gpus(mpmd).status().code(), absl::StatusCode::kFailedPrecondition);
  mpmd.nccl_weights = false;  // MPI weights: workers may share the learners' GPUs
  auto p = place_on_gpus(mpmd);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->learners, "0,1,2");  // one mpirun: learners by local rank, workers after them
  EXPECT_TRUE(p->workers.empty());
}

TEST(GpuPlacementTest, VisibleGpusFollowCudaVisibleDevices) {
  EXPECT_THAT(visible_gpus(nullptr, 3), ElementsAre("0", "1", "2"));
  EXPECT_THAT(visible_gpus("2, 5,", 8), ElementsAre("2", "5"));
  EXPECT_TRUE(visible_gpus("", 8).empty());
}

}  // namespace
}  // namespace flywheel::launcher
