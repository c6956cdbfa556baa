#include "bpe_tokenizer.h"

#include <queue>

#include <utf8proc.h>

#include "absl/strings/str_cat.h"
#include "flywheel/core/status_macros.h"
#include "flywheel/core/utf8.h"

namespace flywheel::model {
namespace {

// GPT-2's pre-tokenizer regex, used by ByteLevel when use_regex is true.
constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

absl::Status unsupported(const std::string& source, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(source, ": unsupported ", what));
}

std::string type_of(const core::Json& j) {
  const core::Json* t = j.find("type");
  return t && t->is_string() ? t->as_string() : "";
}

bool flag(const core::Json& j, const char* key, bool fallback = false) {
  const core::Json* v = j.find(key);
  return v && v->is_bool() ? v->as_bool() : fallback;
}

// Flattens {"type": "Sequence", <list_key>: [...]} into its members.
std::vector<const core::Json*> members(const core::Json& j, const char* list_key) {
  std::vector<const core::Json*> out;
  if (j.is_null()) return out;
  if (type_of(j) == "Sequence") {
    if (const core::Json* list = j.find(list_key); list && list->is_array()) {
      for (const core::Json& m : list->as_array()) {
        for (const core::Json* inner : members(m, list_key)) out.push_back(inner);
      }
    }
    return out;
  }
  out.push_back(&j);
  return out;
}

std::string escape_regex(const std::string& literal) {
  std::string out;
  for (char c : literal) {
    if (std::string("\\^$.|?*+()[]{}").find(c) != std::string::npos) out.push_back('\\');
    out.push_back(c);
  }
  return out;
}

absl::StatusOr<std::string> nfc(absl::string_view text) {
  utf8proc_uint8_t* result = nullptr;
  utf8proc_ssize_t n =
      utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                   static_cast<utf8proc_ssize_t>(text.size()), &result,
                   static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  if (n < 0) return absl::InvalidArgumentError(utf8proc_errmsg(n));
  std::string out(reinterpret_cast<char*>(result), static_cast<size_t>(n));
  free(result);
  return out;
}

}  // namespace

absl::StatusOr<std::unique_ptr<BpeTokenizer>> BpeTokenizer::from_json(const core::Json& json,
                                                                      const std::string& source) {
  if (!json.is_object())
    return absl::InvalidArgumentError(absl::StrCat(source, ": not a JSON object"));
  std::unique_ptr<BpeTokenizer> t(new BpeTokenizer());
  FLYWHEEL_RETURN_IF_ERROR(t->read_model(json, source));
  // The optional sections: absent or null is "none".
  auto section = [&json](const char* key) {
    const core::Json* j = json.find(key);
    return j != nullptr && !j->is_null() ? j : nullptr;
  };
  if (const core::Json* n = section("normalizer")) {
    FLYWHEEL_RETURN_IF_ERROR(t->read_normalizer(*n, source));
  }
  if (const core::Json* p = section("pre_tokenizer")) {
    FLYWHEEL_RETURN_IF_ERROR(t->read_pre_tokenizer(*p, source));
  }
  if (t->stages_.empty() || !t->stages_.back().byte_level) {
    return unsupported(source, "BPE without a final ByteLevel pre-tokenizer");
  }
  if (const core::Json* d = section("decoder")) {
    FLYWHEEL_RETURN_IF_ERROR(t->read_decoder(*d, source));
  }
  if (const core::Json* pp = section("post_processor")) {
    FLYWHEEL_RETURN_IF_ERROR(t->read_post_processor(*pp, source));
  }
  return t;
}

absl::Status BpeTokenizer::read_model(const core::Json& json, const std::string& source) {
  const core::Json* model = json.find("model");
  if (model == nullptr || !model->is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": no \"model\" object"));
  }
  const std::string model_type = type_of(*model);
  if (model_type != "BPE") {
    return unsupported(source, absl::StrCat("tokenizer model type '", model_type,
                                            "'; supported: BPE (byte-level)"));
  }
  if (const core::Json* d = model->find("dropout"); d && d->is_number() && d->as_double() != 0) {
    return unsupported(source, "BPE dropout");
  }
  if (flag(*model, "byte_fallback"))
    return unsupported(source, "BPE byte_fallback (use a byte-level BPE)");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (const core::Json* v = model->find(key); v && v->is_string() && !v->as_string().empty()) {
      return unsupported(source, absl::StrCat("BPE ", key));
    }
  }
  ignore_merges_ = flag(*model, "ignore_merges");
  const core::Json* vocab = model->find("vocab");
  const core::Json* merges = model->find("merges");
  if (vocab == nullptr || !vocab->is_object() || merges == nullptr || !merges->is_array()) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": model needs \"vocab\" and \"merges\""));
  }
  FLYWHEEL_RETURN_IF_ERROR(read_vocab(*vocab, json.find("added_tokens"), source));
  return read_merges(*merges, source);
}

absl::Status BpeTokenizer::read_vocab(const core::Json& vocab_json, const core::Json* added,
                                      const std::string& source) {
  const core::Json* vocab = &vocab_json;
  // Ids index a table: bounded, and not much sparser than the tokens they name.
  int64_t max_id = -1;
  const char* max_id_kind = "";
  const std::string* max_id_token = nullptr;
  auto check_id = [&](int64_t id, const char* kind, const std::string& token) -> absl::Status {
    if (id >= kMaxTokenizerVocabSize) {
      return absl::InvalidArgumentError(absl::StrCat(source, ": ", kind, " '", token, "' has id ",
                                                     id, "; token ids must be below ",
                                                     kMaxTokenizerVocabSize));
    }
    if (id > max_id) {
      max_id = id;
      max_id_kind = kind;
      max_id_token = &token;
    }
    return absl::OkStatus();
  };
  vocab_.reserve(vocab->as_object().size());
  for (const auto& [token, id] : vocab->as_object()) {
    if (!id.is_integer() || id.as_int() < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(source, ": vocab entry '", token, "' has an invalid id"));
    }
    absl::Status bounded = check_id(id.as_int(), "vocab entry", token);
    if (!bounded.ok()) return bounded;
    vocab_[token] = static_cast<int32_t>(id.as_int());
  }
  std::vector<AddedToken> added_tokens;
  if (added && added->is_array()) {
    for (const core::Json& a : added->as_array()) {
      const core::Json* id = a.find("id");
      const core::Json* content = a.find("content");
      if (!id || !id->is_integer() || id->as_int() < 0 || !content || !content->is_string()) {
        return absl::InvalidArgumentError(absl::StrCat(source, ": malformed added_tokens entry"));
      }
      AddedToken token;
      token.id = id->as_int();
      token.content = content->as_string();
      token.special = flag(a, "special");
      token.single_word = flag(a, "single_word");
      token.lstrip = flag(a, "lstrip");
      token.rstrip = flag(a, "rstrip");
      token.normalized = flag(a, "normalized");
      FLYWHEEL_RETURN_IF_ERROR(check_id(token.id, "added token", content->as_string()));
      added_[token.content] = static_cast<int32_t>(token.id);
      added_tokens.push_back(std::move(token));
    }
  }
  const int64_t num_tokens = static_cast<int64_t>(vocab_.size() + added_tokens.size());
  if (max_id >= 4 * num_tokens + 1024) {
    return absl::InvalidArgumentError(absl::StrCat(
        source, ": ", max_id_kind, " '", *max_id_token, "' has id ", max_id,
        ", but the file has only ", num_tokens, " tokens (ids must be below 4 x tokens + 1024)"));
  }
  id_to_token_.assign(max_id + 1, "");
  special_.assign(max_id + 1, false);
  for (const auto& [token, id] : vocab_) id_to_token_[id] = token;
  for (const AddedToken& a : added_tokens) {
    id_to_token_[a.id] = a.content;
    special_[a.id] = a.special;
  }
  matcher_ = AddedTokenMatcher(std::move(added_tokens));
  return absl::OkStatus();
}

absl::Status BpeTokenizer::read_merges(const core::Json& merges, const std::string& source) {
  int32_t rank = 0;
  for (const core::Json& m : merges.as_array()) {
    std::string left, right;
    if (m.is_string()) {
      size_t space = m.as_string().find(' ', 1);
      if (space == std::string::npos) {
        return absl::InvalidArgumentError(
            absl::StrCat(source, ": merge '", m.as_string(), "' is not 'a b'"));
      }
      left = m.as_string().substr(0, space);
      right = m.as_string().substr(space + 1);
    } else if (m.is_array() && m.as_array().size() == 2 && m.as_array()[0].is_string() &&
               m.as_array()[1].is_string()) {
      left = m.as_array()[0].as_string();
      right = m.as_array()[1].as_string();
    } else {
      return absl::InvalidArgumentError(absl::StrCat(source, ": malformed merge #", rank));
    }
    auto l = vocab_.find(left), r = vocab_.find(right), result = vocab_.find(left + right);
    if (l == vocab_.end() || r == vocab_.end() || result == vocab_.end()) {
      return absl::InvalidArgumentError(absl::StrCat(source, ": merge #", rank, " '", left, " ",
                                                     right, "' uses tokens missing from vocab"));
    }
    uint64_t key = (static_cast<uint64_t>(l->second) << 32) | static_cast<uint32_t>(r->second);
    merges_.try_emplace(key, Merge{rank, result->second});  // the first (lowest) rank wins
    ++rank;
  }
  return absl::OkStatus();
}

absl::Status BpeTokenizer::read_normalizer(const core::Json& n, const std::string& source) {
  for (const core::Json* m : members(n, "normalizers")) {
    const std::string type = type_of(*m);
    if (type == "NFC") {
      nfc_ = true;
    } else {
      return unsupported(source, absl::StrCat("normalizer '", type, "'; supported: NFC"));
    }
  }
  return absl::OkStatus();
}

absl::Status BpeTokenizer::read_pre_tokenizer(const core::Json& p, const std::string& source) {
  for (const core::Json* m : members(p, "pretokenizers")) {
    const std::string type = type_of(*m);
    if (type == "Split") {
      std::string pattern;
      const core::Json* pat = m->find("pattern");
      if (const core::Json* re = pat ? pat->find("Regex") : nullptr; re && re->is_string()) {
        pattern = re->as_string();
      } else if (const core::Json* s = pat ? pat->find("String") : nullptr; s && s->is_string()) {
        pattern = escape_regex(s->as_string());
      } else {
        return absl::InvalidArgumentError(absl::StrCat(source, ": Split needs a pattern"));
      }
      const core::Json* behavior = m->find("behavior");
      std::string b = behavior && behavior->is_string() ? behavior->as_string() : "Isolated";
      if (b != "Isolated" && b != "Removed") {
        return unsupported(source,
                           absl::StrCat("Split behavior '", b, "'; supported: Isolated, Removed"));
      }
      if (flag(*m, "invert")) return unsupported(source, "Split with invert: true");
      if (!stages_.empty() && stages_.back().byte_level) {
        return unsupported(source, "a Split after ByteLevel");
      }
      absl::StatusOr<std::unique_ptr<PretokenizerRegex>> regex =
          PretokenizerRegex::compile(pattern);
      if (!regex.ok())
        return absl::InvalidArgumentError(absl::StrCat(source, ": ", regex.status().message()));
      Stage stage;
      stage.regex = std::move(*regex);
      stage.keep_matches = b == "Isolated";
      stages_.push_back(std::move(stage));
    } else if (type == "ByteLevel") {
      Stage stage;
      stage.byte_level = true;
      stage.add_prefix_space = flag(*m, "add_prefix_space");
      if (flag(*m, "use_regex", true)) {
        FLYWHEEL_ASSIGN_OR_RETURN(std::unique_ptr<PretokenizerRegex> regex,
                                  PretokenizerRegex::compile(kGpt2Pattern));
        stage.regex = std::move(regex);
      }
      stages_.push_back(std::move(stage));
    } else {
      return unsupported(source,
                         absl::StrCat("pre-tokenizer '", type, "'; supported: Split, ByteLevel"));
    }
  }
  return absl::OkStatus();
}

absl::Status BpeTokenizer::read_decoder(const core::Json& d, const std::string& source) {
  for (const core::Json* m : members(d, "decoders")) {
    const std::string type = type_of(*m);
    if (type != "ByteLevel")
      return unsupported(source, absl::StrCat("decoder '", type, "'; supported: ByteLevel"));
    byte_level_decoder_ = true;
  }
  return absl::OkStatus();
}

absl::Status BpeTokenizer::read_post_processor(const core::Json& pp, const std::string& source) {
  for (const core::Json* m : members(pp, "processors")) {
    const std::string type = type_of(*m);
    if (type == "ByteLevel") continue;  // changes offsets only
    if (type != "TemplateProcessing") {
      return unsupported(source, absl::StrCat("post-processor '", type,
                                              "'; supported: ByteLevel, TemplateProcessing"));
    }
    const core::Json* single = m->find("single");
    const core::Json* specials = m->find("special_tokens");
    if (!single || !single->is_array())
      return absl::InvalidArgumentError(
          absl::StrCat(source, ": TemplateProcessing needs \"single\""));
    bool after_sequence = false;
    for (const core::Json& piece : single->as_array()) {
      if (piece.find("Sequence")) {
        after_sequence = true;
        continue;
      }
      const core::Json* st = piece.find("SpecialToken");
      const core::Json* name = st ? st->find("id") : nullptr;
      const core::Json* entry =
          name && name->is_string() && specials ? specials->find(name->as_string()) : nullptr;
      const core::Json* ids = entry ? entry->find("ids") : nullptr;
      if (!ids || !ids->is_array()) {
        return absl::InvalidArgumentError(
            absl::StrCat(source, ": TemplateProcessing special token without ids"));
      }
      for (const core::Json& id : ids->as_array()) {
        if (!id.is_integer())
          return absl::InvalidArgumentError(absl::StrCat(source, ": bad special token id"));
        if (id.as_int() < 0 || id.as_int() >= vocab_size()) {
          return absl::InvalidArgumentError(absl::StrCat(
              source, ": post_processor special token '", name->as_string(), "' has id ",
              id.as_int(), ", outside the vocabulary [0, ", vocab_size(), ")"));
        }
        (after_sequence ? post_suffix_ : post_prefix_).push_back(id.as_int());
      }
    }
  }
  return absl::OkStatus();
}

std::optional<int64_t> BpeTokenizer::token_to_id(absl::string_view token) const {
  std::string key(token);
  if (auto it = added_.find(key); it != added_.end()) return it->second;
  if (auto it = vocab_.find(key); it != vocab_.end()) return it->second;
  return std::nullopt;
}

std::optional<std::string> BpeTokenizer::id_to_token(int64_t id) const {
  if (id < 0 || id >= vocab_size()) return std::nullopt;
  return id_to_token_[id];
}

bool BpeTokenizer::is_special(int64_t id) const {
  return id >= 0 && id < vocab_size() && special_[id];
}

absl::Status BpeTokenizer::pre_tokenize(absl::string_view text, size_t stage_index,
                                        std::vector<int64_t>* out) const {
  if (stage_index == stages_.size()) {
    bpe_word(text, out);
    return absl::OkStatus();
  }
  const Stage& stage = stages_[stage_index];
  std::string prefixed;
  if (stage.add_prefix_space && (text.empty() || text[0] != ' ')) {
    prefixed = absl::StrCat(" ", text);
    text = prefixed;
  }
  auto next = [&](absl::string_view piece) {
    if (!stage.byte_level) return pre_tokenize(piece, stage_index + 1, out);
    return pre_tokenize(alphabet_.encode(piece), stage_index + 1, out);
  };
  if (!stage.regex) return next(text);
  size_t last = 0;  // the text between matches is kept either way
  absl::Status status = stage.regex->for_each_match(text, [&](size_t begin, size_t end) {
    if (begin > last) {
      FLYWHEEL_RETURN_IF_ERROR(next(text.substr(last, begin - last)));
    }
    last = end;
    return stage.keep_matches ? next(text.substr(begin, end - begin)) : absl::OkStatus();
  });
  if (!status.ok()) return status;
  if (last < text.size()) return next(text.substr(last));
  return absl::OkStatus();
}

void BpeTokenizer::bpe_word(absl::string_view word_view, std::vector<int64_t>* out) const {
  const std::string word(word_view);
  if (ignore_merges_) {
    if (auto it = vocab_.find(word); it != vocab_.end()) {
      out->push_back(it->second);
      return;
    }
  }
  {
    absl::MutexLock lock(&cache_mu_);
    if (auto it = cache_.find(word); it != cache_.end()) {
      out->insert(out->end(), it->second.begin(), it->second.end());
      return;
    }
  }
  struct Symbol {
    int32_t id;
    int prev, next;
    bool alive;
  };
  std::vector<Symbol> symbols;
  for (size_t i = 0; i < word.size();) {
    size_t length = core::utf8_sequence_length(word, i);
    if (length == 0) length = 1;
    auto it = vocab_.find(word.substr(i, length));
    if (it != vocab_.end()) {  // characters outside the vocabulary are dropped, as HF does
      int index = static_cast<int>(symbols.size());
      symbols.push_back({it->second, index - 1, index + 1, true});
    }
    i += length;
  }
  if (!symbols.empty()) symbols.back().next = -1;

  using Candidate = std::pair<int32_t, int>;  // (rank, left position): lowest rank, then leftmost
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> queue;
  auto push = [&](int left) {
    if (left < 0 || symbols[left].next < 0) return;
    uint64_t key = (static_cast<uint64_t>(symbols[left].id) << 32) |
                   static_cast<uint32_t>(symbols[symbols[left].next].id);
    if (auto it = merges_.find(key); it != merges_.end()) queue.emplace(it->second.rank, left);
  };
  for (int i = 0; i + 1 < static_cast<int>(symbols.size()); ++i) push(i);
  while (!queue.empty()) {
    auto [rank, left] = queue.top();
    queue.pop();
    if (!symbols[left].alive || symbols[left].next < 0) continue;
    int right = symbols[left].next;
    uint64_t key =
        (static_cast<uint64_t>(symbols[left].id) << 32) | static_cast<uint32_t>(symbols[right].id);
    auto it = merges_.find(key);
    if (it == merges_.end() || it->second.rank != rank) continue;  // stale candidate
    symbols[left].id = it->second.result;
    symbols[right].alive = false;
    symbols[left].next = symbols[right].next;
    if (symbols[right].next >= 0) symbols[symbols[right].next].prev = left;
    push(symbols[left].prev);
    push(left);
  }
  std::vector<int64_t> ids;
  for (const Symbol& s : symbols) {
    if (s.alive) ids.push_back(s.id);
  }
  out->insert(out->end(), ids.begin(), ids.end());
  if (word.size() > kMaxCachedWordBytes) return;  // long words are rare; keep the cache small
  absl::MutexLock lock(&cache_mu_);
  if (cache_.size() < kCacheCapacity) cache_.emplace(word, std::move(ids));
}

absl::Status BpeTokenizer::encode_piece(absl::string_view piece, std::vector<int64_t>* out) const {
  std::string text(piece);
  if (nfc_) {
    FLYWHEEL_ASSIGN_OR_RETURN(std::string normalized, nfc(text));
    text = std::move(normalized);
  }
  return pre_tokenize(text, 0, out);
}

absl::StatusOr<std::vector<int64_t>> BpeTokenizer::encode(absl::string_view text,
                                                          const EncodeOptions& options) const {
  for (size_t i = 0; i < text.size();) {
    size_t length = core::utf8_sequence_length(text, i);
    if (length == 0) {
      return absl::InvalidArgumentError(absl::StrCat("text is not valid UTF-8 at byte ", i));
    }
    i += length;
  }
  std::vector<int64_t> ids;
  if (options.add_special_tokens) ids = post_prefix_;
  for (const TextPiece& piece : matcher_.split(text)) {
    if (piece.id >= 0) {
      ids.push_back(piece.id);
      continue;
    }
    FLYWHEEL_RETURN_IF_ERROR(encode_piece(piece.text, &ids));
  }
  if (options.add_special_tokens) ids.insert(ids.end(), post_suffix_.begin(), post_suffix_.end());
  return ids;
}

absl::StatusOr<std::string> BpeTokenizer::decode(const std::vector<int64_t>& ids,
                                                 const DecodeOptions& options) const {
  std::string bytes;
  for (int64_t id : ids) {
    if (id < 0 || id >= vocab_size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("token id ", id, " is outside the vocabulary [0, ", vocab_size(), ")"));
    }
    if (options.skip_special_tokens && special_[id]) continue;
    const std::string& token = id_to_token_[id];
    if (!byte_level_decoder_) {
      bytes += token;
      continue;
    }
    // Every character maps back to its byte; a token with a character outside the alphabet is
    // kept as its own UTF-8 (as the tokenizers library does).
    std::string decoded;
    bool mapped = true;
    for (size_t i = 0; i < token.size() && mapped;) {
      size_t length = core::utf8_sequence_length(token, i);
      if (length == 0) {
        mapped = false;
        break;
      }
      uint32_t cp = 0;
      unsigned char lead = static_cast<unsigned char>(token[i]);
      cp = length == 1 ? lead : (lead & (0xFF >> (length + 1)));
      for (size_t k = 1; k < length; ++k)
        cp = (cp << 6) | (static_cast<unsigned char>(token[i + k]) & 0x3F);
      int byte = alphabet_.decode_char(cp);
      if (byte < 0) {
        mapped = false;
      } else {
        decoded.push_back(static_cast<char>(byte));
      }
      i += length;
    }
    bytes += mapped ? decoded : token;
  }
  return core::utf8_lossy(bytes);
}

}  // namespace flywheel::model
