#include "flywheel/rewards/model/reward_model.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <thread>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>

#include "../../model/test_models.h"
#include "absl/strings/str_cat.h"
#include "flywheel/core/file_io.h"
#include "flywheel/core/plugin_registry.h"
#include "flywheel/model/hf_checkpoint.h"
#include "flywheel/model/tokenizer/tokenizer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/scratch_dir.h"

namespace flywheel::rewards {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

constexpr double kTolerance = 1e-5;  // float32 scores against the direct forward

// The byte-level BPE alphabet: byte b -> the code point GPT-2's bytes_to_unicode gives it.
std::string byte_token(int b) {
  int code = b;
  const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
  if (!printable) {
    int n = 0;
    for (int x = 0; x < b; ++x) {
      if (!((x >= 33 && x <= 126) || (x >= 161 && x <= 172) || (x >= 174))) ++n;
    }
    code = 256 + n;
  }
  std::string out;
  if (code < 0x80) {
    out += static_cast<char>(code);
  } else {
    out += static_cast<char>(0xC0 | (code >> 6));
    out += static_cast<char>(0x80 | (code & 0x3F));
  }
  return out;
}

// A byte-level BPE over all 256 bytes (ids 0-255), with Qwen's specials <|endoftext|> (256, the
// padding token), <|im_start|> (257), <|im_end|> (258), and merges "h e" (259), "Ġ t" (260).
std::string bpe_tokenizer_json() {
  std::string vocab;
  for (int b = 0; b < 256; ++b) {
    std::string t = byte_token(b);
    if (t == "\"" || t == "\\") t = "\\" + t;
    absl::StrAppend(&vocab, "\"", t, "\": ", b, ", ");
  }
  absl::StrAppend(&vocab, "\"he\": 259, \"", byte_token(' '), "t\": 260");
  std::string added;
  const char* specials[] = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};
  for (int i = 0; i < 3; ++i) {
    absl::StrAppend(&added, i ? ", " : "", "{\"id\": ", 256 + i, ", \"content\": \"", specials[i],
                    "\", \"special\": true, \"single_word\": false, \"lstrip\": false, "
                    "\"rstrip\": false, \"normalized\": false}");
  }
  return absl::StrCat(R"({"version": "1.0", "added_tokens": [)", added, R"(], "normalizer": null,
    "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
      {"type": "Split", "pattern": {"Regex": " ?\\S+|\\s+"}, "behavior": "Isolated", "invert": false},
      {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false}]},
    "post_processor": null, "decoder": {"type": "ByteLevel"},
    "model": {"type": "BPE", "dropout": null, "unk_token": null, "byte_fallback": false,
      "ignore_merges": false, "vocab": {)",
                      vocab, R"(}, "merges": ["h e", ")", byte_token(' '), R"( t"]}})");
}

// A random sequence-classification checkpoint as transformers saves one.
struct Checkpoint {
  std::string dir;
  std::unique_ptr<model::DecoderModel> decoder;  // float32, the written weights
  at::Tensor score_weight;                       // [1, hidden] float32
  std::unique_ptr<model::Tokenizer> tokenizer;
  int64_t pad_token_id = 0;
};

struct WriteOptions {
  std::string architecture;  // default: <Family>ForSequenceClassification
  int64_t score_rows = 1;
  bool with_score = true;
  bool with_tokenizer = true;
  int64_t num_labels = 1;  // 0: no num_labels / id2label in config.json
};

template <typename F>
WriteOptions with(F change) {
  WriteOptions w;
  change(w);
  return w;
}

std::string architecture_of(const std::string& family) {
  if (family == "qwen2") return "Qwen2ForSequenceClassification";
  if (family == "qwen3") return "Qwen3ForSequenceClassification";
  return "LlamaForSequenceClassification";
}

using TempDir = flywheel::testing::ScratchDir;

// qwen2 and qwen3 get the byte-level BPE (pad <|endoftext|> = 256); llama the character
// tokenizer (pad <pad> = 0).
Checkpoint write_checkpoint(const std::string& dir, const std::string& family,
                            const WriteOptions& w = {}, model::ModelConfig config = {},
                            uint64_t seed = 7) {
  if (config.model_type.empty()) {
    config = model::testing::tiny_config(family);
    config.vocab_size = family == "llama" ? 128 : 300;
  }
  Checkpoint c;
  c.dir = dir;
  auto created = model::DecoderModel::create(config, {at::kFloat, at::kCPU});
  EXPECT_TRUE(created.ok()) << created.status();
  c.decoder = std::move(*created);
  c.decoder->init_random(seed);
  at::NoGradGuard no_grad;
  at::Generator gen = at::detail::createCPUGenerator(seed + 100);
  for (auto& [name, p] : c.decoder->named_parameters()) {
    if (name.find("norm") != std::string::npos || name.find("bias") != std::string::npos) {
      at::Tensor noise = at::empty(p.sizes(), at::kFloat);
      noise.normal_(0.0, 0.3, gen);
      const_cast<at::Tensor&>(p).add_(noise);
    }
  }
  c.score_weight = at::empty({w.score_rows, config.hidden_size}, at::kFloat);
  c.score_weight.normal_(0.0, 1.0, gen);
  auto writer = model::HfWriter::create(dir, config, at::kFloat);
  EXPECT_TRUE(writer.ok()) << writer.status();
  for (const auto& [name, p] : c.decoder->named_parameters()) {
    if (name == "lm_head.weight") continue;  // a classifier has no lm_head
    EXPECT_TRUE((*writer)->add(name, p).ok());
  }
  if (w.with_score) {
    EXPECT_TRUE((*writer)->add("score.weight", c.score_weight).ok());
  }
  EXPECT_TRUE((*writer)->finish().ok());

  c.pad_token_id = family == "llama" ? 0 : 256;
  auto json = core::read_json_file(dir + "/config.json");
  EXPECT_TRUE(json.ok()) << json.status();
  json->set("architectures",
            core::Json::array(
                {core::Json(w.architecture.empty() ? architecture_of(family) : w.architecture)}));
  json->set("pad_token_id", core::Json(c.pad_token_id));
  if (w.num_labels > 0) {
    core::Json id2label = core::Json::object(), label2id = core::Json::object();
    for (int64_t i = 0; i < w.num_labels; ++i) {
      id2label.set(absl::StrCat(i), core::Json(absl::StrCat("LABEL_", i)));
      label2id.set(absl::StrCat("LABEL_", i), core::Json(i));
    }
    json->set("id2label", std::move(id2label));
    json->set("label2id", std::move(label2id));
  }
  std::ofstream(dir + "/config.json") << json->dump() << "\n";
  if (w.with_tokenizer) {
    if (family == "llama") {
      EXPECT_TRUE(model::save_default_char_tokenizer(dir).ok());
    } else {
      std::ofstream(dir + "/tokenizer.json") << bpe_tokenizer_json();
    }
    auto tokenizer = model::load_tokenizer(dir);
    EXPECT_TRUE(tokenizer.ok()) << tokenizer.status();
    if (tokenizer.ok()) c.tokenizer = std::move(*tokenizer);
  }
  return c;
}

// The oracle: one unpadded forward of `ids` through the written weights, the head applied to
// the hidden state of the last token that is not padding (transformers' rule).
double direct_score(const Checkpoint& c, const std::vector<int64_t>& ids) {
  at::NoGradGuard no_grad;
  const int64_t n = static_cast<int64_t>(ids.size());
  model::ForwardBatch batch;
  batch.tokens = at::tensor(ids, at::kLong).reshape({1, n});
  batch.positions = at::arange(n, at::kLong).reshape({1, n});
  at::Tensor hidden = c.decoder->forward(batch);  // [1, n, H]
  int64_t last = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (ids[i] != c.pad_token_id) last = i;
  }
  return (hidden[0][last] * c.score_weight[0]).sum().item<double>();
}

double direct_score(const Checkpoint& c, const std::string& text, bool special = true) {
  model::EncodeOptions options;
  options.add_special_tokens = special;
  auto ids = c.tokenizer->encode(text, options);
  EXPECT_TRUE(ids.ok()) << ids.status();
  return direct_score(c, *ids);
}

std::unique_ptr<RewardModel> make_model(const std::string& dir,
                                        std::map<std::string, std::string> params = {}) {
  RewardSpec spec;
  spec.name = "reward_model";
  spec.params = std::move(params);
  spec.params["path"] = dir;
  auto options = parse_reward_model_options(spec);
  EXPECT_TRUE(options.ok()) << options.status();
  if (!options.ok()) return nullptr;
  auto model = RewardModel::create(*options);
  EXPECT_TRUE(model.ok()) << model.status();
  return model.ok() ? std::move(*model) : nullptr;
}

absl::Status create_error(const std::string& dir, std::map<std::string, std::string> params = {}) {
  RewardSpec spec;
  spec.name = "reward_model";
  spec.params = std::move(params);
  spec.params["path"] = dir;
  return make_reward_model(spec).status();
}

// Keeps the records alive for the inputs' views.
struct Inputs {
  std::vector<core::Json> records;
  std::vector<std::string> prompts, completions, names;
  std::vector<RewardInput> inputs;

  void add(std::string prompt, std::string completion, core::Json record = core::Json::object()) {
    records.push_back(std::move(record));
    prompts.push_back(std::move(prompt));
    completions.push_back(std::move(completion));
    names.push_back(absl::StrCat("line ", names.size() + 1));
  }
  const std::vector<RewardInput>& build() {
    inputs.clear();
    for (size_t i = 0; i < records.size(); ++i) {
      RewardInput in;
      in.record = &records[i];
      in.record_name = names[i];
      in.prompt = prompts[i];
      in.completion = completions[i];
      inputs.push_back(in);
    }
    return inputs;
  }
};

Inputs varied_inputs(const std::string& family) {
  Inputs in;
  in.add("What is 2+2? ", "The answer is 4.");
  in.add("Q", "A");
  in.add("Explain the theory of everything in one sentence. ",
         "The hidden state of the last token, then a dot product.");
  in.add("", "the head reads here");
  in.add("Tell me: ", "the weather");
  in.add("one more ", "longer answer with several more words than before");
  // Ends with the padding token: transformers reads the token before it.
  in.add("ends with padding ", family == "llama" ? "done<pad>" : "done<|endoftext|>");
  return in;
}

class RewardModelFamilyTest : public ::testing::TestWithParam<std::string> {};

TEST_P(RewardModelFamilyTest, ScoresEqualADirectForwardOfTheCheckpoint) {
  TempDir tmp;
  Checkpoint c = write_checkpoint(tmp.sub("rm"), GetParam());
  auto rm = make_model(c.dir, {{"batch_size", "3"}});
  ASSERT_NE(rm, nullptr);
  Inputs in = varied_inputs(GetParam());
  const std::vector<RewardInput>& inputs = in.build();
  std::vector<absl::StatusOr<RewardOutput>> batched = rm->score_batch(inputs);
  ASSERT_EQ(batched.size(), inputs.size());
  double max_diff = 0, lo = 1e30, hi = -1e30;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const std::string text = in.prompts[i] + in.completions[i];
    ASSERT_EQ(*rm->tokenize(inputs[i]), *c.tokenizer->encode(text)) << "untruncated: " << text;
    const double expected = direct_score(c, text);
    ASSERT_TRUE(batched[i].ok()) << batched[i].status();
    absl::StatusOr<RewardOutput> single = rm->score(inputs[i]);
    ASSERT_TRUE(single.ok()) << single.status();
    max_diff = std::max(
        {max_diff, std::abs(batched[i]->score - expected), std::abs(single->score - expected)});
    EXPECT_EQ(batched[i]->components.at("raw"), batched[i]->score);
    lo = std::min(lo, expected);
    hi = std::max(hi, expected);
  }
  std::printf("[%s] reward_model vs direct forward: max |diff| = %.3g over %zu inputs\n",
              GetParam().c_str(), max_diff, inputs.size());
  EXPECT_LE(max_diff, kTolerance);
  EXPECT_GT(hi - lo, 1e-3) << "inputs should score differently";
}

TEST_P(RewardModelFamilyTest, ReadsTheTokenBeforeTrailingPadding) {
  TempDir tmp;
  Checkpoint c = write_checkpoint(tmp.sub("rm"), GetParam());
  auto rm = make_model(c.dir);
  ASSERT_NE(rm, nullptr);
  const std::string pad = GetParam() == "llama" ? "<pad>" : "<|endoftext|>";
  Inputs in;
  in.add("prompt ", "done");
  in.add("prompt ", "done" + pad);
  const std::vector<RewardInput>& inputs = in.build();
  auto plain = rm->score(inputs[0]);
  auto padded = rm->score(inputs[1]);
  ASSERT_TRUE(plain.ok() && padded.ok());
  // Same token read, but the padded row's hidden state there is causal, hence identical.
  EXPECT_NEAR(plain->score, padded->score, kTolerance);
  auto ids = rm->tokenize(inputs[1]);
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(ids->back(), c.pad_token_id);
}

INSTANTIATE_TEST_SUITE_P(Families, RewardModelFamilyTest,
                         ::testing::Values("qwen2", "qwen3", "llama"));

TEST(RewardModelTest, AppliesTheChatTemplateToPromptAndCompletion) {
  TempDir tmp;
  Checkpoint c = write_checkpoint(tmp.sub("rm"), "qwen2");
  auto rm = make_model(c.dir, {{"chat_template", "chatml"}});
  ASSERT_NE(rm, nullptr);
  Inputs in;
  core::Json record = core::Json::object();
  record.set("prompt", core::Json("What is 2+2?"));
  in.add("<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n", "4", record);
  core::Json chat = core::Json::object();
  core::Json messages = core::Json::array();
  core::Json system = core::Json::object(), user = core::Json::object();
  system.set("role", core::Json("system"));
  system.set("content", core::Json("Be brief."));
  user.set("role", core::Json("user"));
  user.set("content", core::Json("hello"));
  messages.push_back(system);
  messages.push_back(user);
  chat.set("messages", messages);
  in.add("ignored", "hi there", chat);
  const std::vector<RewardInput>& inputs = in.build();
  auto out = rm->score_batch(inputs);
  ASSERT_TRUE(out[0].ok()) << out[0].status();
  ASSERT_TRUE(out[1].ok()) << out[1].status();
  const double first = direct_score(
      c, "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n4<|im_end|>\n", false);
  const double second = direct_score(c,
                                     "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n"
                                     "hello<|im_end|>\n<|im_start|>assistant\nhi there<|im_end|>\n",
                                     false);
  EXPECT_NEAR(out[0]->score, first, kTolerance);
  EXPECT_NEAR(out[1]->score, second, kTolerance);

  core::Json bad = core::Json::object();
  bad.set("messages", core::Json("not a list"));
  Inputs bad_in;
  bad_in.add("", "x", bad);
  auto error = rm->score(bad_in.build()[0]);
  EXPECT_THAT(error.status().message(), HasSubstr("line 1"));
  EXPECT_THAT(error.status().message(), HasSubstr("messages"));
}

TEST(RewardModelTest, TruncatesFromTheLeftKeepingALeadingSpecialToken) {
  TempDir tmp;
  Checkpoint c = write_checkpoint(tmp.sub("rm"), "llama");
  auto rm = make_model(c.dir, {{"max_length", "8"}});
  ASSERT_NE(rm, nullptr);
  Inputs in;
  in.add("<bos>abcdefghij", "klmno");
  in.add("abcdefghij", "klmno");
  in.add("ab", "c");
  const std::vector<RewardInput>& inputs = in.build();
  auto full_bos = c.tokenizer->encode("<bos>abcdefghijklmno");
  auto full = c.tokenizer->encode("abcdefghijklmno");
  ASSERT_TRUE(full_bos.ok() && full.ok());
  std::vector<int64_t> expected_bos = {(*full_bos)[0]};
  expected_bos.insert(expected_bos.end(), full_bos->end() - 7, full_bos->end());
  std::vector<int64_t> expected(full->end() - 8, full->end());
  EXPECT_EQ(*rm->tokenize(inputs[0]), expected_bos);
  EXPECT_EQ(*rm->tokenize(inputs[1]), expected);
  EXPECT_EQ(rm->tokenize(inputs[2])->size(), 3u);
  auto out = rm->score_batch(inputs);
  ASSERT_TRUE(out[0].ok() && out[1].ok());
  EXPECT_NEAR(out[0]->score, direct_score(c, expected_bos), kTolerance);
  EXPECT_NEAR(out[1]->score, direct_score(c, expected), kTolerance);

  EXPECT_THAT(create_error(c.dir, {{"max_length", "1000"}}).message(),
              HasSubstr("max_position_embeddings 128"));
}

TEST(RewardModelTest, NormalizesWithRunningMeanAndStdThenClips) {
  TempDir tmp;
  Checkpoint c = write_checkpoint(tmp.sub("rm"), "qwen2");
  auto rm = make_model(c.dir, {{"normalize", "true"}, {"batch_size", "2"}});
  ASSERT_NE(rm, nullptr);
  Inputs in = varied_inputs("qwen2");
  const std::vector<RewardInput>& inputs = in.build();

  // The first score ever normalises to 0.
  auto first = rm->score(inputs[0]);
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(first->score, 0.0);
  std::vector<double> seen = {first->components.at("raw")};

  auto out = rm->score_batch(inputs);
  for (const auto& o : out) {
    ASSERT_TRUE(o.ok()) << o.status();
    seen.push_back(o->components.at("raw"));
  }
  double mean = 0, var = 0;
  for (double v : seen) mean += v / seen.size();
  for (double v : seen) var += (v - mean) * (v - mean) / seen.size();
  const double stddev = std::sqrt(var);
  for (size_t i = 0; i < out.size(); ++i) {
    EXPECT_NEAR(out[i]->score, (out[i]->components.at("raw") - mean) / stddev, 1e-9) << i;
  }
  RewardModelStats stats = rm->stats();
  EXPECT_EQ(stats.count, static_cast<int64_t>(seen.size()));
  EXPECT_NEAR(stats.mean, mean, 1e-12);
  EXPECT_NEAR(stats.stddev, stddev, 1e-12);

  auto clipped = make_model(c.dir, {{"normalize", "true"}, {"clip", "0.5"}});
  ASSERT_NE(clipped, nullptr);
  bool some_clipped = false;
  for (const auto& o : clipped->score_batch(inputs)) {
    ASSERT_TRUE(o.ok());
    EXPECT_LE(std::abs(o->score), 0.5);
    some_clipped |= std::abs(o->score) == 0.5;
  }
  EXPECT_TRUE(some_clipped);

  auto raw_clipped = make_model(c.dir, {{"clip", "0.01"}});
  ASSERT_NE(raw_clipped, nullptr);
  auto o = raw_clipped->score(inputs[2]);
  ASSERT_TRUE(o.ok());
  const double raw = o->components.at("raw");
  EXPECT_EQ(o->score, std::clamp(raw, -0.01, 0.01));
  EXPECT_GT(std::abs(raw), 0.01);
}

TEST(RewardModelTest, ConcurrentCallersAllGetTheirOwnScores) {
  TempDir tmp;
  Checkpoint c = write_checkpoint(tmp.sub("rm"), "llama");
  auto rm = make_model(c.dir, {{"normalize", "true"}});
  ASSERT_NE(rm, nullptr);
  auto reference = make_model(c.dir);
  Inputs in = varied_inputs("llama");
  const std::vector<RewardInput>& inputs = in.build();
  std::vector<double> expected;
  for (const RewardInput& input : inputs) expected.push_back(reference->score(input)->score);
  std::vector<std::thread> threads;
  std::vector<double> worst(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 5; ++round) {
        for (size_t i = 0; i < inputs.size(); ++i) {
          auto o = rm->score(inputs[i]);
          const double diff = o.ok() ? std::abs(o->components.at("raw") - expected[i]) : 1e9;
          worst[t] = std::max(worst[t], diff);
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (double w : worst) EXPECT_LE(w, kTolerance);
  EXPECT_EQ(rm->stats().count, static_cast<int64_t>(4 * 5 * inputs.size()));
}

TEST(RewardModelTest, ScoresInvalidUtf8InsteadOfFailing) {
  TempDir tmp;
  Checkpoint c = write_checkpoint(tmp.sub("rm"), "qwen2");
  auto rm = make_model(c.dir);
  ASSERT_NE(rm, nullptr);
  Inputs in;
  in.add("prompt ", std::string("bad \xff\xfe bytes\0nul", 17));
  auto o = rm->score(in.build()[0]);
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_TRUE(std::isfinite(o->score));
}

TEST(RewardModelTest, Bfloat16StaysCloseToFloat32) {
  TempDir tmp;
  Checkpoint c = write_checkpoint(tmp.sub("rm"), "qwen2");
  auto f32 = make_model(c.dir);
  auto bf16 = make_model(c.dir, {{"dtype", "bfloat16"}});
  ASSERT_NE(f32, nullptr);
  ASSERT_NE(bf16, nullptr);
  Inputs in = varied_inputs("qwen2");
  const std::vector<RewardInput>& inputs = in.build();
  auto a = f32->score_batch(inputs);
  auto b = bf16->score_batch(inputs);
  for (size_t i = 0; i < inputs.size(); ++i) {
    ASSERT_TRUE(a[i].ok() && b[i].ok());
    EXPECT_NEAR(a[i]->score, b[i]->score, 0.1 * (1 + std::abs(a[i]->score))) << i;
  }
}

TEST(RewardModelTest, BadCheckpointsAreErrorsNamingThePath) {
  TempDir tmp;
  const std::string missing = tmp.sub("nowhere");
  EXPECT_THAT(create_error(missing).message(), HasSubstr(missing));

  const std::string empty = tmp.sub("empty");
  fs::create_directories(empty);
  EXPECT_THAT(create_error(empty).message(), HasSubstr(empty + "/config.json"));

  const std::string causal = tmp.sub("causal");
  write_checkpoint(causal, "qwen2",
                   with([](WriteOptions& w) { w.architecture = "Qwen2ForCausalLM"; }));
  absl::Status s = create_error(causal);
  EXPECT_THAT(s.message(), HasSubstr(causal + "/config.json"));
  EXPECT_THAT(s.message(), HasSubstr("Qwen2ForCausalLM"));

  const std::string two_labels = tmp.sub("two_labels");
  write_checkpoint(two_labels, "llama",
                   with([](WriteOptions& w) { w.score_rows = w.num_labels = 2; }));
  EXPECT_THAT(create_error(two_labels).message(), HasSubstr("num_labels is 2"));

  const std::string two_rows = tmp.sub("two_rows");
  write_checkpoint(two_rows, "llama",
                   with([](WriteOptions& w) { w.score_rows = 2, w.num_labels = 0; }));
  s = create_error(two_rows);
  EXPECT_THAT(s.message(), HasSubstr(two_rows));
  EXPECT_THAT(s.message(), HasSubstr("score.weight' has 2 rows"));

  const std::string no_head = tmp.sub("no_head");
  write_checkpoint(no_head, "qwen2", with([](WriteOptions& w) { w.with_score = false; }));
  s = create_error(no_head);
  EXPECT_THAT(s.message(), HasSubstr(no_head));
  EXPECT_THAT(s.message(), HasSubstr("score.weight"));

  const std::string no_tokenizer = tmp.sub("no_tokenizer");
  write_checkpoint(no_tokenizer, "qwen2", with([](WriteOptions& w) { w.with_tokenizer = false; }));
  std::ofstream(no_tokenizer + "/tokenizer.json") << "{\"model\": ";
  s = create_error(no_tokenizer);
  EXPECT_THAT(s.message(), HasSubstr(no_tokenizer));
  EXPECT_THAT(s.message(), HasSubstr("tokenizer"));

  const std::string truncated = tmp.sub("truncated");
  write_checkpoint(truncated, "qwen2");
  fs::resize_file(truncated + "/model.safetensors", 100);
  EXPECT_THAT(create_error(truncated).message(), HasSubstr(truncated));

  const std::string good = tmp.sub("good");
  write_checkpoint(good, "qwen2");
  EXPECT_THAT(create_error(good, {{"chat_template", "auto"}}).ToString(), HasSubstr("OK"));
  EXPECT_THAT(create_error(good, {{"chat_template", "vicuna"}}).message(), HasSubstr("vicuna"));
}

TEST(RewardModelTest, OptionsAreStrict) {
  TempDir tmp;
  Checkpoint c = write_checkpoint(tmp.sub("rm"), "qwen2");
  EXPECT_THAT(create_error(c.dir, {{"batch_sise", "4"}}).message(), HasSubstr("batch_sise"));
  EXPECT_THAT(create_error(c.dir, {{"batch_size", "0"}}).message(), HasSubstr("batch_size"));
  EXPECT_THAT(create_error(c.dir, {{"dtype", "int8"}}).message(), HasSubstr("dtype"));
  EXPECT_THAT(create_error(c.dir, {{"clip", "-1"}}).message(), HasSubstr("clip"));
  EXPECT_THAT(create_error(c.dir, {{"normalize", "maybe"}}).message(), HasSubstr("normalize"));
  EXPECT_THAT(create_error(c.dir, {{"device", "toaster"}}).message(), HasSubstr("device"));
  RewardSpec no_path;
  no_path.name = "reward_model";
  EXPECT_THAT(make_reward_model(no_path).status().message(), HasSubstr("'path' is required"));
}

TEST(RewardModelTest, IsRegisteredAndTakesPathsRelativeToTheConfig) {
  TempDir tmp;
  Checkpoint c = write_checkpoint(tmp.sub("rm"), "llama");
  PluginRegistry registry;
  ASSERT_TRUE(register_reward_model(registry).ok());
  RewardSpec spec;
  spec.name = "reward_model";
  spec.params = {{"path", "rm"}};
  spec.config_dir = fs::path(c.dir).parent_path().string();
  auto fn = registry.get<RewardFunction, const RewardSpec&>().create("reward_model", spec);
  ASSERT_TRUE(fn.ok()) << fn.status();
  EXPECT_TRUE((*fn)->batched());
  Inputs in;
  in.add("a ", "b");
  auto o = (*fn)->score(in.build()[0]);
  ASSERT_TRUE(o.ok());
  EXPECT_NEAR(o->score, direct_score(c, "a b"), kTolerance);
}

}  // namespace
}  // namespace flywheel::rewards
