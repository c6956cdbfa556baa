// Test helpers shared by the controller service tests: a server on loopback port 0 with its
// core and dataset, and valid groups for its leases.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "flywheel/buffer/service/controller_client.h"
#include "flywheel/buffer/service/controller_server.h"
#include "gtest/gtest.h"

namespace flywheel::buffer {

inline ControllerOptions core_options(int64_t prompts) {
  ControllerOptions o;
  o.num_prompts = prompts;
  o.groups_per_step = 4;
  o.max_staleness = 1;
  o.capacity_groups = 64;
  o.limits.vocab_size = 100;
  o.limits.group_size = 2;
  return o;
}

inline std::unique_ptr<PromptDataset> dataset(int64_t n) {
  std::vector<std::string> lines;
  for (int64_t i = 0; i < n; ++i) lines.push_back("{\"prompt\": \"q" + std::to_string(i) + "\"}");
  return std::move(*PromptDataset::from_lines(lines, "test"));
}

inline TrajectoryGroup group_for(uint64_t lease_id, int64_t version, const std::string& id = "") {
  TrajectoryGroup g;
  g.group_id = id.empty() ? "g" + std::to_string(lease_id) : id;
  g.lease_id = lease_id;
  for (int i = 0; i < 2; ++i) {
    Trajectory t;
    t.prompt_ids = {1, 2};
    t.response_ids = {3, 4, 5};
    t.loss_mask = {1, 1, 0};
    t.logprobs = {-0.5f, -0.25f, -1.0f};
    t.versions.assign(3, static_cast<int32_t>(version));
    t.reward = i;
    g.trajectories.push_back(t);
  }
  return g;
}

// A server on loopback port 0 with its core and dataset.
struct Fixture {
  explicit Fixture(ControllerServerOptions server_options = {}, int64_t prompts = 40)
      : Fixture(core_options(prompts), server_options) {}
  // `clock`: the server's (default: its monotonic clock).
  explicit Fixture(const ControllerOptions& options, ControllerServerOptions server_options = {},
                   std::function<double()> clock = nullptr) {
    core = std::move(*ControllerCore::create(options));
    data = dataset(options.num_prompts);
    auto started =
        ControllerServer::start(core.get(), data.get(), server_options, std::move(clock));
    EXPECT_TRUE(started.ok()) << started.status();
    server = std::move(*started);
  }
  std::unique_ptr<ControllerClient> tcp_client(ControllerClientOptions o = {}) {
    o.address = "127.0.0.1:" + std::to_string(server->port());
    if (o.worker_id.empty()) o.worker_id = "w";
    return std::move(*ControllerClient::connect(o));
  }
  std::unique_ptr<ControllerClient> local_client(ControllerClientOptions o = {}) {
    if (o.worker_id.empty()) o.worker_id = "w";
    return std::move(*ControllerClient::over(server->in_process_channel(), o));
  }
  std::unique_ptr<ControllerCore> core;
  std::unique_ptr<PromptDataset> data;
  std::unique_ptr<ControllerServer> server;
};

}  // namespace flywheel::buffer
