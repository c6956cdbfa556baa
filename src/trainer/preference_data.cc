#include "flywheel/trainer/preference_data.h"

#include <cmath>
#include <memory>
#include <optional>

#include "absl/strings/str_cat.h"
#include "flywheel/core/jsonl_io.h"
#include "flywheel/core/status_macros.h"
#include "flywheel/model/tokenizer/chat_messages.h"
#include "flywheel/trainer/sft_data.h"

namespace flywheel::trainer {
namespace {

// How one record's fields become ids: text through the tokenizer (a conversational prompt
// through the chat template first), ids checked against the vocabulary.
class RecordEncoder {
 public:
  RecordEncoder(const PreferenceDataOptions& options, const model::Tokenizer& tokenizer,
                const model::ChatTemplate* chat_template)
      : o_(options), tokenizer_(tokenizer), chat_(chat_template) {}

  // The prompt: `prompt_ids`, a string (with the tokenizer's special tokens) or a message list.
  absl::StatusOr<std::vector<int32_t>> prompt(const core::Json& record) const {
    if (const core::Json* ids = record.find(o_.prompt_key + "_ids")) {
      return checked_ids(*ids, o_.prompt_key + "_ids");
    }
    const core::Json* prompt = record.find(o_.prompt_key);
    if (prompt == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("no \"", o_.prompt_key, "\" (or \"", o_.prompt_key, "_ids\")"));
    }
    if (prompt->is_string()) {
      return encode_in_vocabulary(tokenizer_, prompt->as_string(), true, o_.vocab_size);
    }
    if (!prompt->is_array()) {
      return absl::InvalidArgumentError(
          absl::StrCat("\"", o_.prompt_key, "\" must be a string or a list of messages"));
    }
    if (chat_ == nullptr) {
      return absl::InvalidArgumentError("a conversational prompt needs a chat template");
    }
    FLYWHEEL_ASSIGN_OR_RETURN(std::vector<model::ChatMessage> messages,
                              model::parse_messages(*prompt, o_.prompt_key));
    FLYWHEEL_ASSIGN_OR_RETURN(std::string rendered, chat_->render(messages, true));
    // A rendered chat carries its own special tokens.
    return encode_in_vocabulary(tokenizer_, rendered, false, o_.vocab_size);
  }

  // A response: `<key>_ids` as they are, or text (a string, or a list of one assistant message)
  // followed by the eos id.
  absl::StatusOr<std::vector<int32_t>> response(const core::Json& record,
                                                const std::string& key) const {
    if (const core::Json* ids = record.find(key + "_ids")) return checked_ids(*ids, key + "_ids");
    const core::Json* value = record.find(key);
    if (value == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("no \"", key, "\" (or \"", key, "_ids\")"));
    }
    std::string text;
    if (value->is_string()) {
      text = value->as_string();
    } else if (value->is_array()) {
      FLYWHEEL_ASSIGN_OR_RETURN(std::vector<model::ChatMessage> messages,
                                model::parse_messages(*value, key));
      if (messages.size() != 1 || messages[0].role != "assistant") {
        return absl::InvalidArgumentError(
            absl::StrCat("\"", key, "\" as messages must be one assistant message"));
      }
      text = messages[0].content;
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("\"", key, "\" must be a string or a list of one assistant message"));
    }
    FLYWHEEL_ASSIGN_OR_RETURN(std::vector<int32_t> ids,
                              encode_in_vocabulary(tokenizer_, text, false, o_.vocab_size));
    if (o_.eos_id >= 0) ids.push_back(static_cast<int32_t>(o_.eos_id));
    return ids;
  }

 private:
  absl::StatusOr<std::vector<int32_t>> checked_ids(const core::Json& ids,
                                                   const std::string& key) const {
    if (!ids.is_array()) {
      return absl::InvalidArgumentError(absl::StrCat("\"", key, "\" must be a list of ids"));
    }
    std::vector<int32_t> out;
    for (const core::Json& id : ids.as_array()) {
      if (!id.is_integer() || id.as_int() < 0 || id.as_int() >= o_.vocab_size) {
        return absl::InvalidArgumentError(absl::StrCat("\"", key, "\" holds ", id.dump(),
                                                       ", not an id in [0, ", o_.vocab_size, ")"));
      }
      out.push_back(static_cast<int32_t>(id.as_int()));
    }
    return out;
  }

  const PreferenceDataOptions& o_;
  const model::Tokenizer& tokenizer_;
  const model::ChatTemplate* chat_;
};

// The record's precomputed reference log-probs, when it has both.
absl::Status read_reference(const core::Json& record, PreferenceExample* pair, bool* has) {
  const core::Json* chosen = record.find("ref_chosen_logps");
  const core::Json* rejected = record.find("ref_rejected_logps");
  *has = false;
  if (chosen == nullptr && rejected == nullptr) return absl::OkStatus();
  if (chosen == nullptr || rejected == nullptr || !chosen->is_number() || !rejected->is_number() ||
      !std::isfinite(chosen->as_double()) || !std::isfinite(rejected->as_double())) {
    return absl::InvalidArgumentError(
        "\"ref_chosen_logps\" and \"ref_rejected_logps\" must both be finite numbers");
  }
  pair->ref_chosen = chosen->as_double();
  pair->ref_rejected = rejected->as_double();
  *has = true;
  return absl::OkStatus();
}

}  // namespace

PreferenceDataOptions PreferenceDataOptions::from_config(const core::Config& config,
                                                         int64_t vocab_size) {
  PreferenceDataOptions o;
  o.prompt_key = config.data.prompt_key;
  o.answer_key = config.data.answer_key;
  o.chosen_key = config.data.chosen_key;
  o.rejected_key = config.data.rejected_key;
  o.margin_key = config.data.margin_key;
  o.max_tokens = config.model.max_seq_len;
  o.vocab_size = vocab_size;
  return o;
}

absl::StatusOr<PreferenceData> load_preference_data(const std::string& path,
                                                    const PreferenceDataOptions& options,
                                                    const model::Tokenizer& tokenizer,
                                                    const model::ChatTemplate* chat_template) {
  FLYWHEEL_ASSIGN_OR_RETURN(std::unique_ptr<core::JsonlReader> in, core::JsonlReader::open(path));
  const RecordEncoder encoder(options, tokenizer, chat_template);
  PreferenceData data;
  while (true) {
    absl::StatusOr<std::optional<core::Json>> line = in->next();
    if (!line.ok()) return line.status();
    if (!line->has_value()) break;
    const core::Json& record = **line;
    const std::string where = in->where();
    auto bad = [&](const absl::Status& why) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": ", why.message()));
    };
    if (!record.is_object()) return bad(absl::InvalidArgumentError("expected a JSON object"));
    PreferenceExample pair;
    absl::StatusOr<std::vector<int32_t>> ids = encoder.prompt(record);
    if (!ids.ok()) return bad(ids.status());
    pair.prompt = std::move(*ids);
    ids = encoder.response(record, options.chosen_key);
    if (!ids.ok()) return bad(ids.status());
    pair.chosen = std::move(*ids);
    ids = encoder.response(record, options.rejected_key);
    if (!ids.ok()) return bad(ids.status());
    pair.rejected = std::move(*ids);
    if (pair.prompt.empty() || pair.chosen.empty() || pair.rejected.empty()) {
      return bad(absl::InvalidArgumentError("the prompt and both responses need a token each"));
    }
    if (const core::Json* margin = record.find(options.margin_key)) {
      if (!margin->is_number() || !std::isfinite(margin->as_double())) {
        return bad(absl::InvalidArgumentError(
            absl::StrCat("\"", options.margin_key, "\" must be a finite number")));
      }
      pair.margin = margin->as_double();
    }
    bool has_reference = false;
    absl::Status reference = read_reference(record, &pair, &has_reference);
    if (!reference.ok()) return bad(reference);
    const size_t longest = std::max(pair.chosen.size(), pair.rejected.size());
    if (static_cast<int64_t>(pair.prompt.size() + longest) > options.max_tokens) {
      ++data.skipped_too_long;
      continue;
    }
    data.with_reference += has_reference ? 1 : 0;
    data.with_answer += record.find(options.answer_key) != nullptr ? 1 : 0;
    data.pairs.push_back(std::move(pair));
  }
  if (data.pairs.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": no usable pairs (", data.skipped_too_long, " too long)"));
  }
  return data;
}

}  // namespace flywheel::trainer
