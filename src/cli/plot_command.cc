// `flywheel plot RUN_DIR [--metrics a,b] [--output out.png]`: renders metrics with gnuplot.
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "commands.h"
#include "flywheel/core/metrics_reader.h"
#include "flywheel/core/registry.h"
#include "flywheel/core/status_macros.h"

extern char** environ;

namespace flywheel::cli {
namespace {

namespace fs = std::filesystem;

struct PlotArgs {
  std::string run_dir;
  std::vector<std::string> metrics;
  std::string output;
  int width = 1200;
  int height_per_row = 300;
};

// gnuplot single-quoted strings escape ' as ''.
std::string gnuplot_quote(const std::string& s) {
  return absl::StrCat("'", absl::StrReplaceAll(s, {{"'", "''"}}), "'");
}

absl::Status run_gnuplot(const std::string& script_path) {
  pid_t pid;
  std::string program = "gnuplot";
  std::vector<char*> argv = {program.data(), const_cast<char*>(script_path.c_str()), nullptr};
  int rc = posix_spawnp(&pid, "gnuplot", nullptr, nullptr, argv.data(), environ);
  if (rc != 0) {
    return absl::FailedPreconditionError(
        "cannot run gnuplot; install it (Debian: gnuplot-nox; scripts/bootstrap.sh does)");
  }
  int status = 0;
  if (waitpid(pid, &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return absl::InternalError(absl::StrCat("gnuplot failed (script kept at ", script_path, ")"));
  }
  return absl::OkStatus();
}

absl::Status plot(const PlotArgs& args) {
  std::string metrics_path = (fs::path(args.run_dir) / "metrics.jsonl").string();
  FLYWHEEL_ASSIGN_OR_RETURN(core::MetricsFile file, core::read_metrics_jsonl(metrics_path));
  if (file.skipped_lines > 0) {
    std::cerr << "flywheel plot: skipped " << file.skipped_lines
              << " malformed line(s), first: " << file.first_skip_reason << "\n";
  }
  std::vector<std::string> available;
  for (const auto& [name, series] : file.series) available.push_back(name);
  std::vector<std::string> chosen = args.metrics.empty() ? available : args.metrics;
  for (const std::string& name : chosen) {
    if (!file.series.count(name)) return core::unknown_name_error("metric", name, available);
  }
  if (chosen.empty()) return absl::InvalidArgumentError("no numeric metrics to plot");

  std::string output =
      args.output.empty() ? (fs::path(args.run_dir) / "metrics.png").string() : args.output;
  fs::path work = fs::temp_directory_path() / absl::StrCat("flywheel-plot-", getpid());
  std::error_code ec;
  fs::create_directories(work, ec);
  if (ec) return absl::UnavailableError(absl::StrCat("cannot create ", work.string()));

  int columns = chosen.size() > 1 ? 2 : 1;
  int rows = static_cast<int>((chosen.size() + columns - 1) / columns);
  std::string script =
      absl::StrCat("set terminal pngcairo size ", args.width, ",", args.height_per_row * rows,
                   " font ',9'\nset output ", gnuplot_quote(output), "\nset grid\nset key off\n",
                   "set xlabel 'step'\nset multiplot layout ", rows, ",", columns, "\n");
  for (size_t i = 0; i < chosen.size(); ++i) {
    std::string data_path = (work / absl::StrCat("series", i, ".dat")).string();
    std::ofstream data(data_path);
    for (const auto& [step, value] : file.series.at(chosen[i]).points) {
      data << step << " " << absl::StrCat(value) << "\n";
    }
    absl::StrAppend(&script, "set title ", gnuplot_quote(chosen[i]), " noenhanced\nplot ",
                    gnuplot_quote(data_path), " using 1:2 with linespoints pt 7 ps 0.4\n");
  }
  script += "unset multiplot\n";
  std::string script_path = (work / "plot.gp").string();
  std::ofstream(script_path) << script;
  absl::Status status = run_gnuplot(script_path);
  if (status.ok()) {
    fs::remove_all(work, ec);
    std::cout << "wrote " << output << " (" << absl::StrJoin(chosen, ", ") << ")\n";
  }
  return status;
}

}  // namespace

void add_plot_command(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<PlotArgs>();
  CLI::App* command = app.add_subcommand(
      "plot", "Render metrics of a run (RUN_DIR/metrics.jsonl) to a PNG with gnuplot");
  command->add_option("run_dir", args->run_dir, "Run directory (logging.run_dir)")->required();
  command->add_option("-m,--metrics", args->metrics, "Metrics to plot (default: all)")
      ->delimiter(',');
  command->add_option("-o,--output", args->output, "PNG file (default: RUN_DIR/metrics.png)");
  command->add_option("--width", args->width, "Image width in pixels")
      ->check(CLI::Range(200, 10000));
  command->add_option("--row-height", args->height_per_row, "Pixels per row of plots")
      ->check(CLI::Range(100, 5000));
  command->callback([args, exit_code] {
    absl::Status status = plot(*args);
    if (!status.ok()) std::cerr << "flywheel plot: " << status.message() << "\n";
    *exit_code = status.ok() ? kExitOk : (absl::IsNotFound(status) ? kExitUsage : kExitFailure);
  });
}

}  // namespace flywheel::cli
