// Test helper: the real `flywheel buffer` binary as a child process, with a config, a prompt
// file and a model config.json written into a temporary directory.
#pragma once

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

extern char** environ;

namespace flywheel::buffer {

class BufferProcess {
 public:
  // A job directory under the test's temporary directory: `prompts` one-line prompts, groups of
  // `group_size` and a vocabulary of 100; `extra_yaml` is appended to the config.
  static std::string make_job(const std::string& name, int prompts, int group_size,
                              const std::string& extra_yaml = "") {
    namespace fs = std::filesystem;
    const fs::path dir = fs::path(::testing::TempDir()) / (name + "_" + std::to_string(getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir / "model");
    std::ofstream(dir / "model" / "config.json")
        << R"({"model_type": "llama", "vocab_size": 100, "hidden_size": 32,
              "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 4})";
    std::ofstream data(dir / "prompts.jsonl");
    for (int i = 0; i < prompts; ++i) data << "{\"prompt\": \"q" << i << "\"}\n";
    data.close();
    std::ofstream(dir / "job.yaml")
        << "model: {path: " << (dir / "model").string() << "}\n"
        << "data: {train_path: " << (dir / "prompts.jsonl").string() << "}\n"
        << "rollout: {group_size: " << group_size << "}\n"
        << extra_yaml;
    return dir.string();
  }

  // Starts `flywheel buffer <dir>/job.yaml --snapshot <dir>/state.json`, with `env` ("K=V")
  // added to this process's environment, and waits for its "listening on" line. port() is 0
  // when it did not come up.
  explicit BufferProcess(const std::string& dir, const std::vector<std::string>& env = {})
      : dir_(dir) {
    int out[2];
    if (pipe(out) != 0) return;
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
    posix_spawn_file_actions_addclose(&actions, out[0]);
    const std::string config = dir + "/job.yaml", snapshot = dir + "/state.json";
    std::vector<std::string> args = {FLYWHEEL_BINARY, "buffer", config, "--snapshot", snapshot};
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    std::vector<std::string> env_strings = env;
    for (char** e = environ; *e != nullptr; ++e) env_strings.emplace_back(*e);
    std::vector<char*> envp;
    for (std::string& e : env_strings) envp.push_back(e.data());
    envp.push_back(nullptr);
    if (posix_spawn(&pid_, FLYWHEEL_BINARY, &actions, nullptr, argv.data(), envp.data()) != 0) {
      pid_ = 0;
    }
    posix_spawn_file_actions_destroy(&actions);
    close(out[1]);
    FILE* stream = fdopen(out[0], "r");
    char line[512];
    while (pid_ != 0 && fgets(line, sizeof(line), stream) != nullptr) {
      const std::string text(line);
      const size_t at = text.find("listening on ");
      if (at == std::string::npos) continue;
      port_ = std::stoi(text.substr(text.rfind(':') + 1));
      break;
    }
    stdout_ = stream;  // kept open: a write to a closed pipe would kill the server
  }
  ~BufferProcess() {
    if (pid_ != 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    if (stdout_ != nullptr) fclose(stdout_);
  }

  int port() const { return port_; }
  pid_t pid() const { return pid_; }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }

  // SIGTERM (the server writes its snapshot), then the exit status; -1 if it did not exit.
  int stop() {
    if (pid_ == 0) return -1;
    kill(pid_, SIGTERM);
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = 0;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }

  // The process's resident memory in bytes (VmRSS), or -1.
  int64_t rss_bytes() const {
    std::ifstream status("/proc/" + std::to_string(pid_) + "/status");
    std::string key;
    while (status >> key) {
      if (key == "VmRSS:") {
        int64_t kb = 0;
        status >> kb;
        return kb * 1024;
      }
      std::getline(status, key);
    }
    return -1;
  }

 private:
  std::string dir_;
  pid_t pid_ = 0;
  int port_ = 0;
  FILE* stdout_ = nullptr;
};

}  // namespace flywheel::buffer
