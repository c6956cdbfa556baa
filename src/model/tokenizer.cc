#include "flywheel/model/tokenizer.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "bpe_tokenizer.h"
#include "char_tokenizer.h"

namespace flywheel::model {
namespace {

namespace fs = std::filesystem;

absl::StatusOr<std::string> read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read '", path.string(), "'"));
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> load_hf_tokenizer_json(absl::string_view json,
                                                                  const std::string& source) {
  absl::StatusOr<core::Json> parsed = core::Json::parse(json);
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": ", parsed.status().message()));
  }
  absl::StatusOr<std::unique_ptr<BpeTokenizer>> t = BpeTokenizer::from_json(*parsed, source);
  if (!t.ok()) return t.status();
  return std::unique_ptr<Tokenizer>(std::move(*t));
}

absl::Status save_default_char_tokenizer(const std::string& dir) {
  const fs::path path = fs::path(dir) / "char_tokenizer.json";
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << CharTokenizer::make_default()->to_json().dump() << "\n";
  out.close();
  if (!out) return absl::UnavailableError(absl::StrCat("cannot write '", path.string(), "'"));
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Tokenizer>> load_tokenizer(const std::string& dir,
                                                          const std::string& type) {
  const fs::path hf = fs::path(dir) / "tokenizer.json";
  const fs::path chr = fs::path(dir) / "char_tokenizer.json";
  std::error_code ec;
  std::string kind = type;
  if (kind == "auto") kind = fs::exists(hf, ec) ? "hf" : "char";
  if (kind == "hf") {
    absl::StatusOr<std::string> text = read_file(hf);
    if (!text.ok()) return text.status();
    return load_hf_tokenizer_json(*text, hf.string());
  }
  if (kind != "char") {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown tokenizer type '", type, "'; expected auto, hf or char"));
  }
  if (!fs::exists(chr, ec)) return std::unique_ptr<Tokenizer>(CharTokenizer::make_default());
  absl::StatusOr<std::string> text = read_file(chr);
  if (!text.ok()) return text.status();
  absl::StatusOr<core::Json> parsed = core::Json::parse(*text);
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(chr.string(), ": ", parsed.status().message()));
  }
  absl::StatusOr<std::unique_ptr<CharTokenizer>> t =
      CharTokenizer::from_json(*parsed, chr.string());
  if (!t.ok()) return t.status();
  return std::unique_ptr<Tokenizer>(std::move(*t));
}

}  // namespace flywheel::model
