// `flywheel tokenize --tokenizer DIR --input in.jsonl --output out.jsonl [--decode]`.
#include <iostream>
#include <memory>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "commands.h"
#include "flywheel/core/jsonl_io.h"
#include "flywheel/core/status_macros.h"
#include "flywheel/model/tokenizer/chat_messages.h"
#include "flywheel/model/tokenizer/chat_template.h"
#include "flywheel/model/tokenizer/tokenizer.h"

namespace flywheel::cli {
namespace {

struct TokenizeArgs {
  std::string tokenizer_dir;
  std::string type = "auto";
  std::string input = "-";
  std::string output = "-";
  bool decode = false;
  bool no_special_tokens = false;
  bool skip_special_tokens = false;
  std::string chat_template = "auto";
};

absl::Status run(const TokenizeArgs& args) {
  FLYWHEEL_ASSIGN_OR_RETURN(std::unique_ptr<model::Tokenizer> tokenizer,
                            model::load_tokenizer(args.tokenizer_dir, args.type));
  absl::StatusOr<std::unique_ptr<core::JsonlReader>> in = core::JsonlReader::open(args.input);
  if (!in.ok()) return in.status();
  FLYWHEEL_ASSIGN_OR_RETURN(std::unique_ptr<core::JsonlWriter> out,
                            core::JsonlWriter::open(args.output));
  model::EncodeOptions encode_options;
  encode_options.add_special_tokens = !args.no_special_tokens;
  model::DecodeOptions decode_options;
  decode_options.skip_special_tokens = args.skip_special_tokens;
  std::optional<model::ChatTemplate> chat_template;  // resolved on the first "messages" line
  while (true) {
    absl::StatusOr<std::optional<core::Json>> line = (*in)->next();
    if (!line.ok()) return line.status();
    if (!line->has_value()) break;
    core::Json& record = **line;
    if (args.decode) {
      const core::Json* ids = record.find("ids");
      if (ids == nullptr || !ids->is_array()) {
        return absl::InvalidArgumentError(
            absl::StrCat((*in)->where(), ": expected \"ids\": [...]"));
      }
      std::vector<int64_t> values;
      for (const core::Json& id : ids->as_array()) {
        if (!id.is_integer()) {
          return absl::InvalidArgumentError(absl::StrCat((*in)->where(), ": ids must be integers"));
        }
        values.push_back(id.as_int());
      }
      absl::StatusOr<std::string> text = tokenizer->decode(values, decode_options);
      if (!text.ok())
        return absl::InvalidArgumentError(
            absl::StrCat((*in)->where(), ": ", text.status().message()));
      record.set("text", core::Json(*text));
    } else {
      const core::Json* text = record.find("text");
      const core::Json* messages = record.find("messages");
      std::string input;
      model::EncodeOptions options = encode_options;
      if (text != nullptr && text->is_string()) {
        input = text->as_string();
      } else if (messages != nullptr) {
        if (!chat_template) {
          FLYWHEEL_ASSIGN_OR_RETURN(
              model::ChatTemplate resolved,
              model::ChatTemplate::resolve(args.chat_template, args.tokenizer_dir));
          chat_template = resolved;
        }
        FLYWHEEL_ASSIGN_OR_RETURN(std::vector<model::ChatMessage> parsed,
                                  model::parse_messages(*messages, (*in)->where()));
        absl::StatusOr<std::string> prompt = chat_template->render(parsed);
        if (!prompt.ok())
          return absl::InvalidArgumentError(
              absl::StrCat((*in)->where(), ": ", prompt.status().message()));
        input = *prompt;
        record.set("prompt", core::Json(input));
        options.add_special_tokens = false;  // the template already holds them, as in HF
      } else {
        return absl::InvalidArgumentError(
            absl::StrCat((*in)->where(), ": expected \"text\": \"...\" or \"messages\": [...]"));
      }
      absl::StatusOr<std::vector<int64_t>> ids = tokenizer->encode(input, options);
      if (!ids.ok())
        return absl::InvalidArgumentError(
            absl::StrCat((*in)->where(), ": ", ids.status().message()));
      core::Json list = core::Json::array();
      for (int64_t id : *ids) list.push_back(core::Json(id));
      record.set("ids", std::move(list));
    }
    out->write(record);
  }
  return out->close();
}

}  // namespace

void add_tokenize_command(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<TokenizeArgs>();
  CLI::App* command = app.add_subcommand(
      "tokenize",
      "Encode {\"text\": ...} (or {\"messages\": [...]}, rendered with the chat template) JSONL "
      "lines to {..., \"ids\": [...]}, or decode \"ids\" with --decode");
  command
      ->add_option("--tokenizer", args->tokenizer_dir,
                   "Directory with tokenizer.json (or char_tokenizer.json)")
      ->required();
  command->add_option("--type", args->type, "auto | hf | char")
      ->check(CLI::IsMember({"auto", "hf", "char"}));
  command->add_option("-i,--input", args->input, "JSONL input ('-' = stdin)");
  command->add_option("-o,--output", args->output, "JSONL output ('-' = stdout)");
  command->add_flag("--decode", args->decode, "Decode \"ids\" to \"text\" instead of encoding");
  command->add_flag("--no-special-tokens", args->no_special_tokens,
                    "Encode without the post-processor's special tokens (e.g. BOS)");
  command->add_flag("--skip-special-tokens", args->skip_special_tokens,
                    "Leave special tokens out of decoded text");
  command
      ->add_option("--chat-template", args->chat_template,
                   "Template for {\"messages\": [...]} lines: auto (from tokenizer_config.json), "
                   "chatml, qwen3 or llama3")
      ->check(CLI::IsMember({"auto", "chatml", "qwen3", "llama3"}));
  command->callback([args, exit_code] {
    absl::Status status = run(*args);
    if (!status.ok()) std::cerr << "flywheel tokenize: " << status.message() << "\n";
    *exit_code = status.ok() ? kExitOk : kExitUsage;
  });
}

}  // namespace flywheel::cli
