// `flywheel make-data addition --out DIR`: the built-in synthetic task of the quickstart, needing
// no download: N-digit additions "a+b=" with the sum as the answer, a training set and a
// disjoint held-out set, generated from a seed. Records carry "prompt", "response" (for the SFT
// warm-up) and "answer" (for rewards and held-out accuracy).
#include <algorithm>
#include <filesystem>
#include <iostream>
#include <random>
#include <set>
#include <string>
#include <utility>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "commands.h"
#include "flywheel/core/file_io.h"
#include "flywheel/core/json.h"
#include "flywheel/core/status_macros.h"

namespace flywheel::cli {
namespace {

namespace fs = std::filesystem;

struct MakeDataArgs {
  std::string task = "addition";
  std::string out_dir;
  int digits = 3;
  int64_t train = 20000;
  int64_t eval = 200;
  uint64_t seed = 7;
  std::string digit_order = "msd";  // msd | sum-lsd | lsd
  bool reversed = false;            // --reversed: digit_order sum-lsd
};

// `n` written least-significant digit first when `lsd`.
std::string digits_of(int64_t n, bool lsd) {
  std::string s = std::to_string(n);
  if (lsd) std::reverse(s.begin(), s.end());
  return s;
}

std::string record(int64_t a, int64_t b, const std::string& order) {
  core::Json json = core::Json::object();
  const bool operands_lsd = order == "lsd";
  const std::string sum = digits_of(a + b, order != "msd");
  json.set("prompt",
           absl::StrCat(digits_of(a, operands_lsd), "+", digits_of(b, operands_lsd), "="));
  json.set("response", sum);
  json.set("answer", sum);
  return json.dump();
}

absl::Status run(const MakeDataArgs& args) {
  if (args.task != "addition") {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown task '", args.task, "' (available: addition)"));
  }
  int64_t range = 1;
  for (int i = 0; i < args.digits; ++i) range *= 10;
  const int64_t low = range / 10;  // exactly `digits` digits
  const double pairs = static_cast<double>(range - low) * static_cast<double>(range - low);
  if (static_cast<double>(args.train + args.eval) > pairs / 2) {
    return absl::InvalidArgumentError(
        absl::StrCat(args.train + args.eval, " records need more distinct ", args.digits,
                     "-digit pairs than there are (", static_cast<int64_t>(pairs), ")"));
  }
  std::mt19937_64 rng(args.seed);
  std::uniform_int_distribution<int64_t> operand(low, range - 1);
  std::set<std::pair<int64_t, int64_t>> seen;
  auto draw = [&](int64_t n) {
    std::string lines;
    for (int64_t i = 0; i < n;) {
      const int64_t a = operand(rng), b = operand(rng);
      if (!seen.insert({a, b}).second) continue;  // held-out pairs never appear in training
      lines += record(a, b, args.digit_order) + "\n";
      ++i;
    }
    return lines;
  };
  const std::string eval = draw(args.eval);
  const std::string train = draw(args.train);
  std::error_code ec;
  fs::create_directories(args.out_dir, ec);
  for (const auto& [name, text] :
       {std::pair{"train.jsonl", &train}, std::pair{"eval.jsonl", &eval}}) {
    FLYWHEEL_RETURN_IF_ERROR(
        core::write_file_atomically((fs::path(args.out_dir) / name).string(), *text));
  }
  std::cout << "wrote " << args.train << " training and " << args.eval << " held-out "
            << args.digits << "-digit additions (seed " << args.seed << ", digit order "
            << args.digit_order << ") to " << args.out_dir << "\n";
  return absl::OkStatus();
}

}  // namespace

void add_make_data_command(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<MakeDataArgs>();
  CLI::App* command = app.add_subcommand(
      "make-data",
      "Write a built-in synthetic task (train.jsonl and a disjoint eval.jsonl) from a seed");
  command->add_option("task", args->task, "Task: addition (\"a+b=\" -> the sum)")
      ->capture_default_str();
  command->add_option("--out", args->out_dir, "Output directory")->required();
  command->add_option("--digits", args->digits, "Digits of each operand")
      ->check(CLI::Range(1, 9))
      ->capture_default_str();
  command->add_option("--train", args->train, "Training records")
      ->check(CLI::Range(int64_t{1}, int64_t{10000000}))
      ->capture_default_str();
  command->add_option("--eval", args->eval, "Held-out records")
      ->check(CLI::Range(int64_t{0}, int64_t{1000000}))
      ->capture_default_str();
  command->add_option("--seed", args->seed, "Generator seed")->capture_default_str();
  CLI::Option* order =
      command
          ->add_option("--digit-order", args->digit_order,
                       "msd: \"123+456=\" -> \"579\"; sum-lsd: the sum least-significant digit "
                       "first, \"123+456=\" -> \"975\"; lsd: every number least-significant "
                       "digit first, \"321+654=\" -> \"975\" (each answer digit then sits at "
                       "the same distance from the operand digits it depends on, which a small "
                       "model learns fastest)")
          ->check(CLI::IsMember({"msd", "sum-lsd", "lsd"}))
          ->capture_default_str();
  command->add_flag("--reversed", args->reversed, "Shorthand for --digit-order sum-lsd")
      ->excludes(order);
  command->callback([args, exit_code] {
    if (args->reversed) args->digit_order = "sum-lsd";
    absl::Status status = run(*args);
    if (!status.ok()) std::cerr << "flywheel make-data: " << status.message() << "\n";
    *exit_code = status.ok() ? kExitOk : kExitUsage;
  });
}

}  // namespace flywheel::cli
