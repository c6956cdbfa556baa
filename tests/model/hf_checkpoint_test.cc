#include "flywheel/model/hf_checkpoint.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <ATen/ATen.h>

#include "flywheel/model/safetensors.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "test_models.h"
#include "testing/scratch_dir.h"

namespace flywheel::model {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using testing::tiny_model;

std::string read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

class HfCheckpointTest : public ::testing::Test {
 protected:
  at::Tensor logits(const DecoderModel& m) {
    ForwardBatch b;
    b.tokens = at::tensor(std::vector<int64_t>{1, 5, 9, 33}).view({1, 4});
    b.positions = at::arange(4, at::kLong).view({1, 4});
    return m.logits(m.forward(b));
  }

  flywheel::testing::ScratchDir scratch_{"flywheel_hf"};
  const fs::path& dir_ = scratch_.path();
};

TEST_F(HfCheckpointTest, SaveLoadSaveIsByteIdenticalAndLogitsMatch) {
  for (const char* family : {"qwen2", "qwen3", "llama"}) {
    auto model = tiny_model(family);
    fs::path a = dir_ / family / "a", b = dir_ / family / "b";
    ASSERT_TRUE(save_hf_model(*model, a.string()).ok());
    auto loaded = load_hf_model(a.string(), DecoderOptions{});
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    EXPECT_TRUE(at::equal(logits(*model), logits(**loaded))) << family;
    ASSERT_TRUE(save_hf_model(**loaded, b.string()).ok());
    EXPECT_EQ(read_all(a / "model.safetensors"), read_all(b / "model.safetensors")) << family;
    EXPECT_EQ(read_all(a / "config.json"), read_all(b / "config.json")) << family;
  }
}

TEST_F(HfCheckpointTest, TiedCheckpointHasNoLmHead) {
  auto model = tiny_model("qwen3");
  ASSERT_TRUE(save_hf_model(*model, dir_.string()).ok());
  auto file = SafetensorsFile::open((dir_ / "model.safetensors").string());
  ASSERT_TRUE(file.ok());
  EXPECT_FALSE((*file)->contains("lm_head.weight"));
  EXPECT_TRUE((*file)->contains("model.embed_tokens.weight"));
}

TEST_F(HfCheckpointTest, ShardedSaveWritesAnIndexAndReloads) {
  auto model = tiny_model("qwen2");
  SaveOptions options;
  options.max_shard_bytes = 16 << 10;
  ASSERT_TRUE(save_hf_model(*model, dir_.string(), options).ok());
  EXPECT_TRUE(fs::exists(dir_ / "model.safetensors.index.json"));
  EXPECT_FALSE(fs::exists(dir_ / "model.safetensors"));
  int shards = 0;
  for (const auto& e : fs::directory_iterator(dir_)) {
    shards += e.path().extension() == ".safetensors";
  }
  EXPECT_GT(shards, 2);
  auto loaded = load_hf_model(dir_.string(), DecoderOptions{});
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_TRUE(at::equal(logits(*model), logits(**loaded)));
}

TEST_F(HfCheckpointTest, LoadsIntoBfloat16WithRoundToNearestEven) {
  auto model = tiny_model("llama");
  ASSERT_TRUE(save_hf_model(*model, dir_.string()).ok());
  auto loaded = load_hf_model(dir_.string(), DecoderOptions{at::kBFloat16, at::kCPU});
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  const at::Tensor& source = model->lm_head_weight();
  at::Tensor converted = (*loaded)->lm_head_weight();
  // Round to nearest even, computed by hand on the bit patterns.
  at::Tensor bits = source.contiguous().view(at::kInt);
  at::Tensor rounding = at::bitwise_and(at::__rshift__(bits, 16), 1) + 0x7FFF;
  at::Tensor expected = at::__rshift__(bits + rounding, 16).to(at::kShort);
  EXPECT_TRUE(at::equal(converted.contiguous().view(at::kShort), expected));
  EXPECT_EQ((*loaded)->config().torch_dtype, "float32");
}

TEST_F(HfCheckpointTest, MissingPiecesAreClearErrors) {
  EXPECT_THAT(std::string(load_hf_model((dir_ / "none").string(), {}).status().message()),
              HasSubstr("cannot read model config"));
  auto model = tiny_model("qwen2");
  ASSERT_TRUE(save_hf_model(*model, dir_.string()).ok());
  // Drop one tensor.
  std::vector<std::pair<std::string, at::Tensor>> kept;
  for (const auto& [n, p] : model->named_parameters()) {
    if (n != "model.layers.1.mlp.up_proj.weight") kept.emplace_back(n, p);
  }
  ASSERT_TRUE(write_safetensors((dir_ / "model.safetensors").string(), kept).ok());
  EXPECT_THAT(std::string(load_hf_model(dir_.string(), {}).status().message()),
              HasSubstr("checkpoint lacks tensors: model.layers.1.mlp.up_proj.weight"));
  // Wrong shape.
  kept.emplace_back("model.layers.1.mlp.up_proj.weight", at::zeros({3, 3}));
  ASSERT_TRUE(write_safetensors((dir_ / "model.safetensors").string(), kept).ok());
  EXPECT_THAT(std::string(load_hf_model(dir_.string(), {}).status().message()),
              HasSubstr("'model.layers.1.mlp.up_proj.weight' has shape [3, 3] but the config "
                        "needs [48, 32]"));
  // Truncated weights.
  std::string bytes = read_all(dir_ / "model.safetensors");
  std::ofstream(dir_ / "model.safetensors", std::ios::binary) << bytes.substr(0, bytes.size() / 2);
  EXPECT_THAT(std::string(load_hf_model(dir_.string(), {}).status().message()),
              HasSubstr("safetensors file"));
}

}  // namespace
}  // namespace flywheel::model
