// A character tokenizer for the built-in toy tasks: special tokens first, then one id per
// character (Unicode code point) of an alphabet. Characters outside the alphabet encode to
// <unk>. Stored as char_tokenizer.json:
//   {"type": "char", "special_tokens": ["<pad>", "<bos>", "<eos>", "<unk>"], "alphabet": "..."}
#pragma once

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "added_tokens.h"
#include "flywheel/core/json.h"
#include "flywheel/model/tokenizer/tokenizer.h"

namespace flywheel::model {

class CharTokenizer : public Tokenizer {
 public:
  // The default: <pad> <bos> <eos> <unk>, then "\n" and printable ASCII (100 ids).
  static std::unique_ptr<CharTokenizer> make_default();
  static absl::StatusOr<std::unique_ptr<CharTokenizer>> from_json(const core::Json& json,
                                                                  const std::string& source);
  core::Json to_json() const;

  absl::StatusOr<std::vector<int64_t>> encode(absl::string_view text,
                                              const EncodeOptions& options) const override;
  absl::StatusOr<std::string> decode(const std::vector<int64_t>& ids,
                                     const DecodeOptions& options) const override;
  int64_t vocab_size() const override { return static_cast<int64_t>(tokens_.size()); }
  std::optional<int64_t> token_to_id(absl::string_view token) const override;
  std::optional<std::string> id_to_token(int64_t id) const override;
  bool is_special(int64_t id) const override { return id >= 0 && id < num_special_; }

 private:
  CharTokenizer(std::vector<std::string> specials, std::vector<std::string> characters);

  std::vector<std::string> tokens_;  // specials, then characters
  int64_t num_special_;
  std::unordered_map<std::string, int64_t> ids_;
  int64_t unk_ = -1;
  AddedTokenMatcher matcher_;
};

}  // namespace flywheel::model
