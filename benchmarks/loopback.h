// Raw loopback TCP throughput, the limit the controller's gRPC benchmarks (buffer_bench,
// weight_sync_bench) print their results beside.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

namespace flywheel::bench {

inline double loopback_seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Bytes per second through `connections` loopback TCP connections at once (1 MiB writes for
// `seconds`, a writer and a reader thread per connection).
inline double raw_loopback_once(double seconds, int connections) {
  std::atomic<int64_t> received{0};
  std::vector<std::thread> threads;
  const auto start = std::chrono::steady_clock::now();
  for (int c = 0; c < connections; ++c) {
    int listener = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;
    bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
    socklen_t len = sizeof(addr);
    getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len);
    listen(listener, 1);
    threads.emplace_back([&received, listener] {
      int fd = accept(listener, nullptr, nullptr);
      std::vector<char> buf(1 << 20);
      ssize_t n;
      while ((n = read(fd, buf.data(), buf.size())) > 0) received += n;
      close(fd);
      close(listener);
    });
    threads.emplace_back([addr, seconds, start] {
      int fd = socket(AF_INET, SOCK_STREAM, 0);
      connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr));
      std::vector<char> chunk(1 << 20, 'x');
      while (loopback_seconds_since(start) < seconds) {
        if (write(fd, chunk.data(), chunk.size()) < 0) break;
      }
      close(fd);
    });
  }
  for (std::thread& t : threads) t.join();
  return received / loopback_seconds_since(start);
}

// The median of three runs (this machine's loopback varies by +-20% from run to run).
inline double raw_loopback_bytes_per_s(double seconds, int connections) {
  double runs[3];
  for (double& r : runs) r = raw_loopback_once(seconds / 3, connections);
  std::sort(runs, runs + 3);
  return runs[1];
}

}  // namespace flywheel::bench
