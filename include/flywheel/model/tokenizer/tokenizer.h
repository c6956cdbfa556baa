// Tokenizers: text <-> token ids.
//
// Two implementations: Hugging Face tokenizer.json byte-level BPE (Qwen2, Qwen3, Llama 3, GPT-2
// style) reproducing the `tokenizers` library's ids, and a character tokenizer for the built-in
// toy tasks. Both are immutable after loading and thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "flywheel/core/options/tokenizer_options.h"

namespace flywheel::model {

// Token ids are below this (16,777,216, the largest vocab_size a model config may have): a
// tokenizer file with a larger id, or with more tokens, is an error naming the file and the id.
inline constexpr int64_t kMaxTokenizerVocabSize = int64_t{1} << 24;

// tokenizer.json files larger than this are refused (the largest released ones are ~35 MB).
inline constexpr int64_t kMaxTokenizerFileBytes = int64_t{256} << 20;

struct EncodeOptions {
  bool add_special_tokens = true;  // apply the post-processor (e.g. prepend BOS), as HF does
};

struct DecodeOptions {
  bool skip_special_tokens = false;
};

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // InvalidArgument when `text` is not valid UTF-8.
  virtual absl::StatusOr<std::vector<int64_t>> encode(absl::string_view text,
                                                      const EncodeOptions& options = {}) const = 0;
  // Bytes that do not form valid UTF-8 are replaced by U+FFFD, as Hugging Face does.
  // InvalidArgument for an id outside [0, vocab_size()).
  virtual absl::StatusOr<std::string> decode(const std::vector<int64_t>& ids,
                                             const DecodeOptions& options = {}) const = 0;

  // One more than the largest id (added tokens included).
  virtual int64_t vocab_size() const = 0;
  virtual std::optional<int64_t> token_to_id(absl::string_view token) const = 0;
  virtual std::optional<std::string> id_to_token(int64_t id) const = 0;
  // Ids of the special tokens (added tokens marked special).
  virtual bool is_special(int64_t id) const = 0;
};

// Loads the tokenizer of a model directory (tokenizer.type): hf (tokenizer.json), char
// (char_tokenizer.json, or the default alphabet when absent) or auto (hf when tokenizer.json
// exists, else char_tokenizer.json). Errors name the file and what is unsupported (model types
// other than BPE, unknown normalizers / pre-tokenizers / decoders / post-processors), an id of
// kMaxTokenizerVocabSize or more, ids much sparser than the tokens (an id of 4 x tokens + 1024
// or more), post-processor ids outside the vocabulary, and files that are not regular files.
absl::StatusOr<std::unique_ptr<Tokenizer>> load_tokenizer(
    const std::string& dir, core::TokenizerType type = core::TokenizerType::kAuto);
// The same with the type spelled ("auto", "hf", "char"; InvalidArgument for another).
absl::StatusOr<std::unique_ptr<Tokenizer>> load_tokenizer(const std::string& dir,
                                                          const std::string& type);

// Writes the default character tokenizer (100 ids) to <dir>/char_tokenizer.json.
absl::Status save_default_char_tokenizer(const std::string& dir);

// Parses tokenizer.json text (`source` names it in errors).
absl::StatusOr<std::unique_ptr<Tokenizer>> load_hf_tokenizer_json(absl::string_view json,
                                                                  const std::string& source);

// The tokenizer of `dir` when it has one (tokenizer.json or char_tokenizer.json), else null:
// no built-in fallback alphabet (`flywheel generate` then works on ids only).
absl::StatusOr<std::unique_ptr<Tokenizer>> load_tokenizer_if_present(const std::string& dir);

}  // namespace flywheel::model
