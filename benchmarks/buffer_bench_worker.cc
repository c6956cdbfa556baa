#include "buffer_bench_worker.h"

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <random>
#include <vector>

#include "flywheel/buffer/service/controller_client.h"
#include "flywheel/buffer/wire_codec.h"
#include "flywheel/v1/controller.grpc.pb.h"

namespace flywheel::bench {
namespace {

using Clock = std::chrono::steady_clock;
using buffer::Trajectory;
using buffer::TrajectoryGroup;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

TrajectoryGroup make_group(uint64_t lease, int samples, int tokens) {
  TrajectoryGroup g;
  g.group_id = "g" + std::to_string(lease);
  g.lease_id = lease;
  for (int s = 0; s < samples; ++s) {
    Trajectory t;
    t.prompt_ids.assign(64, 7);
    t.response_ids.assign(tokens, 11);
    t.loss_mask.assign(tokens, 1);
    t.logprobs.assign(tokens, -0.5f);
    t.versions.assign(tokens, 0);
    t.reward = s % 2;
    t.sample_index = s;
    g.trajectories.push_back(std::move(t));
  }
  return g;
}

}  // namespace

int run_push_worker(const PushWorkerOptions& o) {
  buffer::ControllerClientOptions co;
  co.address = o.address;
  co.worker_id = "bench";
  co.max_message_bytes = 256 << 20;
  auto client = buffer::ControllerClient::connect(co);
  if (!client.ok()) {
    std::fprintf(stderr, "push worker: %s\n", std::string(client.status().message()).c_str());
    return 1;
  }
  // The groups are built once and pushed again under new leases: building 27 MB of tokens per
  // call would otherwise be most of what this process measures.
  std::vector<TrajectoryGroup> batch(o.groups_per_call, make_group(0, o.samples, o.tokens));
  const size_t group_bytes = buffer::encoded_size(batch[0], co.worker_id);
  int64_t groups = 0;
  const auto start = Clock::now();
  while (seconds_since(start) < o.seconds) {
    auto work = (*client)->acquire_work(o.groups_per_call);
    if (!work.ok()) {
      std::fprintf(stderr, "push worker: %s\n", std::string(work.status().message()).c_str());
      return 1;
    }
    batch.resize(work->leases_size(), batch.empty() ? TrajectoryGroup() : batch[0]);
    for (int i = 0; i < work->leases_size(); ++i) {
      batch[i].lease_id = work->leases(i).lease_id();
      batch[i].group_id = "g" + std::to_string(batch[i].lease_id);
    }
    auto acks = (*client)->push_groups(batch);
    if (!acks.ok()) {
      std::fprintf(stderr, "push failed: %s\n", std::string(acks.status().message()).c_str());
      return 1;
    }
    for (const auto& ack : *acks) {
      if (ack.code() != 0) {
        std::fprintf(stderr, "push rejected: %s\n", ack.message().c_str());
        return 1;
      }
    }
    groups += static_cast<int64_t>(batch.size());
  }
  const double elapsed = seconds_since(start);
  std::printf("groups %lld seconds %.6f group_bytes %zu\n", static_cast<long long>(groups), elapsed,
              group_bytes);
  return 0;
}

int run_acquire_worker(const AcquireWorkerOptions& o) {
  struct Worker {
    std::unique_ptr<v1::Controller::Stub> stub;
    std::unique_ptr<grpc::ClientContext> context;
    v1::AcquireWorkRequest request;
    v1::AcquireWorkReply reply;
    grpc::Status status;
    std::unique_ptr<grpc::ClientAsyncResponseReader<v1::AcquireWorkReply>> reader;
    Clock::time_point issued;
    Clock::time_point next;  // when to issue the next call (while idle)
    bool busy = false;
  };
  grpc::CompletionQueue queue;
  std::vector<Worker> workers(o.workers);
  std::mt19937_64 rng(std::random_device{}());
  std::exponential_distribution<double> think(o.rate_hz > 0 ? o.rate_hz : 1.0);
  const auto start = Clock::now();
  for (int i = 0; i < o.workers; ++i) {
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);  // a connection of its own
    workers[i].stub = v1::Controller::NewStub(
        grpc::CreateCustomChannel(o.address, grpc::InsecureChannelCredentials(), args));
    workers[i].request.set_worker_id("w" + std::to_string(i));
    workers[i].request.set_max_prompts(1);
    workers[i].next = start;
  }
  auto issue = [&](Worker& w) {
    w.context = std::make_unique<grpc::ClientContext>();
    w.reply.Clear();
    w.issued = Clock::now();
    w.reader = w.stub->AsyncAcquireWork(w.context.get(), w.request, &queue);
    w.reader->Finish(&w.reply, &w.status, &w);
    w.busy = true;
  };
  std::vector<double> latencies_us;
  int64_t failed = 0;
  const auto end = start + std::chrono::duration_cast<Clock::duration>(
                               std::chrono::duration<double>(o.warmup_s + o.seconds));
  int in_flight = 0;
  while (true) {
    const auto now = Clock::now();
    auto wake = end;
    for (Worker& w : workers) {
      if (w.busy) continue;
      if (now < end && w.next <= now) {
        issue(w);
        ++in_flight;
      } else if (w.next < wake) {
        wake = w.next;
      }
    }
    if (now >= end && in_flight == 0) break;
    void* tag;
    bool ok;
    const auto deadline = std::chrono::system_clock::now() + (wake - Clock::now());
    if (queue.AsyncNext(&tag, &ok, deadline) != grpc::CompletionQueue::GOT_EVENT) continue;
    Worker& w = *static_cast<Worker*>(tag);
    const auto done = Clock::now();
    w.busy = false;
    --in_flight;
    if (!ok || !w.status.ok()) {
      ++failed;
    } else if (w.issued - start >= std::chrono::duration<double>(o.warmup_s)) {
      latencies_us.push_back(std::chrono::duration<double, std::micro>(done - w.issued).count());
    }
    w.next = done + std::chrono::duration_cast<Clock::duration>(
                        std::chrono::duration<double>(o.rate_hz > 0 ? think(rng) : 0.0));
  }
  std::printf("latencies %zu failed %lld\n", latencies_us.size(), static_cast<long long>(failed));
  for (double us : latencies_us) std::printf("%.1f\n", us);
  return 0;
}

}  // namespace flywheel::bench
