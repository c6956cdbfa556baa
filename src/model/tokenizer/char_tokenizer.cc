#include "char_tokenizer.h"

#include "absl/strings/str_cat.h"
#include "flywheel/core/utf8.h"

namespace flywheel::model {
namespace {

std::vector<AddedToken> special_tokens(const std::vector<std::string>& specials) {
  std::vector<AddedToken> out;
  for (size_t i = 0; i < specials.size(); ++i) {
    AddedToken t;
    t.content = specials[i];
    t.id = static_cast<int64_t>(i);
    t.special = true;
    out.push_back(t);
  }
  return out;
}

}  // namespace

CharTokenizer::CharTokenizer(std::vector<std::string> specials, std::vector<std::string> characters)
    : num_special_(static_cast<int64_t>(specials.size())), matcher_(special_tokens(specials)) {
  tokens_ = std::move(specials);
  tokens_.insert(tokens_.end(), characters.begin(), characters.end());
  for (size_t i = 0; i < tokens_.size(); ++i) ids_.emplace(tokens_[i], static_cast<int64_t>(i));
  if (auto it = ids_.find("<unk>"); it != ids_.end() && it->second < num_special_)
    unk_ = it->second;
}

std::unique_ptr<CharTokenizer> CharTokenizer::make_default() {
  std::vector<std::string> characters = {"\n"};
  for (char c = 32; c < 127; ++c) characters.emplace_back(1, c);
  return std::unique_ptr<CharTokenizer>(
      new CharTokenizer({"<pad>", "<bos>", "<eos>", "<unk>"}, std::move(characters)));
}

absl::StatusOr<std::unique_ptr<CharTokenizer>> CharTokenizer::from_json(const core::Json& json,
                                                                        const std::string& source) {
  const core::Json* type = json.find("type");
  const core::Json* specials = json.find("special_tokens");
  const core::Json* alphabet = json.find("alphabet");
  if (!type || !type->is_string() || type->as_string() != "char" || !specials ||
      !specials->is_array() || !alphabet || !alphabet->is_string()) {
    return absl::InvalidArgumentError(absl::StrCat(
        source,
        ": expected {\"type\": \"char\", \"special_tokens\": [...], \"alphabet\": \"...\"}"));
  }
  std::vector<std::string> special_list;
  for (const core::Json& s : specials->as_array()) {
    if (!s.is_string() || s.as_string().empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(source, ": special tokens must be non-empty strings"));
    }
    special_list.push_back(s.as_string());
  }
  std::vector<std::string> characters;
  const std::string& text = alphabet->as_string();
  for (size_t i = 0; i < text.size();) {
    size_t length = core::utf8_sequence_length(text, i);
    if (length == 0)
      return absl::InvalidArgumentError(absl::StrCat(source, ": alphabet is not valid UTF-8"));
    characters.push_back(text.substr(i, length));
    i += length;
  }
  if (static_cast<int64_t>(special_list.size() + characters.size()) > kMaxTokenizerVocabSize) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": ", special_list.size() + characters.size(),
                     " tokens; token ids must be below ", kMaxTokenizerVocabSize));
  }
  std::unique_ptr<CharTokenizer> t(
      new CharTokenizer(std::move(special_list), std::move(characters)));
  if (t->ids_.size() != t->tokens_.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": duplicate characters or special tokens"));
  }
  return t;
}

core::Json CharTokenizer::to_json() const {
  core::Json specials = core::Json::array();
  std::string alphabet;
  for (int64_t i = 0; i < vocab_size(); ++i) {
    if (i < num_special_) {
      specials.push_back(core::Json(tokens_[i]));
    } else {
      alphabet += tokens_[i];
    }
  }
  core::Json j = core::Json::object();
  j.set("type", core::Json("char"));
  j.set("special_tokens", std::move(specials));
  j.set("alphabet", core::Json(alphabet));
  return j;
}

absl::StatusOr<std::vector<int64_t>> CharTokenizer::encode(absl::string_view text,
                                                           const EncodeOptions& options) const {
  std::vector<int64_t> ids;
  for (const TextPiece& piece : matcher_.split(text)) {
    if (piece.id >= 0) {
      ids.push_back(piece.id);
      continue;
    }
    for (size_t i = 0; i < piece.text.size();) {
      size_t length = core::utf8_sequence_length(piece.text, i);
      if (length == 0) {
        return absl::InvalidArgumentError(absl::StrCat("text is not valid UTF-8"));
      }
      auto it = ids_.find(std::string(piece.text.substr(i, length)));
      if (it != ids_.end() && it->second >= num_special_) {
        ids.push_back(it->second);
      } else if (unk_ >= 0) {
        ids.push_back(unk_);
      } else {
        return absl::InvalidArgumentError(absl::StrCat(
            "character '", std::string(piece.text.substr(i, length)), "' is not in the alphabet"));
      }
      i += length;
    }
  }
  return ids;
}

absl::StatusOr<std::string> CharTokenizer::decode(const std::vector<int64_t>& ids,
                                                  const DecodeOptions& options) const {
  std::string out;
  for (int64_t id : ids) {
    if (id < 0 || id >= vocab_size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("token id ", id, " is outside the vocabulary [0, ", vocab_size(), ")"));
    }
    if (options.skip_special_tokens && is_special(id)) continue;
    out += tokens_[id];
  }
  return out;
}

std::optional<int64_t> CharTokenizer::token_to_id(absl::string_view token) const {
  auto it = ids_.find(std::string(token));
  if (it == ids_.end()) return std::nullopt;
  return it->second;
}

std::optional<std::string> CharTokenizer::id_to_token(int64_t id) const {
  if (id < 0 || id >= vocab_size()) return std::nullopt;
  return tokens_[id];
}

}  // namespace flywheel::model
