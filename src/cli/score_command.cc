// `flywheel score --model DIR --input in.jsonl --output out.jsonl`: teacher-forced per-token
// log-probs and the greedy next token at every position.
#include <cmath>
#include <exception>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "commands.h"
#include "flywheel/core/jsonl_io.h"
#include "flywheel/core/status_macros.h"
#include "flywheel/model/logprobs.h"
#include "flywheel/model/tokenizer/tokenizer.h"
#include "model_args.h"

namespace flywheel::cli {
namespace {

struct ScoreArgs {
  ModelArgs model;
  std::string input = "-";
  std::string output = "-";
  double temperature = 1.0;
  int batch_size = 8;
};

struct Pending {
  core::Json record;
  std::vector<int64_t> ids;  // each in [0, vocab_size)
  std::string where;         // "path:line"
};

// Scores one batch and writes its records.
void score_batch_unchecked(const model::DecoderModel& model, std::vector<Pending>* batch,
                           double temperature, core::JsonlWriter* out) {
  at::NoGradGuard no_grad;
  const int64_t B = batch->size();
  int64_t T = 0;
  for (const Pending& p : *batch) T = std::max<int64_t>(T, p.ids.size());
  model::ForwardBatch forward;
  forward.tokens = at::zeros({B, T}, at::kLong);
  forward.positions = at::zeros({B, T}, at::kLong);
  forward.segment_ids = at::zeros({B, T}, at::kLong);
  for (int64_t b = 0; b < B; ++b) {
    const auto& ids = (*batch)[b].ids;
    const int64_t n = ids.size();
    forward.tokens[b].narrow(0, 0, n).copy_(at::tensor(ids, at::kLong));
    forward.positions[b].narrow(0, 0, n).copy_(at::arange(n, at::kLong));
    forward.segment_ids[b].narrow(0, 0, n).fill_(1);
  }
  at::Tensor hidden = model.forward(forward);
  model::TokenLogprobOptions options;
  options.temperature = temperature;
  at::Tensor logprobs =
      T > 1 ? model::token_logprobs(hidden.narrow(1, 0, T - 1), model.lm_head_weight(),
                                    forward.tokens.narrow(1, 1, T - 1), options)
                  .logprobs
            : at::zeros({B, 0});
  at::Tensor greedy = model::greedy_tokens(hidden, model.lm_head_weight());
  for (int64_t b = 0; b < B; ++b) {
    Pending& p = (*batch)[b];
    const int64_t n = p.ids.size();
    core::Json lp = core::Json::array(), next = core::Json::array();
    double sum = 0;
    for (int64_t t = 0; t + 1 < n; ++t) {
      double v = logprobs[b][t].item<double>();
      sum += v;
      lp.push_back(core::Json(v));
    }
    for (int64_t t = 0; t < n; ++t) next.push_back(core::Json(greedy[b][t].item<int64_t>()));
    p.record.set("logprobs", std::move(lp));
    p.record.set("greedy", std::move(next));
    p.record.set("sum_logprob", core::Json(sum));
    if (n > 1) p.record.set("perplexity", core::Json(std::exp(-sum / (n - 1))));
    out->write(p.record);
  }
  batch->clear();
}

// score_batch_unchecked(), with LibTorch's exceptions (c10::Error, std::bad_alloc) returned as
// errors naming the batch's lines.
absl::Status score_batch(const model::DecoderModel& model, std::vector<Pending>* batch,
                         double temperature, core::JsonlWriter* out) {
  const std::string lines = batch->size() == 1
                                ? batch->front().where
                                : absl::StrCat(batch->front().where, " to ", batch->back().where);
  try {
    score_batch_unchecked(model, batch, temperature, out);
    return absl::OkStatus();
  } catch (const c10::Error& e) {
    return absl::InternalError(
        absl::StrCat(lines, ": scoring failed: ", e.what_without_backtrace()));
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat(lines, ": scoring failed: ", e.what()));
  }
}

absl::Status run(const ScoreArgs& args) {
  absl::StatusOr<std::unique_ptr<model::DecoderModel>> model = args.model.load();
  if (!model.ok()) return model.status();
  const int64_t vocab = (*model)->config().vocab_size;
  std::unique_ptr<model::Tokenizer> tokenizer;  // loaded on the first {"text": ...} line
  absl::StatusOr<std::unique_ptr<core::JsonlReader>> in = core::JsonlReader::open(args.input);
  if (!in.ok()) return in.status();
  FLYWHEEL_ASSIGN_OR_RETURN(std::unique_ptr<core::JsonlWriter> out,
                            core::JsonlWriter::open(args.output));
  std::vector<Pending> batch;
  int64_t scored = 0;
  while (true) {
    absl::StatusOr<std::optional<core::Json>> line = (*in)->next();
    if (!line.ok()) return line.status();
    if (!line->has_value()) break;
    Pending p{std::move(**line), {}, (*in)->where()};
    const core::Json* ids = p.record.find("ids");
    const core::Json* text = p.record.find("text");
    if (ids != nullptr && ids->is_array()) {
      for (const core::Json& id : ids->as_array()) {
        if (!id.is_integer() || id.as_int() < 0 || id.as_int() >= vocab) {
          return absl::InvalidArgumentError(absl::StrCat(
              (*in)->where(), ": ids must be integers in [0, ", vocab, ") for this model"));
        }
        p.ids.push_back(id.as_int());
      }
    } else if (text != nullptr && text->is_string()) {
      if (!tokenizer) {
        FLYWHEEL_ASSIGN_OR_RETURN(std::unique_ptr<model::Tokenizer> loaded,
                                  model::load_tokenizer(args.model.dir));
        tokenizer = std::move(loaded);
      }
      absl::StatusOr<std::vector<int64_t>> encoded = tokenizer->encode(text->as_string());
      if (!encoded.ok())
        return absl::InvalidArgumentError(
            absl::StrCat((*in)->where(), ": ", encoded.status().message()));
      p.ids = std::move(*encoded);
      for (int64_t id : p.ids) {
        if (id < 0 || id >= vocab) {
          return absl::InvalidArgumentError(absl::StrCat(
              p.where, ": the tokenizer gave id ", id, ", outside the model's vocabulary [0, ",
              vocab, "): the tokenizer does not match the model"));
        }
      }
      core::Json list = core::Json::array();
      for (int64_t id : p.ids) list.push_back(core::Json(id));
      p.record.set("ids", std::move(list));
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat((*in)->where(), ": expected \"ids\": [...] or \"text\": \"...\""));
    }
    if (p.ids.empty())
      return absl::InvalidArgumentError(absl::StrCat((*in)->where(), ": empty sequence"));
    if (static_cast<int64_t>(p.ids.size()) > (*model)->config().max_position_embeddings) {
      return absl::InvalidArgumentError(absl::StrCat(
          (*in)->where(), ": ", p.ids.size(), " tokens exceed max_position_embeddings (",
          (*model)->config().max_position_embeddings, ")"));
    }
    batch.push_back(std::move(p));
    if (static_cast<int>(batch.size()) == args.batch_size) {
      scored += batch.size();
      absl::Status status = score_batch(**model, &batch, args.temperature, out.get());
      if (!status.ok()) return status;
    }
  }
  scored += batch.size();
  if (!batch.empty()) {
    FLYWHEEL_RETURN_IF_ERROR(score_batch(**model, &batch, args.temperature, out.get()));
  }
  std::cerr << "flywheel score: " << scored << " sequence(s)\n";
  return out->close();
}

}  // namespace

void add_score_command(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<ScoreArgs>();
  CLI::App* command = app.add_subcommand(
      "score",
      "Teacher-forced per-token log-probs of {\"ids\": [...]} or {\"text\": ...} lines, plus the "
      "greedy next token at every position (reference log-probs, perplexity, parity checks)");
  args->model.add_to(command);
  command->add_option("-i,--input", args->input, "JSONL input ('-' = stdin)");
  command->add_option("-o,--output", args->output,
                      "JSONL output ('-' = stdout): each input line plus \"logprobs\" (n-1 values: "
                      "token t given tokens < t), \"greedy\" (n next-token argmaxes), "
                      "\"sum_logprob\" and \"perplexity\"");
  command->add_option("--temperature", args->temperature, "Divide logits by this first")
      ->check(CLI::PositiveNumber);
  command->add_option("--batch-size", args->batch_size, "Sequences per forward pass")
      ->check(CLI::Range(1, 4096));
  command->callback([args, exit_code] {
    absl::Status status = run(*args);
    if (!status.ok()) std::cerr << "flywheel score: " << status.message() << "\n";
    *exit_code = status.ok() ? kExitOk : kExitUsage;
  });
}

}  // namespace flywheel::cli
