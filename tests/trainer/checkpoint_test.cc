// Learner checkpoints under mpirun -np 2: resume is bit-identical, incomplete or mismatched
// checkpoints are refused with the file named, old ones are pruned. With --crash-during-save /
// --resume-after-crash DIR (driven by checkpoint_crash_test.sh) a run killed with SIGKILL while
// writing a checkpoint resumes from the previous complete one.
#include "flywheel/trainer/checkpoint.h"

#include <ATen/ATen.h>
#include <signal.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "../model/test_models.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "learner_test_util.h"
#include "mpi_test_main.h"

namespace flywheel::trainer {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

// A PPO learner with a critic (gae) and a reference model (KL in the reward, adaptive), so that
// every part of the state is checkpointed.
std::unique_ptr<Learner> make_learner(comm::Communicator* comm) {
  LearnerOptions o;
  o.lr.lr = 1e-3;
  o.lr.total_steps = 20;
  o.lr.schedule = core::LrScheduleKind::kCosine;
  o.micro_batch_tokens = 64;
  o.ppo_epochs = 2;
  o.critic = true;
  o.kl_coef = 0.05;
  o.kl_in_reward = true;
  o.adaptive_kl = true;
  const model::ModelConfig config = model::testing::tiny_config("qwen2");
  auto learner = Learner::create(
      o, testing::test_algorithm(algos::AggMode::kTokenMean, "tis", "gae"), config, comm);
  EXPECT_TRUE(learner.ok()) << learner.status();
  (*learner)->policy().init_random(3);
  (*learner)->reference()->init_random(3);
  (*learner)->critic()->init_random(4);
  return std::move(*learner);
}

void train(Learner& learner, int from, int to) {
  for (int s = from; s < to; ++s) {
    auto m = learner.step(testing::synthetic_groups(500 + s, 4, 4, 97));
    ASSERT_TRUE(m.ok()) << m.status();
  }
}

// Every shard and moment of this rank, by name.
std::map<std::string, at::Tensor> local_state(Learner& learner) {
  std::map<std::string, at::Tensor> out;
  for (auto [prefix, model] :
       {std::pair{"policy/", &learner.policy()}, std::pair{"reference/", learner.reference()},
        std::pair{"critic/", learner.critic()}}) {
    for (FlatUnit& u : model->units()) out[prefix + u.name()] = u.shard().detach();
  }
  for (const auto& [n, t] : learner.optimizer().state()) out["opt/" + n] = t;
  for (const auto& [n, t] : learner.critic_optimizer()->state()) out["copt/" + n] = t;
  return out;
}

std::string fresh_dir(comm::Communicator& world, const std::string& name) {
  const std::string dir = ::testing::TempDir() + "/" + name;
  if (world.rank() == 0) fs::remove_all(dir);
  world.barrier();
  return dir;
}

TEST(CheckpointTest, ResumingIsBitIdenticalToNotStopping) {
  auto world = flywheel::testing::world_communicator();
  const std::string dir = fresh_dir(*world, "resume");
  auto straight = make_learner(world.get());
  train(*straight, 0, 10);

  auto first = make_learner(world.get());
  train(*first, 0, 5);
  ASSERT_TRUE(save_checkpoint(*first, dir, 5, {}).ok());
  first.reset();
  auto resumed = make_learner(world.get());
  auto latest = latest_checkpoint(dir);
  ASSERT_TRUE(latest.ok()) << latest.status();
  ASSERT_TRUE(load_checkpoint(*resumed, *latest).ok());
  EXPECT_EQ(resumed->version(), 5);
  train(*resumed, 5, 10);

  EXPECT_EQ(resumed->version(), straight->version());
  EXPECT_EQ(resumed->kl_beta(), straight->kl_beta());
  EXPECT_NE(straight->kl_beta(), 0.05);  // the adaptive controller moved and was restored
  EXPECT_EQ(resumed->optimizer().steps(), straight->optimizer().steps());
  auto a = local_state(*straight), b = local_state(*resumed);
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [name, t] : a) EXPECT_TRUE(at::equal(t, b.at(name))) << name;
}

TEST(CheckpointTest, IncompleteTruncatedAndMismatchedCheckpointsAreRefused) {
  auto world = flywheel::testing::world_communicator();
  const std::string dir = fresh_dir(*world, "bad");
  auto learner = make_learner(world.get());
  train(*learner, 0, 1);
  ASSERT_TRUE(save_checkpoint(*learner, dir, 1, {}).ok());
  ASSERT_TRUE(save_checkpoint(*learner, dir, 2, {}).ok());
  if (world->rank() == 0) fs::remove(fs::path(dir) / "step_2" / "COMPLETE");
  world->barrier();
  EXPECT_EQ(*latest_checkpoint(dir), (fs::path(dir) / "step_1").string());
  absl::Status incomplete = load_checkpoint(*learner, (fs::path(dir) / "step_2").string());
  EXPECT_THAT(std::string(incomplete.message()), HasSubstr("incomplete"));
  // A truncated shard file: an error naming it (every rank returns an error).
  const fs::path shard = fs::path(dir) / "step_1" / "rank-00000-of-00002.safetensors";
  if (world->size() == 2) {
    if (world->rank() == 0) fs::resize_file(shard, fs::file_size(shard) / 2);
    world->barrier();
    absl::Status truncated = load_checkpoint(*learner, (fs::path(dir) / "step_1").string());
    EXPECT_FALSE(truncated.ok());
    if (world->rank() == 0) {
      EXPECT_THAT(std::string(truncated.message()), HasSubstr("rank-00000-of-00002"));
    }
  }
  // Another world size.
  ASSERT_TRUE(save_checkpoint(*learner, dir, 3, {}).ok());
  auto alone = world->split(world->rank(), 0, "alone");
  ASSERT_TRUE(alone.ok());
  if (world->size() > 1) {
    auto small = make_learner(alone->get());
    absl::Status other = load_checkpoint(*small, (fs::path(dir) / "step_3").string());
    EXPECT_THAT(std::string(other.message()), HasSubstr("resume with the same number of ranks"));
  }
  // A learner of another shape.
  LearnerOptions o;
  o.critic = false;
  model::ModelConfig wider = model::testing::tiny_config("qwen2");
  wider.intermediate_size = 64;
  auto different = std::move(
      *Learner::create(o, testing::test_algorithm(algos::AggMode::kTokenMean), wider, world.get()));
  absl::Status shape = load_checkpoint(*different, (fs::path(dir) / "step_3").string());
  EXPECT_FALSE(shape.ok());
  world->barrier();
}

TEST(CheckpointTest, OnlyTheLastKAreKept) {
  auto world = flywheel::testing::world_communicator();
  const std::string dir = fresh_dir(*world, "keep");
  auto learner = make_learner(world.get());
  CheckpointSaveOptions options;
  options.keep_last = 2;
  options.extra_files["controller.json"] = "{\"x\": 1}";
  for (int step = 1; step <= 5; ++step)
    ASSERT_TRUE(save_checkpoint(*learner, dir, step, options).ok());
  world->barrier();
  std::set<std::string> left;
  for (const auto& e : fs::directory_iterator(dir)) left.insert(e.path().filename().string());
  EXPECT_EQ(left, (std::set<std::string>{"step_4", "step_5"}));
  EXPECT_EQ(*read_checkpoint_file(dir + "/step_5", "controller.json"), "{\"x\": 1}");
}

// --crash-during-save DIR: one complete checkpoint, then SIGKILL while writing the next.
int crash_during_save(const std::string& dir) {
  auto world = flywheel::testing::world_communicator();
  auto learner = make_learner(world.get());
  train(*learner, 0, 1);
  if (!save_checkpoint(*learner, dir, 1, {}).ok()) return 1;
  train(*learner, 1, 2);
  CheckpointSaveOptions options;
  options.before_commit = [] { raise(SIGKILL); };
  (void)save_checkpoint(*learner, dir, 2, options);  // killed before it returns
  return 1;                                          // not reached
}

// --resume-after-crash DIR: resumes from step 1, ignoring the half-written step 2.
int resume_after_crash(const std::string& dir) {
  auto world = flywheel::testing::world_communicator();
  auto latest = latest_checkpoint(dir);
  if (!latest.ok() || fs::path(*latest).filename() != "step_1") {
    std::fprintf(stderr, "latest complete checkpoint: %s\n",
                 latest.ok() ? latest->c_str() : std::string(latest.status().message()).c_str());
    return 1;
  }
  if (!fs::exists(fs::path(dir) / "step_2.tmp")) {
    std::fprintf(stderr, "the interrupted save left nothing behind: was it interrupted?\n");
    return 1;
  }
  auto learner = make_learner(world.get());
  absl::Status loaded = load_checkpoint(*learner, *latest);
  if (!loaded.ok() || learner->version() != 1) {
    std::fprintf(stderr, "resume failed: %s\n", std::string(loaded.message()).c_str());
    return 1;
  }
  train(*learner, 1, 2);
  if (!save_checkpoint(*learner, dir, 2, {}).ok()) return 1;
  if (world->rank() == 0) std::printf("resumed from step_1 after the crash, saved step_2\n");
  return 0;
}

}  // namespace
}  // namespace flywheel::trainer

int main(int argc, char** argv) {
  for (int i = 1; i + 1 < argc; ++i) {
    const bool crash = std::strcmp(argv[i], "--crash-during-save") == 0;
    const bool resume = std::strcmp(argv[i], "--resume-after-crash") == 0;
    if (!crash && !resume) continue;
    auto runtime = flywheel::comm::MpiRuntime::init(&argc, &argv);
    if (!runtime.ok()) return 1;
    flywheel::testing::mpi_runtime() = runtime->get();
    return crash ? flywheel::trainer::crash_during_save(argv[i + 1])
                 : flywheel::trainer::resume_after_crash(argv[i + 1]);
  }
  return flywheel::testing::run_mpi_tests(argc, argv);
}
