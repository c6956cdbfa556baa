// The learner on CUDA with NCCL (label gpu; run on a machine with a GPU): gradients of the
// sharded decoder and 3 RL steps equal the CPU float32 results (max difference printed).
#include <ATen/ATen.h>
#include <ATen/Context.h>

#include <cstdio>

#include "../model/test_models.h"
#include "flywheel/comm/nccl_communicator.h"
#include "gtest/gtest.h"
#include "learner_test_util.h"
#include "mpi_test_main.h"

namespace flywheel::trainer {
namespace {

struct Result {
  std::vector<Metrics> steps;
  std::map<std::string, at::Tensor> params;
};

Result train(comm::Communicator* comm, at::Device device) {
  LearnerOptions o;
  o.lr.lr = 1e-4;
  o.lr.total_steps = 10;
  o.micro_batch_tokens = 64;
  o.ppo_epochs = 2;
  o.sharding.device = device;
  const model::ModelConfig config = model::testing::tiny_config("qwen2");
  auto learner = std::move(
      *Learner::create(o, testing::test_algorithm(algos::AggMode::kTokenMean), config, comm));
  learner->policy().init_random(3);
  Result r;
  for (int s = 0; s < 3; ++s) {
    auto m = learner->step(testing::synthetic_groups(700 + s, 8, 4, config.vocab_size));
    EXPECT_TRUE(m.ok()) << m.status();
    if (m.ok()) r.steps.push_back(*m);
  }
  learner->policy().for_each_full_bucket(
      1 << 20, at::kFloat, [&](const std::vector<std::pair<std::string, at::Tensor>>& bucket) {
        for (const auto& [name, t] : bucket) r.params[name] = t.cpu();
      });
  return r;
}

TEST(GpuParityTest, LearnerOnCudaWithNcclEqualsCpu) {
  if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device";
  at::globalContext().setAllowTF32CuBLAS(false);  // float32 matmuls in float32
  auto world = flywheel::testing::world_communicator();
  comm::CommunicatorOptions options;
  options.name = "gpu";
  options.timeout_s = 120;
  auto nccl = comm::NcclCommunicator::create(*world, /*device=*/0, options);
  ASSERT_TRUE(nccl.ok()) << nccl.status();
  Result cpu = train(world.get(), at::kCPU);
  Result gpu = train(nccl->get(), at::Device(at::kCUDA, 0));
  ASSERT_EQ(cpu.steps.size(), gpu.steps.size());
  double metric = 0, param = 0;
  for (size_t s = 0; s < cpu.steps.size(); ++s) {
    for (const char* key : {"actor/pg_loss", "actor/grad_norm"}) {
      metric = std::max(metric, std::abs(cpu.steps[s].at(key) - gpu.steps[s].at(key)));
    }
  }
  for (const auto& [name, t] : cpu.params) {
    param = std::max(param, (t - gpu.params.at(name)).abs().max().item<double>());
  }
  std::printf("  CUDA vs CPU after 3 steps: max |metric diff| %.3g, max |param diff| %.3g\n",
              metric, param);
  EXPECT_LE(metric, 1e-4);
  EXPECT_LE(param, 1e-4);
}

}  // namespace
}  // namespace flywheel::trainer

int main(int argc, char** argv) { return flywheel::testing::run_mpi_tests(argc, argv); }
