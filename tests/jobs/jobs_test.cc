// flywheel_jobs: the controller learner rank 0 hosts, and how a rollout worker's start fails.
// (The whole learner and worker jobs run in the integration tests: e2e, multinode, stall.)
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>

#include "../model/test_models.h"
#include "../testing/scratch_dir.h"
#include "flywheel/jobs/controller_host.h"
#include "flywheel/jobs/job_setup.h"
#include "flywheel/jobs/rollout_job.h"
#include "flywheel/model/hf_checkpoint.h"
#include "flywheel/model/tokenizer/tokenizer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace flywheel::jobs {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

// A tiny qwen2 model with the character tokenizer, three prompts, and a config naming them.
class TinyJob {
 public:
  TinyJob() {
    config_ = model::testing::tiny_config("qwen2");
    config_.vocab_size = 100;  // the default character tokenizer
    const std::string model_dir = dir_.sub("model");
    EXPECT_TRUE(model::save_hf_model(*model::testing::tiny_model(config_), model_dir).ok());
    EXPECT_TRUE(model::save_default_char_tokenizer(model_dir).ok());
    std::ofstream(dir_.sub("train.jsonl")) << "{\"prompt\": \"1+2=\", \"answer\": \"3\"}\n"
                                              "{\"prompt\": \"2+2=\", \"answer\": \"4\"}\n"
                                              "{\"prompt\": \"3+4=\", \"answer\": \"7\"}\n";
    std::ofstream(dir_.sub("job.yaml"))
        << "model: {path: " << model_dir << ", dtype: float32, max_seq_len: 32}\n"
        << "tokenizer: {type: char, chat_template: none}\n"
        << "data: {train_path: " << dir_.sub("train.jsonl") << "}\n"
        << "rollout: {group_size: 2, max_new_tokens: 4}\n"
        << "rewards: {functions: [{name: exact_match, weight: 1.0}]}\n"
        << "buffer: {server: {reconnect_timeout_s: 0.5}}\n"
        << "logging: {run_dir: " << dir_.sub("run") << "}\n";
  }

  JobSetup setup(const std::vector<std::string>& overrides = {}) const {
    absl::StatusOr<JobSetup> job = set_up_job(dir_.sub("job.yaml"), overrides);
    EXPECT_TRUE(job.ok()) << job.status();
    return std::move(*job);
  }
  const model::ModelConfig& model_config() const { return config_; }

 private:
  testing::ScratchDir dir_{"flywheel_jobs"};
  model::ModelConfig config_;
};

TEST(ControllerHostTest, ServesWorkersAtItsAddressAndLogsTheBuffersCounters) {
  TinyJob tiny;
  JobSetup job = tiny.setup();
  absl::StatusOr<std::unique_ptr<ControllerHost>> host =
      start_controller(job, tiny.model_config(), at::kFloat, /*version=*/0, /*snapshot=*/"");
  ASSERT_TRUE(host.ok()) << host.status();
  EXPECT_THAT((*host)->address, StartsWith("127.0.0.1:"));
  EXPECT_NE((*host)->server->port(), 0);
  EXPECT_EQ((*host)->setup.dataset->size(), 3);

  absl::StatusOr<buffer::ControllerClientOptions> options =
      controller_client_options(job.loaded.config, (*host)->address, "worker-a");
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_FALSE(options->weight_deltas);  // a worker on the controller's loopback copies versions
  auto client = buffer::ControllerClient::connect(*options);
  ASSERT_TRUE(client.ok()) << client.status();
  absl::StatusOr<v1::RegisterReply> registered = (*client)->register_worker();
  ASSERT_TRUE(registered.ok()) << registered.status();
  EXPECT_EQ(registered->weights_dtype(), "float32");  // what the workers must run

  std::map<std::string, double> logged;
  (*host)->stepped(1, [&](const std::string& name, double value, int64_t step) {
    EXPECT_EQ(step, 1);
    logged[name] = value;
  });
  EXPECT_EQ(logged.count("buffer/granted"), 1u);
  EXPECT_EQ(logged.count("weight_sync/acks"), 1u);
  EXPECT_EQ(logged.count("weight_sync/checksum_mismatches"), 1u);
  EXPECT_EQ((*host)->lost_summary(), "");
  (*host)->server->shutdown();
}

TEST(ControllerHostTest, AConfigWithoutPromptsIsRefused) {
  TinyJob tiny;
  JobSetup job = tiny.setup({"data.train_path="});
  absl::StatusOr<std::unique_ptr<ControllerHost>> host =
      start_controller(job, tiny.model_config(), at::kFloat, 0, "");
  ASSERT_FALSE(host.ok());
  EXPECT_THAT(std::string(host.status().message()), HasSubstr("data.train_path must be set"));
}

TEST(RolloutJobTest, StartFailuresNameTheirCauseAndNeverCountAsServing) {
  TinyJob tiny;
  JobSetup job = tiny.setup();
  auto never = [] { return false; };

  // No controller address, outside an MPMD mpirun.
  bool serving = true;
  absl::Status s = run_rollout_worker(job, RolloutJobOptions{}, never, &serving);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("--controller HOST:PORT"));

  // A controller that has gone: its address, named, and the worker never served.
  std::string gone;
  {
    auto host = start_controller(job, tiny.model_config(), at::kFloat, 0, "");
    ASSERT_TRUE(host.ok()) << host.status();
    gone = (*host)->address;
    (*host)->server->shutdown();
  }
  serving = false;
  RolloutJobOptions options;
  options.controller = gone;
  options.worker_id = "worker-b";
  s = run_rollout_worker(job, options, never, &serving);
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("cannot register with the controller at " + gone));
  EXPECT_FALSE(serving);
}

}  // namespace
}  // namespace flywheel::jobs
