#include "flywheel/model/tokenizer/tokenizer.h"

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "bpe_tokenizer.h"
#include "char_tokenizer.h"
#include "flywheel/core/file_io.h"
#include "flywheel/core/status_macros.h"

namespace flywheel::model {
namespace {

namespace fs = std::filesystem;

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> load_hf_tokenizer_json(absl::string_view json,
                                                                  const std::string& source) {
  absl::StatusOr<core::Json> parsed = core::Json::parse(json);
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": ", parsed.status().message()));
  }
  FLYWHEEL_ASSIGN_OR_RETURN(std::unique_ptr<BpeTokenizer> t,
                            BpeTokenizer::from_json(*parsed, source));
  return std::unique_ptr<Tokenizer>(std::move(t));
}

absl::Status save_default_char_tokenizer(const std::string& dir) {
  return core::write_file_atomically((fs::path(dir) / "char_tokenizer.json").string(),
                                     CharTokenizer::make_default()->to_json().dump() + "\n");
}

absl::StatusOr<std::unique_ptr<Tokenizer>> load_tokenizer(const std::string& dir,
                                                          const std::string& type) {
  std::optional<core::TokenizerType> parsed = core::parse_choice<core::TokenizerType>(type);
  if (!parsed) {
    return absl::InvalidArgumentError(absl::StrCat("unknown tokenizer type '", type, "'; expected ",
                                                   core::choice_list<core::TokenizerType>()));
  }
  return load_tokenizer(dir, *parsed);
}

absl::StatusOr<std::unique_ptr<Tokenizer>> load_tokenizer(const std::string& dir,
                                                          core::TokenizerType type) {
  const fs::path hf = fs::path(dir) / "tokenizer.json";
  const fs::path chr = fs::path(dir) / "char_tokenizer.json";
  std::error_code ec;
  if (type == core::TokenizerType::kAuto) {
    type = fs::exists(hf, ec) ? core::TokenizerType::kHf : core::TokenizerType::kChar;
  }
  if (type == core::TokenizerType::kHf) {
    core::ReadFileOptions options;
    options.max_bytes = kMaxTokenizerFileBytes;
    FLYWHEEL_ASSIGN_OR_RETURN(std::string text, core::read_file(hf.string(), options));
    return load_hf_tokenizer_json(text, hf.string());
  }
  if (!fs::exists(chr, ec)) return std::unique_ptr<Tokenizer>(CharTokenizer::make_default());
  FLYWHEEL_ASSIGN_OR_RETURN(core::Json parsed, core::read_json_file(chr.string()));
  FLYWHEEL_ASSIGN_OR_RETURN(std::unique_ptr<CharTokenizer> t,
                            CharTokenizer::from_json(parsed, chr.string()));
  return std::unique_ptr<Tokenizer>(std::move(t));
}

absl::StatusOr<std::unique_ptr<Tokenizer>> load_tokenizer_if_present(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::exists(fs::path(dir) / "tokenizer.json", ec) &&
      !fs::exists(fs::path(dir) / "char_tokenizer.json", ec)) {
    return std::unique_ptr<Tokenizer>();
  }
  return load_tokenizer(dir);
}

}  // namespace flywheel::model
