// `flywheel make-data TASK --out DIR`: the built-in synthetic tasks (eval/synthetic_tasks.h),
// needing no download: a training set and a disjoint held-out set generated from a seed.
#include <algorithm>
#include <filesystem>
#include <iostream>
#include <string>
#include <utility>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "commands.h"
#include "flywheel/core/file_io.h"
#include "flywheel/core/status_macros.h"
#include "flywheel/eval/synthetic_tasks.h"

namespace flywheel::cli {
namespace {

namespace fs = std::filesystem;

struct MakeDataArgs {
  eval::SyntheticTaskOptions task;
  std::string out_dir;
  bool reversed = false;  // --reversed: digit_order sum-lsd
  std::string samples;    // addition-prm --samples: label a policy's answers instead
};

absl::Status run(const MakeDataArgs& args) {
  if (!args.samples.empty()) {
    if (args.task.task != "addition-prm") {
      return absl::InvalidArgumentError("--samples labels answers for addition-prm only");
    }
    FLYWHEEL_ASSIGN_OR_RETURN(std::string labelled, eval::label_addition_samples(args.samples));
    std::error_code ec;
    fs::create_directories(args.out_dir, ec);
    const std::string out = (fs::path(args.out_dir) / "train.jsonl").string();
    FLYWHEEL_RETURN_IF_ERROR(core::write_file_atomically(out, labelled));
    std::cout << "wrote " << std::count(labelled.begin(), labelled.end(), '\n')
              << " step-labelled answers of " << args.samples << " to " << out << "\n";
    return absl::OkStatus();
  }
  FLYWHEEL_ASSIGN_OR_RETURN(auto files, eval::make_synthetic_task(args.task));
  std::error_code ec;
  fs::create_directories(args.out_dir, ec);
  for (const auto& [name, text] : files) {
    FLYWHEEL_RETURN_IF_ERROR(
        core::write_file_atomically((fs::path(args.out_dir) / name).string(), text));
  }
  const eval::SyntheticTaskOptions& t = args.task;
  if (t.task == "guess") {
    std::cout << "wrote " << t.train << " training and " << t.eval
              << " held-out games of guessing a number from 1 to " << t.guess_max << ", and "
              << t.demos << " binary-search demonstration episodes (sft.jsonl; seed " << t.seed
              << ") to " << args.out_dir << "\n";
  } else if (t.task == "calculator") {
    std::cout << "wrote " << t.train << " training and " << t.eval << " held-out products of a "
              << t.digits << "-digit and a 2-digit number, and " << std::min(t.demos, t.train)
              << " demonstration episodes (sft.jsonl; seed " << t.seed << ") to " << args.out_dir
              << "\n";
  } else {
    std::cout << "wrote " << t.train << " training and " << t.eval << " held-out " << t.digits
              << "-digit additions"
              << (t.task == "addition-pairs"   ? " as preference pairs"
                  : t.task == "addition-judge" ? " as judge examples"
                  : t.task == "addition-prm"   ? " as step-labelled answers"
                                               : "")
              << " (seed " << t.seed << ", digit order " << t.digit_order << ") to " << args.out_dir
              << "\n";
  }
  return absl::OkStatus();
}

}  // namespace

void add_make_data_command(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<MakeDataArgs>();
  CLI::App* command = app.add_subcommand(
      "make-data",
      "Write a built-in synthetic task (train.jsonl and a disjoint eval.jsonl) from a seed");
  command
      ->add_option(
          "task", args->task.task,
          "Task: addition (\"a+b=\" -> the sum), addition-pairs (the same prompts as "
          "preference pairs: the sum chosen, a near miss rejected; for flywheel dpo and rm), "
          "addition-judge (\"c|a+b=\" -> \"<sum> <digit marks> yes|no\": examples to SFT an "
          "llm_judge), addition-prm (answers like a policy's, each digit a step labelled "
          "right or wrong: for flywheel rm --process), "
          "calculator (\"a*b=\" -> the product, solved with the calculator environment) or "
          "guess (the guess_number game); calculator and guess also write sft.jsonl")
      ->capture_default_str();
  command->add_option("--out", args->out_dir, "Output directory")->required();
  command
      ->add_option("--digits", args->task.digits,
                   "Digits of each addend (calculator: of the first factor; the second has 2)")
      ->check(CLI::Range(1, 9))
      ->capture_default_str();
  command->add_option("--train", args->task.train, "Training records")
      ->check(CLI::Range(int64_t{1}, int64_t{10000000}))
      ->capture_default_str();
  command->add_option("--eval", args->task.eval, "Held-out records")
      ->check(CLI::Range(int64_t{0}, int64_t{1000000}))
      ->capture_default_str();
  command->add_option("--seed", args->task.seed, "Generator seed")->capture_default_str();
  command->add_option("--max", args->task.guess_max, "guess: the largest hidden number")
      ->capture_default_str();
  command
      ->add_option("--demos", args->task.demos,
                   "calculator, guess: demonstration episodes in sft.jsonl (one record per "
                   "model turn)")
      ->check(CLI::Range(int64_t{0}, int64_t{1000000}))
      ->capture_default_str();
  CLI::Option* order =
      command
          ->add_option("--digit-order", args->task.digit_order,
                       "msd: \"123+456=\" -> \"579\"; sum-lsd: the sum least-significant digit "
                       "first, \"123+456=\" -> \"975\"; lsd: every number least-significant "
                       "digit first, \"321+654=\" -> \"975\" (each answer digit then sits at "
                       "the same distance from the operand digits it depends on, which a small "
                       "model learns fastest)")
          ->check(CLI::IsMember({"msd", "sum-lsd", "lsd"}))
          ->capture_default_str();
  command->add_flag("--reversed", args->reversed, "Shorthand for --digit-order sum-lsd")
      ->excludes(order);
  command->add_option("--samples", args->samples,
                      "addition-prm: label the answers of `flywheel generate`'s output FILE (a "
                      "policy's own, against each record's \"answer\") into <out>/train.jsonl "
                      "instead of drawing answers");
  command->callback([args, exit_code] {
    if (args->reversed) args->task.digit_order = "sum-lsd";
    absl::Status status = run(*args);
    if (!status.ok()) std::cerr << "flywheel make-data: " << status.message() << "\n";
    *exit_code = status.ok() ? kExitOk : kExitUsage;
  });
}

}  // namespace flywheel::cli
