// Hugging Face tokenizer.json with a byte-level BPE model (Qwen2, Qwen3, Llama 3, GPT-2 style).
//
// Pipeline, as in the `tokenizers` library: added tokens are split out of the raw text; each
// remaining piece is normalised (NFC or none), pre-tokenised (Split regex, then ByteLevel),
// and every pre-token is BPE-merged (lowest merge rank first, leftmost on ties); the
// post-processor may add special tokens. Decoding maps the byte-level characters back to bytes.
#pragma once

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "added_tokens.h"
#include "byte_level.h"
#include "flywheel/core/json.h"
#include "flywheel/model/tokenizer/tokenizer.h"
#include "pretokenizer_regex.h"

namespace flywheel::model {

class BpeTokenizer : public Tokenizer {
 public:
  static absl::StatusOr<std::unique_ptr<BpeTokenizer>> from_json(const core::Json& json,
                                                                 const std::string& source);

  absl::StatusOr<std::vector<int64_t>> encode(absl::string_view text,
                                              const EncodeOptions& options) const override;
  absl::StatusOr<std::string> decode(const std::vector<int64_t>& ids,
                                     const DecodeOptions& options) const override;
  int64_t vocab_size() const override { return static_cast<int64_t>(id_to_token_.size()); }
  std::optional<int64_t> token_to_id(absl::string_view token) const override;
  std::optional<std::string> id_to_token(int64_t id) const override;
  bool is_special(int64_t id) const override;

 private:
  // The sections of tokenizer.json, each checked and read into this tokenizer (errors name
  // `source`): the model (vocab, added_tokens, then merges), normalizer, pre_tokenizer, decoder
  // and post_processor.
  absl::Status read_model(const core::Json& json, const std::string& source);
  absl::Status read_vocab(const core::Json& vocab, const core::Json* added,
                          const std::string& source);
  absl::Status read_merges(const core::Json& merges, const std::string& source);
  absl::Status read_normalizer(const core::Json& normalizer, const std::string& source);
  absl::Status read_pre_tokenizer(const core::Json& pre_tokenizer, const std::string& source);
  absl::Status read_decoder(const core::Json& decoder, const std::string& source);
  absl::Status read_post_processor(const core::Json& post_processor, const std::string& source);

  // One pre-tokenizer: a regex Split (Isolated keeps matches, Removed drops them; the text
  // between matches is kept either way), or ByteLevel (optional prefix space, optional GPT-2
  // regex split, then the byte-to-character mapping).
  struct Stage {
    bool byte_level = false;
    std::unique_ptr<PretokenizerRegex> regex;  // Split's pattern, or ByteLevel's GPT-2 regex
    bool keep_matches = true;
    bool add_prefix_space = false;
  };
  struct Merge {
    int32_t rank;
    int32_t result;
  };

  BpeTokenizer() : matcher_({}) {}

  absl::Status encode_piece(absl::string_view piece, std::vector<int64_t>* out) const;
  // Runs pre-tokenizer stages [stage, end) on `text` and BPE-merges each resulting word into
  // `out`, one word at a time (no list of all pre-tokens of a long text is built).
  absl::Status pre_tokenize(absl::string_view text, size_t stage, std::vector<int64_t>* out) const;
  void bpe_word(absl::string_view word, std::vector<int64_t>* out) const;

  ByteLevelAlphabet alphabet_;
  std::unordered_map<std::string, int32_t> vocab_;
  std::vector<std::string> id_to_token_;
  std::vector<bool> special_;
  std::unordered_map<uint64_t, Merge> merges_;  // (left id << 32 | right id) -> merge
  bool ignore_merges_ = false;
  bool nfc_ = false;
  std::vector<Stage> stages_;
  bool byte_level_decoder_ = false;
  std::vector<int64_t> post_prefix_, post_suffix_;  // TemplateProcessing (single sequence)
  AddedTokenMatcher matcher_;
  std::unordered_map<std::string, int32_t> added_;

  static constexpr size_t kCacheCapacity = 10000;
  static constexpr size_t kMaxCachedWordBytes = 256;
  mutable absl::Mutex cache_mu_;
  mutable std::unordered_map<std::string, std::vector<int64_t>> cache_ ABSL_GUARDED_BY(cache_mu_);
};

}  // namespace flywheel::model
