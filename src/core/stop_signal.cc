#include "flywheel/core/stop_signal.h"

#include <pthread.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <utility>

namespace flywheel::core {

StopSignal::StopSignal(std::string who) : who_(std::move(who)) {
  sigemptyset(&set_);
  sigaddset(&set_, SIGINT);
  sigaddset(&set_, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set_, nullptr);  // before any other thread starts
  if (const char* file = std::getenv("FLYWHEEL_STOP_FILE")) stop_file_ = file;
  thread_ = std::thread([this] {
    while (true) {
      int signal_number = 0;
      sigwait(&set_, &signal_number);
      if (done_.load()) return;
      if (stop_.exchange(true)) {  // a second signal: stop now, without a checkpoint
        std::fprintf(stderr, "%s: second signal, exiting without a checkpoint\n", who_.c_str());
        std::_Exit(128 + signal_number);
      }
      std::fprintf(stderr, "%s: stopping after this step (again to stop at once)\n", who_.c_str());
    }
  });
  const char* launcher = std::getenv("FLYWHEEL_LAUNCHER_PID");
  const pid_t pid = launcher != nullptr ? static_cast<pid_t>(std::atol(launcher)) : 0;
  if (pid > 1) {
    watch_ = std::thread([this, pid] {
      while (!done_.load()) {
        if (kill(pid, 0) != 0 && errno == ESRCH) {
          std::fprintf(stderr, "%s: the launcher (pid %d) is gone; exiting\n", who_.c_str(),
                       static_cast<int>(pid));
          std::_Exit(137);
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(250));
      }
    });
  }
}

StopSignal::~StopSignal() {
  done_.store(true);
  pthread_kill(thread_.native_handle(), SIGTERM);  // wakes sigwait
  thread_.join();
  if (watch_.joinable()) watch_.join();
}

bool StopSignal::requested() const {
  if (stop_.load()) return true;
  std::error_code ec;
  return !stop_file_.empty() && std::filesystem::exists(stop_file_, ec);
}

}  // namespace flywheel::core
