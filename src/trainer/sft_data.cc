#include "flywheel/trainer/sft_data.h"

#include <algorithm>
#include <numeric>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "flywheel/core/jsonl_io.h"
#include "flywheel/core/status_macros.h"
#include "flywheel/model/tokenizer/chat_messages.h"

namespace flywheel::trainer {
absl::StatusOr<std::vector<int32_t>> encode_in_vocabulary(const model::Tokenizer& tokenizer,
                                                          const std::string& text, bool special,
                                                          int64_t vocab_size) {
  model::EncodeOptions options;
  options.add_special_tokens = special;
  FLYWHEEL_ASSIGN_OR_RETURN(std::vector<int64_t> ids, tokenizer.encode(text, options));
  std::vector<int32_t> out;
  for (int64_t id : ids) {
    if (id < 0 || id >= vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the tokenizer gives id ", id, ", outside the model's vocabulary [0, ", vocab_size, ")"));
    }
    out.push_back(static_cast<int32_t>(id));
  }
  return out;
}

SftDataOptions SftDataOptions::from_config(const core::Config& config, int64_t vocab_size) {
  SftDataOptions o;
  o.prompt_key = config.data.prompt_key;
  o.messages_key = config.data.messages_key;
  o.response_key = config.sft.response_key;
  o.answer_key = config.data.answer_key;
  o.max_tokens = config.model.max_seq_len;
  o.vocab_size = vocab_size;
  return o;
}

absl::StatusOr<SftData> load_sft_data(const std::string& path, const SftDataOptions& options,
                                      const model::Tokenizer& tokenizer,
                                      const model::ChatTemplate* chat_template) {
  FLYWHEEL_ASSIGN_OR_RETURN(std::unique_ptr<core::JsonlReader> in, core::JsonlReader::open(path));
  SftData data;
  while (true) {
    absl::StatusOr<std::optional<core::Json>> line = in->next();
    if (!line.ok()) return line.status();
    if (!line->has_value()) break;
    const core::Json& record = **line;
    const std::string where = in->where();
    auto bad = [&](absl::string_view why) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": ", why));
    };
    std::string prompt_text, response_text;
    bool chat = false;
    if (const core::Json* messages = record.find(options.messages_key)) {
      if (chat_template == nullptr) return bad("chat records need a chat template");
      FLYWHEEL_ASSIGN_OR_RETURN(std::vector<model::ChatMessage> parsed,
                                model::parse_messages(*messages, where));
      if (parsed.size() < 2 || parsed.back().role != "assistant") {
        return bad("a chat record must end with the assistant's message (the response)");
      }
      response_text = parsed.back().content;
      parsed.pop_back();
      absl::StatusOr<std::string> rendered = chat_template->render(parsed, true);
      if (!rendered.ok()) return bad(rendered.status().message());
      prompt_text = *rendered;
      chat = true;
    } else {
      const core::Json* prompt = record.find(options.prompt_key);
      const core::Json* response = record.find(options.response_key);
      const bool response_ok =
          response != nullptr ? response->is_string() : !options.require_response;
      if (prompt == nullptr || !prompt->is_string() || !response_ok) {
        return bad(absl::StrCat("expected string \"", options.prompt_key, "\" and \"",
                                options.response_key, "\", or \"", options.messages_key, "\""));
      }
      prompt_text = prompt->as_string();
      if (response != nullptr) response_text = response->as_string();
    }
    SftRecord r;
    // A rendered chat carries its own special tokens; a plain prompt gets the tokenizer's.
    absl::StatusOr<std::vector<int32_t>> prompt =
        encode_in_vocabulary(tokenizer, prompt_text, /*special=*/!chat, options.vocab_size);
    if (!prompt.ok()) return bad(prompt.status().message());
    absl::StatusOr<std::vector<int32_t>> response =
        encode_in_vocabulary(tokenizer, response_text, /*special=*/false, options.vocab_size);
    if (!response.ok()) return bad(response.status().message());
    if (prompt->empty()) return bad("the prompt is empty");
    r.example.prompt = std::move(*prompt);
    r.example.response = std::move(*response);
    if (options.eos_id >= 0) r.example.response.push_back(static_cast<int32_t>(options.eos_id));
    if (r.example.response.empty() && options.require_response) {
      return bad("the response is empty");
    }
    if (static_cast<int64_t>(r.example.prompt.size() + r.example.response.size()) >
        options.max_tokens) {
      ++data.skipped_too_long;
      continue;
    }
    if (const core::Json* answer = record.find(options.answer_key)) {
      r.has_answer = true;
      r.answer = answer->is_string() ? answer->as_string() : answer->dump();
    }
    if (options.keep_records) {
      r.prompt_text = std::move(prompt_text);
      r.record = std::make_shared<const core::Json>(record);
      r.where = where;
    }
    data.records.push_back(std::move(r));
  }
  if (data.records.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": no usable records (", data.skipped_too_long, " too long)"));
  }
  return data;
}

namespace {

std::vector<int64_t> epoch_order(int64_t n, int64_t epoch, const SftBatchOptions& options) {
  std::vector<int64_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  if (options.shuffle) {
    std::mt19937_64 rng(options.seed * 1000003 + static_cast<uint64_t>(epoch));
    std::shuffle(order.begin(), order.end(), rng);
  }
  return order;
}

}  // namespace

void save_cursor(const SftCursor& cursor, int64_t records, std::map<std::string, double>* scalars) {
  (*scalars)["data_epoch"] = static_cast<double>(cursor.epoch);
  (*scalars)["data_position"] = static_cast<double>(cursor.position);
  (*scalars)["data_records"] = static_cast<double>(records);
}

absl::StatusOr<SftCursor> restore_cursor(const std::map<std::string, double>& scalars,
                                         int64_t records, const std::string& from) {
  auto scalar = [&](const char* name) {
    auto it = scalars.find(name);
    return it == scalars.end() ? 0.0 : it->second;
  };
  if (scalars.count("data_records") && static_cast<int64_t>(scalar("data_records")) != records) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s was trained on %d records of data.train_path; it now has %d: resume with the same "
        "data (or checkpoint.resume: never)",
        from, static_cast<int64_t>(scalar("data_records")), records));
  }
  SftCursor cursor;
  cursor.epoch = static_cast<int64_t>(scalar("data_epoch"));
  cursor.position = static_cast<int64_t>(scalar("data_position"));
  return cursor;
}

std::vector<int64_t> next_batch_indices(int64_t records, SftCursor* cursor,
                                        const SftBatchOptions& options, int rank, int world) {
  const int64_t n = records;
  std::vector<int64_t> order = epoch_order(n, cursor->epoch, options);
  std::vector<int64_t> mine;
  for (int64_t j = 0; j < options.batch_size; ++j) {
    if (cursor->position >= n) {
      ++cursor->epoch;
      cursor->position = 0;
      order = epoch_order(n, cursor->epoch, options);
    }
    const int64_t record = order[cursor->position++];
    if (j % world == rank) mine.push_back(record);
  }
  return mine;
}

std::vector<const SftExample*> next_sft_batch(const SftData& data, SftCursor* cursor,
                                              const SftBatchOptions& options, int rank, int world) {
  std::vector<const SftExample*> mine;
  for (int64_t i : next_batch_indices(static_cast<int64_t>(data.records.size()), cursor, options,
                                      rank, world)) {
    mine.push_back(&data.records[i].example);
  }
  return mine;
}

std::vector<const SftExample*> rank_share(const SftData& data, int rank, int world) {
  std::vector<const SftExample*> mine;
  for (size_t i = rank; i < data.records.size(); i += world) {
    mine.push_back(&data.records[i].example);
  }
  return mine;
}

}  // namespace flywheel::trainer
