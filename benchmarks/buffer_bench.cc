// buffer_bench: trajectory push throughput into the controller over loopback gRPC, beside raw
// loopback TCP throughput measured in the same run; and AcquireWork latency with 64 concurrent
// workers.
//
//   build/benchmarks/buffer_bench [--seconds S]
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>
#include "flywheel/buffer/controller_client.h"
#include "flywheel/buffer/controller_server.h"
#include "flywheel/v1/controller.grpc.pb.h"
#include "flywheel/v1/trajectory.pb.h"

namespace {

using Clock = std::chrono::steady_clock;
using namespace flywheel::buffer;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// Bytes per second through one loopback TCP connection (1 MiB writes for `seconds`).
double raw_loopback_bytes_per_s(double seconds) {
  int listener = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len);
  listen(listener, 1);
  std::atomic<int64_t> received{0};
  std::thread reader([&] {
    int fd = accept(listener, nullptr, nullptr);
    std::vector<char> buf(1 << 20);
    ssize_t n;
    while ((n = read(fd, buf.data(), buf.size())) > 0) received += n;
    close(fd);
  });
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  std::vector<char> chunk(1 << 20, 'x');
  auto start = Clock::now();
  while (seconds_since(start) < seconds) {
    if (write(fd, chunk.data(), chunk.size()) < 0) break;
  }
  close(fd);
  reader.join();
  double elapsed = seconds_since(start);
  close(listener);
  return received / elapsed;
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

struct Setup {
  std::unique_ptr<ControllerCore> core;
  std::unique_ptr<PromptDataset> data;
  std::unique_ptr<ControllerServer> server;
};

Setup start_controller(int group_size, int64_t prompts) {
  ControllerOptions o;
  o.num_prompts = prompts;
  o.groups_per_step = 1 << 20;  // the budget never binds in this bench
  o.max_staleness = 0;
  o.capacity_groups = 1 << 20;
  o.capacity_bytes = int64_t{8} << 30;
  o.lease_timeout_s = 1e6;
  o.worker_timeout_s = 1e6;
  o.limits.vocab_size = 1000;
  o.limits.group_size = group_size;
  Setup s;
  s.core = std::move(*ControllerCore::create(o));
  std::vector<std::string> lines(prompts, "{\"prompt\": \"p\"}");
  s.data = std::move(*PromptDataset::from_lines(lines, "bench"));
  ControllerServerOptions so;
  so.max_message_bytes = 256 << 20;
  s.server = std::move(*ControllerServer::start(s.core.get(), s.data.get(), so));
  return s;
}

void push_bench(const char* name, int samples, int tokens, int groups_per_call, double seconds,
                double raw) {
  Setup s = start_controller(samples, 1 << 20);
  ControllerClientOptions co;
  co.address = "127.0.0.1:" + std::to_string(s.server->port());
  co.worker_id = "bench";
  co.max_message_bytes = 256 << 20;
  auto client = std::move(*ControllerClient::connect(co));
  std::atomic<bool> stop{false};
  std::thread drain([&] {  // the learner side: keep the buffer from growing without bound
    while (!stop) {
      if (!s.core->take_batch(std::max<int64_t>(1, s.core->buffered())).ok()) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    }
  });
  // Bytes on the wire: the serialized size of one group.
  flywheel::v1::TrajectoryGroup wire;
  {
    const TrajectoryGroup g = make_group(1, samples, tokens);
    wire.set_group_id(g.group_id);
    for (const Trajectory& t : g.trajectories) {
      auto* tp = wire.add_trajectories();
      for (int64_t id : t.prompt_ids) tp->add_prompt_ids(id);
      for (int64_t id : t.response_ids) tp->add_response_ids(id);
      tp->set_loss_mask(std::string(t.loss_mask.begin(), t.loss_mask.end()));
      for (float lp : t.logprobs) tp->add_logprobs(lp);
      for (int64_t v : t.versions) tp->add_versions(v);
    }
  }
  const int64_t group_bytes = static_cast<int64_t>(wire.ByteSizeLong());
  int64_t groups = 0;
  double busy = 0;
  auto start = Clock::now();
  while (seconds_since(start) < seconds) {
    auto work = client->acquire_work(groups_per_call);
    std::vector<TrajectoryGroup> batch;
    for (const auto& l : work->leases()) batch.push_back(make_group(l.lease_id(), samples, tokens));
    auto t = Clock::now();
    auto acks = client->push_groups(batch);
    busy += seconds_since(t);
    if (!acks.ok()) {
      std::fprintf(stderr, "push failed: %s\n", std::string(acks.status().message()).c_str());
      break;
    }
    groups += batch.size();
  }
  stop = true;
  drain.join();
  const double mb_per_s = groups * group_bytes / busy / 1e6;
  std::printf(
      "%-6s %2d x %5d tokens  %9.1f groups/s  %8.1f MB/s on the wire  raw loopback %8.1f MB/s  "
      "%5.1f%%\n",
      name, samples, tokens, groups / busy, mb_per_s, raw / 1e6, 100 * mb_per_s / (raw / 1e6));
}

// `workers` AcquireWork calls kept in flight at all times (64 concurrent workers), issued
// asynchronously from one thread so that 64 client threads do not compete with the server for
// the machine's two cores; each call's latency is measured from issue to completion.
void latency_bench(int workers, int total_calls) {
  Setup s = start_controller(1, 1 << 22);
  auto channel = grpc::CreateChannel("127.0.0.1:" + std::to_string(s.server->port()),
                                     grpc::InsecureChannelCredentials());
  auto stub = flywheel::v1::Controller::NewStub(channel);
  grpc::CompletionQueue queue;
  struct Call {
    grpc::ClientContext context;
    flywheel::v1::AcquireWorkRequest request;
    flywheel::v1::AcquireWorkReply reply;
    grpc::Status status;
    Clock::time_point start;
    std::unique_ptr<grpc::ClientAsyncResponseReader<flywheel::v1::AcquireWorkReply>> reader;
  };
  int issued = 0;
  auto issue = [&](int worker) {
    auto* call = new Call();
    call->request.set_worker_id("w" + std::to_string(worker));
    call->request.set_max_prompts(1);
    call->start = Clock::now();
    call->reader = stub->AsyncAcquireWork(&call->context, call->request, &queue);
    call->reader->Finish(&call->reply, &call->status, call);
    ++issued;
  };
  for (int w = 0; w < workers; ++w) issue(w);
  std::vector<double> latencies;
  int failed = 0;
  void* tag;
  bool ok;
  while (static_cast<int>(latencies.size()) + failed < total_calls && queue.Next(&tag, &ok)) {
    std::unique_ptr<Call> call(static_cast<Call*>(tag));
    if (ok && call->status.ok()) {
      latencies.push_back(seconds_since(call->start));
    } else {
      ++failed;
    }
    if (issued < total_calls) issue(issued % workers);
  }
  queue.Shutdown();
  while (queue.Next(&tag, &ok)) delete static_cast<Call*>(tag);
  std::sort(latencies.begin(), latencies.end());
  auto q = [&](double p) {
    return latencies[std::min(latencies.size() - 1, static_cast<size_t>(p * latencies.size()))];
  };
  std::printf(
      "AcquireWork, %d calls always in flight: %zu calls (%d failed), p50 %.3f ms, "
      "p99 %.3f ms (target p99 < 2 ms)\n",
      workers, latencies.size(), failed, q(0.5) * 1e3, q(0.99) * 1e3);
}

}  // namespace

int main(int argc, char** argv) {
  double seconds = 3;
  std::string only;  // small | large | latency; empty = all
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--seconds") && i + 1 < argc) {
      seconds = std::atof(argv[++i]);
    } else if (!std::strcmp(argv[i], "--case") && i + 1 < argc) {
      only = argv[++i];
    } else {
      std::fprintf(stderr, "usage: buffer_bench [--seconds S] [--case small|large|latency]\n");
      return 2;
    }
  }
  auto run = [&](const char* name) { return only.empty() || only == name; };
  const double raw = raw_loopback_bytes_per_s(seconds);
  std::printf("buffer_bench: pushes into the controller over loopback gRPC (plaintext)\n");
  std::printf("raw loopback TCP, one connection (measured in this run): %.1f MB/s\n\n", raw / 1e6);
  if (run("small")) push_bench("small", 8, 256, 64, seconds, raw);
  if (run("large")) push_bench("large", 16, 8192, 16, seconds, raw);
  if (run("latency")) {
    latency_bench(64, 20000);
    latency_bench(8, 20000);
  }
  return 0;
}
