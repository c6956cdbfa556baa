// flywheel: RL post-training of LLMs. `flywheel --help` lists the subcommands.
#include <iostream>
#include <new>

#include "CLI/CLI.hpp"
#include "commands.h"
#include "flywheel/core/build_info.h"
#include "flywheel/model/cpu/cpu_allocator.h"

int main(int argc, char** argv) {
  using namespace flywheel::cli;
  // Large tensors on huge pages: first-touch page faults cost a quarter of a training step.
  flywheel::model::use_huge_pages_for_large_cpu_tensors();
  CLI::App app{"flywheel " FLYWHEEL_VERSION_STRING
               ": reinforcement-learning post-training of large language models",
               "flywheel"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "flywheel " FLYWHEEL_VERSION_STRING);
  int exit_code = kExitOk;
  add_train_command(app, &exit_code);
  add_eval_command(app, &exit_code);
  add_sft_command(app, &exit_code);
  add_dpo_command(app, &exit_code);
  add_rm_command(app, &exit_code);
  add_make_data_command(app, &exit_code);
  add_learner_command(app, &exit_code);
  add_rollout_command(app, &exit_code);
  add_generate_command(app, &exit_code);
  add_reward_command(app, &exit_code);
  add_reward_serve_command(app, &exit_code);
  add_score_command(app, &exit_code);
  add_buffer_command(app, &exit_code);
  add_tokenize_command(app, &exit_code);
  add_init_model_command(app, &exit_code);
  add_export_command(app, &exit_code);
  add_plot_command(app, &exit_code);
  add_validate_config_command(app, &exit_code);
  add_config_doc_command(app, &exit_code);
  add_version_command(app, &exit_code);
  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return kExitUsage;
  } catch (const std::bad_alloc&) {
    // Inputs are bounded before they are allocated; this is the last line for what is not.
    std::cerr << "flywheel: out of memory\n";
    return kExitFailure;
  }
  return exit_code;
}
