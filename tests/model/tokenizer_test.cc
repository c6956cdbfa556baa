#include "flywheel/model/tokenizer/tokenizer.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "flywheel/model/tokenizer/chat_template.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/scratch_dir.h"

namespace flywheel::model {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// A tiny byte-level BPE: vocab of the bytes of "ab c" plus merges "a b" -> "ab", "Ġ c" -> "Ġc".
std::string tiny_tokenizer_json(const std::string& extra = "") {
  return R"({"version": "1.0", "added_tokens": [
      {"id": 6, "content": "<|end|>", "special": true, "single_word": false, "lstrip": false,
       "rstrip": false, "normalized": false}],
    "normalizer": null,
    "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
      {"type": "Split", "pattern": {"Regex": " ?\\S+|\\s+"}, "behavior": "Isolated", "invert": false},
      {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false}]},
    "post_processor": {"type": "TemplateProcessing",
      "single": [{"SpecialToken": {"id": "<|end|>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
      "pair": [], "special_tokens": {"<|end|>": {"id": "<|end|>", "ids": [6], "tokens": ["<|end|>"]}}},
    "decoder": {"type": "ByteLevel"},
    "model": {"type": "BPE", "dropout": null, "unk_token": null, "byte_fallback": false,
      "ignore_merges": false, "vocab": {"a": 0, "b": 1, "c": 2, "Ġ": 3, "ab": 4, "Ġc": 5},
      "merges": [["a", "b"], "Ġ c"]})" +
         extra + "}";
}

TEST(BpeTokenizerTest, MergesByRankAndAddsTemplateTokens) {
  auto t = load_hf_tokenizer_json(tiny_tokenizer_json(), "tiny");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_THAT(*(*t)->encode("ab c", {/*add_special_tokens=*/false}), ElementsAre(4, 5));
  EXPECT_THAT(*(*t)->encode("ab c"), ElementsAre(6, 4, 5));
  EXPECT_THAT(*(*t)->encode("ba<|end|>", {false}), ElementsAre(1, 0, 6));
  EXPECT_EQ(*(*t)->decode({6, 4, 5}), "<|end|>ab c");
  DecodeOptions skip;
  skip.skip_special_tokens = true;
  EXPECT_EQ(*(*t)->decode({6, 4, 5}, skip), "ab c");
  EXPECT_EQ((*t)->vocab_size(), 7);
  EXPECT_TRUE((*t)->is_special(6));
  EXPECT_EQ((*t)->token_to_id("Ġc"), 5);
}

TEST(BpeTokenizerTest, BadInputIsAnErrorNotACrash) {
  auto t = load_hf_tokenizer_json(tiny_tokenizer_json(), "tiny");
  ASSERT_TRUE(t.ok());
  EXPECT_THAT(std::string((*t)->encode("a\xFF").status().message()), HasSubstr("not valid UTF-8"));
  EXPECT_THAT(std::string((*t)->decode({7}).status().message()),
              HasSubstr("token id 7 is outside the vocabulary [0, 7)"));
  EXPECT_THAT(std::string((*t)->decode({-1}).status().message()), HasSubstr("outside"));
  // Partial UTF-8 from a byte token decodes to U+FFFD, as Hugging Face does.
  auto one_byte = load_hf_tokenizer_json(tiny_tokenizer_json(), "tiny");
  EXPECT_EQ(*(*one_byte)->decode({0}), "a");
}

std::string replaced(std::string text, const std::string& from, const std::string& to) {
  size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  return at == std::string::npos ? text : text.replace(at, from.size(), to);
}

TEST(BpeTokenizerTest, UnsupportedComponentsAreNamed) {
  auto error = [](const std::string& json) {
    auto t = load_hf_tokenizer_json(json, "dir/tokenizer.json");
    EXPECT_FALSE(t.ok());
    return std::string(t.status().message());
  };
  const std::string base = tiny_tokenizer_json();
  EXPECT_THAT(error(replaced(base, "\"type\": \"BPE\"", "\"type\": \"WordPiece\"")),
              HasSubstr("dir/tokenizer.json: unsupported tokenizer model type 'WordPiece'; "
                        "supported: BPE (byte-level)"));
  EXPECT_THAT(error(replaced(base, "\"normalizer\": null", "\"normalizer\": {\"type\": \"NFKC\"}")),
              HasSubstr("unsupported normalizer 'NFKC'; supported: NFC"));
  EXPECT_THAT(error(replaced(base, "\"decoder\": {\"type\": \"ByteLevel\"}",
                             "\"decoder\": {\"type\": \"Metaspace\"}")),
              HasSubstr("unsupported decoder 'Metaspace'"));
  EXPECT_THAT(error(replaced(base, "\"byte_fallback\": false", "\"byte_fallback\": true")),
              HasSubstr("byte_fallback"));
  EXPECT_THAT(error(replaced(base, "\"Ġ c\"", "\"x y\"")),
              HasSubstr("merge #1 'x y' uses tokens missing from vocab"));
  EXPECT_THAT(error("{\"model\": "), HasSubstr("dir/tokenizer.json: line 1"));
  EXPECT_THAT(error("{}"), HasSubstr("no \"model\" object"));
}

// One id of 2^31-1 used to allocate a table of 2^31 tokens.
TEST(BpeTokenizerTest, HugeOrSparseIdsAreErrorsNamingTheFileAndTheId) {
  auto error = [](const std::string& json) {
    auto t = load_hf_tokenizer_json(json, "dir/tokenizer.json");
    EXPECT_FALSE(t.ok());
    return std::string(t.status().message());
  };
  const std::string base = tiny_tokenizer_json();
  EXPECT_THAT(error(replaced(base, "\"c\": 2", "\"c\": 2147483647")),
              HasSubstr("dir/tokenizer.json: vocab entry 'c' has id 2147483647; token ids must be "
                        "below 16777216"));
  EXPECT_THAT(error(replaced(base, "{\"id\": 6,", "{\"id\": 2147483647,")),
              HasSubstr("dir/tokenizer.json: added token '<|end|>' has id 2147483647; token ids "
                        "must be below 16777216"));
  EXPECT_THAT(error(replaced(base, "\"c\": 2", "\"c\": 100000")),
              HasSubstr("dir/tokenizer.json: vocab entry 'c' has id 100000, but the file has only "
                        "7 tokens"));
}

// Ids the post-processor adds must be tokens of the tokenizer: a model sized for the tokenizer
// would otherwise receive ids beyond its vocabulary.
TEST(BpeTokenizerTest, PostProcessorIdsOutsideTheVocabularyAreErrors) {
  auto t = load_hf_tokenizer_json(
      replaced(tiny_tokenizer_json(), "\"ids\": [6]", "\"ids\": [70000]"), "dir/tokenizer.json");
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(std::string(t.status().message()),
              HasSubstr("dir/tokenizer.json: post_processor special token '<|end|>' has id 70000, "
                        "outside the vocabulary [0, 7)"));
}

TEST(CharTokenizerTest, DefaultAlphabetRoundTripsAndMapsUnknownsToUnk) {
  auto t = load_tokenizer("/nonexistent-flywheel-dir", "char");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ((*t)->vocab_size(), 100);
  auto ids = (*t)->encode("2+3=5\n<eos>");
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(ids->back(), 2);  // <eos>
  EXPECT_EQ(*(*t)->decode(*ids), "2+3=5\n<eos>");
  EXPECT_THAT(*(*t)->encode("é"), ElementsAre(3));  // <unk>
}

TEST(CharTokenizerTest, LoadsACustomAlphabet) {
  flywheel::testing::ScratchDir scratch("flywheel_char");
  const fs::path& dir = scratch.path();
  std::ofstream(dir / "char_tokenizer.json")
      << R"({"type": "char", "special_tokens": ["<eos>"], "alphabet": "01+="})";
  auto t = load_tokenizer(dir.string());
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_THAT(*(*t)->encode("1+1=10<eos>"), ElementsAre(2, 3, 2, 4, 2, 1, 0));
  std::ofstream(dir / "char_tokenizer.json") << R"({"type": "char", "alphabet": "aa"})";
  EXPECT_FALSE(load_tokenizer(dir.string()).ok());
}

TEST(ChatTemplateTest, RendersChatmlAndLlama3) {
  std::vector<ChatMessage> chat = {{"system", "S"}, {"user", " hi \n"}};
  EXPECT_EQ(*ChatTemplate::by_name("chatml")->render(chat),
            "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\n hi \n<|im_end|>\n"
            "<|im_start|>assistant\n");
  EXPECT_EQ(*ChatTemplate::by_name("llama3")->render(chat, /*add_generation_prompt=*/false),
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nS<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>");
}

// An episode's stream, assistant turn + markers + reply + markers, renders as the template
// renders the same conversation: the next assistant turn starts where the template starts it.
TEST(ChatTemplateTest, TurnMarkersPutAReplyBetweenAssistantTurnsAsTheTemplateDoes) {
  for (const char* name : {"chatml", "llama3"}) {
    ChatTemplate t = *ChatTemplate::by_name(name);
    const TurnMarkers m = t.turn_markers();
    const std::string first = *t.render({{"user", "q"}});
    const std::string whole = *t.render({{"user", "q"}, {"assistant", "A"}, {"user", "R"}});
    EXPECT_EQ(first + "A" + m.end_of_turn + m.open + "R" + m.close, whole) << name;
  }
}

TEST(ChatTemplateTest, Qwen3KeepsReasoningOnlyAfterTheLastQuery) {
  std::vector<ChatMessage> chat = {{"user", "q1"},
                                   {"assistant", "<think>\nold\n</think>\n\na1"},
                                   {"user", "q2"},
                                   {"assistant", "a2"}};
  EXPECT_EQ(*ChatTemplate::by_name("qwen3")->render(chat, false),
            "<|im_start|>user\nq1<|im_end|>\n<|im_start|>assistant\na1<|im_end|>\n"
            "<|im_start|>user\nq2<|im_end|>\n"
            "<|im_start|>assistant\n<think>\n\n</think>\n\na2<|im_end|>\n");
}

TEST(ChatTemplateTest, UnknownTemplatesAndRolesAreErrorsThatSayHowToChoose) {
  EXPECT_THAT(std::string(ChatTemplate::by_name("vicuna").status().message()),
              HasSubstr("known templates: chatml, qwen3, llama3"));
  EXPECT_THAT(
      std::string(ChatTemplate::by_name("chatml")->render({{"tool", "x"}}).status().message()),
      HasSubstr("unsupported role 'tool'"));
  EXPECT_FALSE(ChatTemplate::by_name("chatml")->render({}).ok());
  flywheel::testing::ScratchDir scratch("flywheel_tmpl");
  const fs::path& dir = scratch.path();
  std::ofstream(dir / "tokenizer_config.json") << R"({"chat_template": "{{ messages }}"})";
  absl::Status unknown = ChatTemplate::detect(dir.string()).status();
  EXPECT_THAT(std::string(unknown.message()),
              HasSubstr("chat template not recognised by flywheel; set tokenizer.chat_template to "
                        "chatml or llama3"));
  std::ofstream(dir / "tokenizer_config.json")
      << R"({"chat_template": "<|start_header_id|>Cutting Knowledge Date<|eot_id|>"})";
  EXPECT_THAT(std::string(ChatTemplate::detect(dir.string()).status().message()),
              HasSubstr("Llama 3.1+"));
  std::ofstream(dir / "tokenizer_config.json")
      << R"({"chat_template": "{{'<|im_start|>system\nYou are a helpful assistant.<|im_end|>'}}<|im_end|>"})";
  auto qwen2 = ChatTemplate::detect(dir.string());
  ASSERT_TRUE(qwen2.ok()) << qwen2.status();
  EXPECT_EQ(qwen2->default_system(), "You are a helpful assistant.");
  EXPECT_THAT(*qwen2->render({{"user", "x"}}), HasSubstr("system\nYou are a helpful assistant."));
}

}  // namespace
}  // namespace flywheel::model
