#include "flywheel/model/model_config.h"

#include <map>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace flywheel::model {
namespace {

using ::testing::HasSubstr;

core::Json parse(const std::string& text) { return *core::Json::parse(text); }

constexpr const char* kQwen3 = R"({
  "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "vocab_size": 151936,
  "hidden_size": 1024, "intermediate_size": 3072, "num_hidden_layers": 28,
  "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 128, "rms_norm_eps": 1e-06,
  "rope_theta": 1000000, "rope_scaling": null, "tie_word_embeddings": true,
  "attention_bias": false, "hidden_act": "silu", "max_position_embeddings": 40960,
  "bos_token_id": 151643, "eos_token_id": 151645, "torch_dtype": "bfloat16"})";

TEST(ModelConfigTest, ReadsQwen3WithExplicitHeadDim) {
  auto c = ModelConfig::from_json(parse(kQwen3), "config.json");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->head_dim, 128);  // not 1024 / 16
  EXPECT_TRUE(c->qk_norm);
  EXPECT_FALSE(c->qkv_bias);
  EXPECT_TRUE(c->tie_word_embeddings);
  EXPECT_EQ(c->eos_token_ids, std::vector<int64_t>{151645});
  EXPECT_EQ(c->num_parameters(), 596049920);  // Qwen3-0.6B
}

TEST(ModelConfigTest, Qwen2HasQkvBiasButNoOutputBias) {
  auto c = ModelConfig::from_json(parse(R"({"model_type": "qwen2", "vocab_size": 10,
      "hidden_size": 8, "intermediate_size": 16, "num_hidden_layers": 1,
      "num_attention_heads": 2, "num_key_value_heads": 1, "eos_token_id": [1, 2]})"),
                                  "c");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->qkv_bias);
  EXPECT_FALSE(c->o_bias);
  EXPECT_EQ(c->head_dim, 4);
  EXPECT_EQ(c->eos_token_ids, (std::vector<int64_t>{1, 2}));
}

TEST(ModelConfigTest, LlamaAttentionBiasAddsAllFourAndReadsRopeScaling) {
  auto c = ModelConfig::from_json(parse(R"({"model_type": "llama", "vocab_size": 10,
      "hidden_size": 8, "intermediate_size": 16, "num_hidden_layers": 1,
      "num_attention_heads": 2, "attention_bias": true,
      "rope_scaling": {"type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
                       "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}})"),
                                  "c");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->qkv_bias);
  EXPECT_TRUE(c->o_bias);
  EXPECT_TRUE(c->has_llama3_rope_scaling);
  EXPECT_DOUBLE_EQ(c->rope_scaling.factor, 32.0);
}

TEST(ModelConfigTest, MissingKeysAndUnsupportedOptionsAreNamed) {
  auto error = [](const std::string& text) {
    auto c = ModelConfig::from_json(parse(text), "m/config.json");
    EXPECT_FALSE(c.ok());
    return std::string(c.status().message());
  };
  EXPECT_THAT(error(R"({"model_type": "qwen2"})"),
              HasSubstr("m/config.json: vocab_size: missing required key"));
  EXPECT_THAT(error(R"({"vocab_size": 3})"), HasSubstr("model_type: missing required key"));
  EXPECT_THAT(
      error(R"({"model_type": "mistral"})"),
      HasSubstr("unsupported model type 'mistral'; supported: qwen2, qwen3, qwen3_moe, llama"));
  const std::string base = R"("vocab_size": 10, "hidden_size": 8, "intermediate_size": 16,
      "num_hidden_layers": 1, "num_attention_heads": 2)";
  EXPECT_THAT(error("{\"model_type\": \"llama\", " + base + ", \"hidden_act\": \"gelu\"}"),
              HasSubstr("unsupported activation 'gelu'"));
  EXPECT_THAT(error("{\"model_type\": \"llama\", " + base +
                    ", \"rope_scaling\": {\"type\": \"yarn\", \"factor\": 4}}"),
              HasSubstr("unsupported rope_scaling type 'yarn'"));
  EXPECT_THAT(error("{\"model_type\": \"qwen2\", " + base + ", \"use_sliding_window\": true}"),
              HasSubstr("sliding-window attention is not supported"));
  EXPECT_THAT(error("{\"model_type\": \"llama\", " + base + ", \"num_key_value_heads\": 3}"),
              HasSubstr("multiple of num_key_value_heads"));
  EXPECT_THAT(error(R"({"model_type": "llama", "vocab_size": 10, "hidden_size": "8"})"),
              HasSubstr("hidden_size: expected an integer, got a string"));
}

// The fuzzer's configs: sizes that overflow or cannot be allocated are named before anything is
// allocated.
TEST(ModelConfigTest, AbsurdSizesAreErrorsNamingTheField) {
  auto error = [](const std::map<std::string, std::string>& overrides) {
    std::map<std::string, std::string> fields = {
        {"vocab_size", "10"},         {"hidden_size", "8"},
        {"intermediate_size", "16"},  {"num_hidden_layers", "1"},
        {"num_attention_heads", "2"}, {"max_position_embeddings", "64"}};
    for (const auto& [k, v] : overrides) fields[k] = v;
    std::string text = R"({"model_type": "llama")";
    for (const auto& [k, v] : fields) text += ", \"" + k + "\": " + v;
    auto c = ModelConfig::from_json(parse(text + "}"), "m/config.json");
    EXPECT_FALSE(c.ok()) << text;
    return std::string(c.status().message());
  };
  EXPECT_THAT(error({{"hidden_size", "4611686018427387904"}}),
              HasSubstr("m/config.json: hidden_size 4611686018427387904 exceeds the limit of"));
  EXPECT_THAT(error({{"intermediate_size", "1099511627776"}}),
              HasSubstr("intermediate_size 1099511627776 exceeds the limit of"));
  EXPECT_THAT(error({{"num_hidden_layers", "2147483648"}}),
              HasSubstr("num_hidden_layers 2147483648 exceeds the limit of"));
  EXPECT_THAT(error({{"vocab_size", "50000000"}}),
              HasSubstr("vocab_size 50000000 exceeds the limit of"));
  EXPECT_THAT(error({{"num_attention_heads", "4294967296"}}),
              HasSubstr("num_attention_heads 4294967296 exceeds the limit of"));
  EXPECT_THAT(error({{"head_dim", "2147483648"}}), HasSubstr("head_dim 2147483648 exceeds"));
  EXPECT_THAT(error({{"max_position_embeddings", "0"}}),
              HasSubstr("max_position_embeddings must be positive, got 0"));
  EXPECT_THAT(error({{"vocab_size", "-5"}}), HasSubstr("vocab_size must be positive, got -5"));
  // Each size within its limit, the product far beyond any machine.
  EXPECT_THAT(error({{"hidden_size", "1048576"},
                     {"vocab_size", "16000000"},
                     {"num_attention_heads", "16384"}}),
              HasSubstr("parameters, more than the limit of"));
  EXPECT_THAT(error({{"initializer_range", "-1"}}), HasSubstr("initializer_range"));
  EXPECT_THAT(error({{"rms_norm_eps", "0"}}), HasSubstr("rms_norm_eps must be a positive"));
}

// A llama3 rope_scaling whose values make the frequencies NaN or infinite.
TEST(ModelConfigTest, NonPositiveRopeValuesAreErrorsNamingTheField) {
  auto error = [](const std::string& scaling, const std::string& extra = "") {
    auto c = ModelConfig::from_json(parse(R"({"model_type": "llama", "vocab_size": 10,
        "hidden_size": 8, "intermediate_size": 16, "num_hidden_layers": 1,
        "num_attention_heads": 2, "rope_scaling": {"rope_type": "llama3", )" +
                                          scaling + "}" + extra + "}"),
                                    "m/config.json");
    EXPECT_FALSE(c.ok()) << scaling << extra;
    return std::string(c.status().message());
  };
  const std::string ok_rest = R"("original_max_position_embeddings": 8192)";
  EXPECT_THAT(error(R"("factor": 0, "low_freq_factor": 1, "high_freq_factor": 4, )" + ok_rest),
              HasSubstr("m/config.json: rope_scaling.factor must be a positive finite number, "
                        "got 0"));
  EXPECT_THAT(error(R"("factor": -8, "low_freq_factor": 1, "high_freq_factor": 4, )" + ok_rest),
              HasSubstr("rope_scaling.factor"));
  EXPECT_THAT(error(R"("factor": 8, "low_freq_factor": 0, "high_freq_factor": 4, )" + ok_rest),
              HasSubstr("rope_scaling.low_freq_factor must be a positive"));
  EXPECT_THAT(error(R"("factor": 8, "low_freq_factor": 1, "high_freq_factor": -4, )" + ok_rest),
              HasSubstr("rope_scaling.high_freq_factor must be a positive"));
  EXPECT_THAT(error(R"("factor": 8, "low_freq_factor": 4, "high_freq_factor": 4, )" + ok_rest),
              HasSubstr("rope_scaling.high_freq_factor (4) must be greater than "
                        "rope_scaling.low_freq_factor (4)"));
  EXPECT_THAT(error(R"("factor": 8, "low_freq_factor": 1, "high_freq_factor": 4,
                       "original_max_position_embeddings": 0)"),
              HasSubstr("rope_scaling.original_max_position_embeddings must be positive, got 0"));
  EXPECT_THAT(error(R"("factor": 8, "low_freq_factor": 1, "high_freq_factor": 4, )" + ok_rest,
                    R"(, "rope_theta": 0)"),
              HasSubstr("rope_theta must be a positive finite number, got 0"));
  EXPECT_THAT(error(R"("factor": 8, "low_freq_factor": 1, "high_freq_factor": 4, )" + ok_rest,
                    R"(, "rope_theta": -500000)"),
              HasSubstr("rope_theta"));
}

TEST(ModelConfigTest, ToJsonRoundTrips) {
  auto c = ModelConfig::from_json(parse(kQwen3), "config.json");
  ASSERT_TRUE(c.ok());
  auto again = ModelConfig::from_json(c->to_json(), "again");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->to_json().dump(), c->to_json().dump());
  EXPECT_EQ(c->to_json().find("architectures")->as_array()[0].as_string(), "Qwen3ForCausalLM");
}

}  // namespace
}  // namespace flywheel::model
