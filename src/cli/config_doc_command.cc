// `flywheel config-doc [--output FILE]`: the configuration reference (docs/config.md).
#include <fstream>
#include <iostream>
#include <memory>
#include <string>

#include "CLI/CLI.hpp"
#include "commands.h"
#include "flywheel/core/config_loader.h"

namespace flywheel::cli {
namespace {

int run_config_doc(const std::string& output) {
  std::string doc = core::config_reference_markdown();
  if (output.empty()) {
    std::cout << doc;
    return kExitOk;
  }
  std::ofstream out(output, std::ios::binary | std::ios::trunc);
  out << doc;
  if (!out.good()) {
    std::cerr << "flywheel: cannot write '" << output << "'\n";
    return kExitFailure;
  }
  return kExitOk;
}

}  // namespace

void add_config_doc_command(CLI::App& app, int* exit_code) {
  auto output = std::make_shared<std::string>();
  CLI::App* command =
      app.add_subcommand("config-doc",
                         "Print the configuration reference (every key, type, default, constraint) "
                         "as Markdown; docs/config.md is its output");
  command->add_option("-o,--output", *output, "Write to FILE instead of stdout");
  command->callback([output, exit_code] { *exit_code = run_config_doc(*output); });
}

}  // namespace flywheel::cli
