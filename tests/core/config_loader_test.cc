#include "flywheel/core/config_loader.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace flywheel::core {
namespace {

namespace fs = std::filesystem;
using ::testing::AllOf;
using ::testing::HasSubstr;

// A fresh directory per test for config files.
class ConfigLoaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::path(::testing::TempDir()) /
           (std::string("flywheel_cfg_") + info->name() + "_" + std::to_string(getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string write(const std::string& name, const std::string& text) {
    fs::path path = dir_ / name;
    fs::create_directories(path.parent_path());
    std::ofstream(path) << text;
    return path.string();
  }

  std::string error_of(const std::string& path, std::vector<std::string> overrides = {}) {
    ConfigLoadOptions options;
    options.overrides = std::move(overrides);
    absl::StatusOr<LoadedConfig> loaded = load_config_file(path, options);
    EXPECT_FALSE(loaded.ok()) << "expected an error for " << path;
    if (loaded.ok()) return "";
    EXPECT_EQ(loaded.status().code(), absl::StatusCode::kInvalidArgument);
    return std::string(loaded.status().message());
  }

  fs::path dir_;
};

TEST_F(ConfigLoaderTest, DefaultConfigIsValid) { EXPECT_TRUE(Config().validate().ok()); }

TEST_F(ConfigLoaderTest, LoadsTheQuickstartConfig) {
  absl::StatusOr<LoadedConfig> loaded =
      load_config_file(FLYWHEEL_SOURCE_DIR "/configs/quickstart.yaml");
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->config.rollout.group_size, 8);
  EXPECT_EQ(loaded->config.tokenizer.type, TokenizerType::kChar);
  ASSERT_EQ(loaded->config.rewards.functions.size(), 1u);
  EXPECT_EQ(loaded->config.rewards.functions[0].name, "exact_match");
}

TEST_F(ConfigLoaderTest, AppliesValuesAndKeepsDefaultsForTheRest) {
  std::string path = write("a.yaml", "trainer:\n  lr: 2.5e-5\n  total_steps: 7\n");
  absl::StatusOr<LoadedConfig> loaded = load_config_file(path);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_DOUBLE_EQ(loaded->config.trainer.lr, 2.5e-5);
  EXPECT_EQ(loaded->config.trainer.total_steps, 7);
  EXPECT_EQ(loaded->config.trainer.groups_per_step, TrainerOptions().groups_per_step);
  EXPECT_TRUE(loaded->is_set("trainer.lr"));
  EXPECT_FALSE(loaded->is_set("trainer.groups_per_step"));
  EXPECT_EQ(loaded->origins.at("trainer.lr"), path + ":2:7");
}

TEST_F(ConfigLoaderTest, WeightDeltasAreAskedForOverTheNetworkUnlessSaid) {
  std::string path = write("d.yaml", "weight_sync:\n  delta: on\n  delta_level: 3\n");
  absl::StatusOr<LoadedConfig> loaded = load_config_file(path);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->config.weight_sync.delta, WeightDelta::kOn);
  EXPECT_EQ(loaded->config.weight_sync.delta_level, 3);
  EXPECT_TRUE(wants_weight_deltas(loaded->config.weight_sync, "127.0.0.1:5000"));
  EXPECT_THAT(error_of(write("e.yaml", "weight_sync:\n  delta: sometimes\n")),
              ::testing::HasSubstr("auto, on, off"));
  EXPECT_THAT(error_of(write("f.yaml", "weight_sync:\n  delta_level: 20\n")),
              ::testing::HasSubstr("delta_level"));
  WeightSyncOptions o;  // auto
  for (const char* local : {"127.0.0.1:5000", "localhost:80", "[::1]:9", "unix:/tmp/c.sock"}) {
    EXPECT_FALSE(wants_weight_deltas(o, local)) << local;
  }
  for (const char* remote : {"10.213.7.1:5000", "node-a:7000", "[fe80::1]:9"}) {
    EXPECT_TRUE(wants_weight_deltas(o, remote)) << remote;
  }
  o.delta = WeightDelta::kOff;
  EXPECT_FALSE(wants_weight_deltas(o, "10.213.7.1:5000"));
}

TEST_F(ConfigLoaderTest, AcceptsAutoDtypeAndAThreadSplit) {
  std::string path = write("a.yaml",
                           "model:\n  dtype: auto\ncluster:\n  threads_per_process: 2\n"
                           "  thread_split: blas\n");
  absl::StatusOr<LoadedConfig> loaded = load_config_file(path);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->config.model.dtype, Dtype::kAuto);
  EXPECT_EQ(loaded->config.cluster.thread_split, ThreadSplit::kBlas);
  EXPECT_EQ(Config().cluster.thread_split, ThreadSplit::kAuto);
}

TEST_F(ConfigLoaderTest, RejectsAnUnknownThreadSplit) {
  EXPECT_THAT(error_of(write("a.yaml", "cluster:\n  thread_split: both\n")),
              HasSubstr("thread_split"));
}

TEST_F(ConfigLoaderTest, EmptyFileGivesDefaults) {
  absl::StatusOr<LoadedConfig> loaded = load_config_file(write("empty.yaml", ""));
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->config.trainer.total_steps, TrainerOptions().total_steps);
}

TEST_F(ConfigLoaderTest, UnknownKeyNamesFileLineColumnAndSuggestsClosestKey) {
  std::string path = write("typo.yaml", "trainer:\n  total_steps: 3\n  lrr: 0.1\n");
  EXPECT_EQ(error_of(path), path + ":3:3: trainer.lrr: unknown key; did you mean 'trainer.lr'?");
}

TEST_F(ConfigLoaderTest, UnknownKeyInWrongSectionSuggestsItsRealPlace) {
  std::string path = write("misplaced.yaml", "lr: 0.1\n");
  EXPECT_EQ(error_of(path), path + ":1:1: lr: unknown key; did you mean 'trainer.lr'?");
}

TEST_F(ConfigLoaderTest, UnknownSectionSuggestsSection) {
  std::string path = write("section.yaml", "trainr:\n  lr: 0.1\n");
  EXPECT_THAT(error_of(path), HasSubstr("trainr: unknown key; did you mean 'trainer'?"));
}

TEST_F(ConfigLoaderTest, UnrelatedUnknownKeyHasNoSuggestion) {
  std::string path = write("far.yaml", "trainer:\n  completely_unrelated_thing: 1\n");
  EXPECT_EQ(error_of(path), path + ":2:3: trainer.completely_unrelated_thing: unknown key");
}

TEST_F(ConfigLoaderTest, WrongTypesAreErrors) {
  std::string path = write("types.yaml",
                           "trainer:\n  total_steps: ten\n  lr: [1]\n"
                           "data:\n  shuffle: maybe\n"
                           "logging:\n  sinks: console\n"
                           "buffer: 3\n");
  std::string error = error_of(path);
  EXPECT_THAT(error,
              HasSubstr(path + ":2:16: trainer.total_steps: expected an integer, got 'ten'"));
  EXPECT_THAT(error, HasSubstr(path + ":3:7: trainer.lr: expected a finite number, got a list"));
  EXPECT_THAT(error, HasSubstr("data.shuffle: expected true or false, got 'maybe'"));
  EXPECT_THAT(error, HasSubstr("logging.sinks: expected a list of strings, got 'console'"));
  EXPECT_THAT(error, HasSubstr(path + ":8:9: buffer: expected a map (a section), got '3'"));
}

TEST_F(ConfigLoaderTest, FloatForIntegerFieldIsAnError) {
  std::string path = write("float.yaml", "rollout:\n  group_size: 2.5\n");
  EXPECT_THAT(error_of(path), HasSubstr("rollout.group_size: expected an integer, got '2.5'"));
}

TEST_F(ConfigLoaderTest, NonFiniteNumbersAreErrors) {
  std::string path = write("nan.yaml", "trainer:\n  lr: .nan\n");
  EXPECT_THAT(error_of(path), HasSubstr("trainer.lr: expected a finite number"));
}

TEST_F(ConfigLoaderTest, OutOfRangeValuesAreErrors) {
  std::string path = write("range.yaml",
                           "trainer:\n  lr: 0\n"
                           "rollout:\n  top_p: 1.5\n  group_size: 0\n"
                           "buffer:\n  sampling: random\n");
  std::string error = error_of(path);
  EXPECT_THAT(error, HasSubstr(path + ":2:7: trainer.lr: must be > 0, got 0"));
  EXPECT_THAT(error, HasSubstr("rollout.top_p: must be <= 1, got 1.5"));
  EXPECT_THAT(error, HasSubstr("rollout.group_size: must be >= 1, got 0"));
  EXPECT_THAT(error, HasSubstr("buffer.sampling: must be one of: fifo, freshest; got 'random'"));
}

TEST_F(ConfigLoaderTest, IntegersBeyondInt64AreErrorsNotWrapped) {
  std::string ok = write("big.yaml", "trainer:\n  total_steps: 99999999999999\n");
  absl::StatusOr<LoadedConfig> loaded = load_config_file(ok);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->config.trainer.total_steps, 99999999999999);
  std::string huge = write("huge.yaml", "trainer:\n  total_steps: 99999999999999999999\n");
  EXPECT_THAT(error_of(huge), HasSubstr("trainer.total_steps: expected an integer"));
}

TEST_F(ConfigLoaderTest, CrossFieldRulesReportWhereTheValueWasSet) {
  std::string path = write("cross.yaml", "trainer:\n  total_steps: 5\n  warmup_steps: 9\n");
  EXPECT_EQ(error_of(path), path + ":3:17: trainer.warmup_steps: must be <= total_steps");
}

TEST_F(ConfigLoaderTest, DuplicateKeysAreErrors) {
  std::string path = write("dup.yaml", "trainer:\n  lr: 0.1\n  lr: 0.2\n");
  EXPECT_THAT(error_of(path), HasSubstr(path + ":3:3: trainer.lr: duplicate key"));
}

TEST_F(ConfigLoaderTest, YamlSyntaxErrorHasPosition) {
  std::string path = write("syntax.yaml", "trainer:\n  lr: [0.1\n");
  EXPECT_THAT(error_of(path), AllOf(HasSubstr(path + ":"), HasSubstr("YAML syntax error")));
}

TEST_F(ConfigLoaderTest, TopLevelListIsAnError) {
  std::string path = write("list.yaml", "- a\n- b\n");
  EXPECT_THAT(error_of(path), HasSubstr("expected a map of sections at the top level"));
}

TEST_F(ConfigLoaderTest, MissingFileIsAnError) {
  EXPECT_THAT(
      error_of((dir_ / "nope.yaml").string()),
      HasSubstr("cannot read config file '" + (dir_ / "nope.yaml").string() + "': no such file"));
}

TEST_F(ConfigLoaderTest, OverridesAreTypedAndAppliedLast) {
  std::string path = write("base.yaml", "trainer:\n  lr: 0.1\n");
  ConfigLoadOptions options;
  options.overrides = {"trainer.lr=0.5", "rollout.stop=[\"###\", \"\\n\"]", "data.shuffle=false"};
  absl::StatusOr<LoadedConfig> loaded = load_config_file(path, options);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_DOUBLE_EQ(loaded->config.trainer.lr, 0.5);
  EXPECT_EQ(loaded->config.rollout.stop, (std::vector<std::string>{"###", "\n"}));
  EXPECT_FALSE(loaded->config.data.shuffle);
  EXPECT_EQ(loaded->origins.at("trainer.lr"), "--set trainer.lr=0.5");
}

TEST_F(ConfigLoaderTest, BadOverridesAreErrors) {
  std::string path = write("ok.yaml", "");
  EXPECT_EQ(error_of(path, {"trainer.lrr=0.1"}),
            "--set trainer.lrr=0.1: trainer.lrr: unknown key; did you mean 'trainer.lr'?");
  EXPECT_EQ(error_of(path, {"trainer.lr=fast"}),
            "--set trainer.lr=fast: trainer.lr: expected a finite number, got 'fast'");
  EXPECT_EQ(error_of(path, {"trainer.lr"}),
            "--set trainer.lr: expected KEY=VALUE, e.g. --set trainer.lr=1e-5");
  EXPECT_THAT(error_of(path, {"trainer..lr=1"}), HasSubstr("empty component in key path"));
  EXPECT_THAT(error_of(path, {"trainer.lr=[1"}), HasSubstr("value is not valid YAML"));
  EXPECT_EQ(error_of(path, {"trainer.lr=-1"}),
            "--set trainer.lr=-1: trainer.lr: must be > 0, got -1");
}

TEST_F(ConfigLoaderTest, IncludeAppliesBaseFirstAndMergesSections) {
  write("recipes/base.yaml",
        "trainer:\n  lr: 0.1\n  total_steps: 50\n"
        "logging:\n  sinks: [console, jsonl]\n");
  std::string child = write("recipes/child.yaml",
                            "include: base.yaml\n"
                            "trainer:\n  lr: 0.2\n"
                            "logging:\n  sinks: [jsonl]\n");
  absl::StatusOr<LoadedConfig> loaded = load_config_file(child);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_DOUBLE_EQ(loaded->config.trainer.lr, 0.2);                              // child wins
  EXPECT_EQ(loaded->config.trainer.total_steps, 50);                             // merged from base
  EXPECT_EQ(loaded->config.logging.sinks, (std::vector<std::string>{"jsonl"}));  // replaced
  ASSERT_EQ(loaded->files.size(), 2u);
  EXPECT_EQ(loaded->files[0], (dir_ / "recipes/base.yaml").string());
  EXPECT_EQ(loaded->files[1], child);
}

TEST_F(ConfigLoaderTest, IncludeListAppliesInOrderAndNests) {
  write("a.yaml", "trainer:\n  lr: 0.1\n  total_steps: 3\n");
  write("b.yaml", "include: a.yaml\ntrainer:\n  lr: 0.2\n");
  write("c.yaml", "trainer:\n  total_steps: 9\n");
  std::string top = write("top.yaml", "include: [b.yaml, c.yaml]\n");
  absl::StatusOr<LoadedConfig> loaded = load_config_file(top);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_DOUBLE_EQ(loaded->config.trainer.lr, 0.2);
  EXPECT_EQ(loaded->config.trainer.total_steps, 9);
  EXPECT_EQ(loaded->files.size(), 4u);
}

TEST_F(ConfigLoaderTest, ErrorsInIncludedFilesNameThatFile) {
  std::string base = write("base.yaml", "trainer:\n  lrr: 1\n");
  std::string child = write("child.yaml", "include: base.yaml\n");
  EXPECT_EQ(error_of(child), base + ":2:3: trainer.lrr: unknown key; did you mean 'trainer.lr'?");
}

TEST_F(ConfigLoaderTest, IncludeCycleIsAnError) {
  write("x.yaml", "include: y.yaml\n");
  std::string y = write("y.yaml", "include: x.yaml\n");
  EXPECT_THAT(error_of(y), HasSubstr("include cycle"));
}

TEST_F(ConfigLoaderTest, MissingIncludeIsAnError) {
  std::string path = write("inc.yaml", "include: nothere.yaml\n");
  EXPECT_THAT(error_of(path), HasSubstr(path + ":1:10: include: cannot read config file"));
}

TEST_F(ConfigLoaderTest, ListOfSectionsIsParsedStrictly) {
  std::string path = write("rewards.yaml",
                           "rewards:\n  functions:\n"
                           "    - name: exact_match\n      weight: 0.5\n"
                           "      params: {case_sensitive: 'false'}\n"
                           "    - name: format\n      wieght: 1\n");
  EXPECT_EQ(error_of(path), path +
                                ":7:7: rewards.functions[1].wieght: unknown key; did you mean "
                                "'rewards.functions[1].weight'?");
}

TEST_F(ConfigLoaderTest, ListOfSectionsLoads) {
  std::string path = write("rewards.yaml",
                           "rewards:\n  functions:\n"
                           "    - name: exact_match\n      weight: 0.5\n"
                           "      params: {case_sensitive: 'false'}\n");
  absl::StatusOr<LoadedConfig> loaded = load_config_file(path);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ASSERT_EQ(loaded->config.rewards.functions.size(), 1u);
  EXPECT_DOUBLE_EQ(loaded->config.rewards.functions[0].weight, 0.5);
  EXPECT_EQ(loaded->config.rewards.functions[0].params.at("case_sensitive"), "false");
}

TEST_F(ConfigLoaderTest, MissingRewardNameIsReportedAtTheEntry) {
  std::string path = write("noname.yaml", "rewards:\n  functions:\n    - weight: 2\n");
  // Reported at the list, the closest enclosing key that was written.
  EXPECT_EQ(error_of(path), path + ":3:5: rewards.functions[0].name: must be set");
}

TEST_F(ConfigLoaderTest, ResolvedConfigRoundTrips) {
  std::string path = write("rt.yaml",
                           "trainer:\n  lr: 3.0e-6\n"
                           "rollout:\n  stop: ['true', '1.5', '', 'a: b']\n"
                           "rewards:\n  functions:\n    - name: x\n      params: {k: 'null'}\n");
  absl::StatusOr<LoadedConfig> first = load_config_file(path);
  ASSERT_TRUE(first.ok()) << first.status();
  std::string printed = format_config_yaml(first->config);
  std::string again_path = write("again.yaml", printed);
  absl::StatusOr<LoadedConfig> second = load_config_file(again_path);
  ASSERT_TRUE(second.ok()) << second.status() << "\n" << printed;
  EXPECT_EQ(format_config_yaml(second->config), printed);
  EXPECT_EQ(second->config.rollout.stop, first->config.rollout.stop);
  EXPECT_DOUBLE_EQ(second->config.trainer.lr, 3.0e-6);
}

TEST_F(ConfigLoaderTest, PluginPathsAreRelativeToTheirConfigFile) {
  std::string path = write("sub/p.yaml", "plugins: [./libx.so, liby.so, /abs/libz.so]\n");
  absl::StatusOr<LoadedConfig> loaded = load_config_file(path);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->config.plugins,
            (std::vector<std::string>{(dir_ / "sub/libx.so").string(), "liby.so", "/abs/libz.so"}));
}

TEST_F(ConfigLoaderTest, EveryErrorIsReportedAtOnce) {
  std::string path = write("many.yaml", "trainer:\n  lrr: 1\n  total_steps: x\nmodle: {}\n");
  std::string error = error_of(path);
  EXPECT_THAT(error, HasSubstr("trainer.lrr"));
  EXPECT_THAT(error, HasSubstr("trainer.total_steps"));
  EXPECT_THAT(error, HasSubstr("modle: unknown key; did you mean 'model'?"));
}

TEST(ConfigFuzzTest, MutatedConfigsNeverCrashAndErrorsAlwaysNameTheSource) {
  // Byte-level mutations of a valid config: every outcome must be a Config or an
  // InvalidArgument naming the source, never a crash or another error code.
  const std::string seed =
      "include: []\ntrainer:\n  lr: 1e-5\n  total_steps: 10\nrollout:\n  stop: ['a', 'b']\n"
      "rewards:\n  functions:\n    - {name: x, weight: 2, params: {k: v}}\n"
      "logging: {sinks: [console]}\nplugins: []\n";
  const std::string alphabet = " :-[]{}'\"\n\t#&*!|>%@`,?0123456789abcxyz.\\";
  std::mt19937 rng(/*seed=*/12345);
  int accepted = 0;
  for (int iteration = 0; iteration < 3000; ++iteration) {
    std::string text = seed;
    int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits; ++e) {
      size_t at = rng() % (text.size() + 1);
      char c = alphabet[rng() % alphabet.size()];
      switch (rng() % 3) {
        case 0:
          text.insert(text.begin() + at, c);
          break;
        case 1:
          if (at < text.size()) text.erase(at, 1);
          break;
        default:
          if (at < text.size()) text[at] = c;
      }
    }
    absl::StatusOr<LoadedConfig> loaded = load_config_text(text, "fuzz.yaml", "/nonexistent");
    if (loaded.ok()) {
      ++accepted;
      EXPECT_TRUE(loaded->config.validate().ok()) << text;
    } else {
      ASSERT_EQ(loaded.status().code(), absl::StatusCode::kInvalidArgument) << text;
      ASSERT_THAT(std::string(loaded.status().message()), HasSubstr("fuzz.yaml")) << text;
    }
  }
  EXPECT_GT(accepted, 0);  // some mutations (comments, whitespace) stay valid
}

TEST(ConfigValidateTest, ProgrammaticConfigIsCheckedToo) {
  Config config;
  config.trainer.lr = -1;
  // A choice enum cannot hold an unknown spelling; one outside the values a field allows can.
  config.trainer.param_dtype = Dtype::kAuto;
  absl::Status status = config.validate();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()),
              AllOf(HasSubstr("trainer.lr: must be > 0, got -1"),
                    HasSubstr("trainer.param_dtype: must be one of: float32, bfloat16, float16; "
                              "got 'auto'")));
}

// Issue 28: episodes run, their held-out evaluation does not yet: a run that asks for both is
// refused instead of evaluating single-turn answers.
// Issue 26, items 8 and 11: combinations that abort a learner job or crash-loop workers are
// refused before anything starts.
TEST(ConfigValidateTest, CombinationsThatWouldFailMidRunAreRefused) {
  Config config;
  config.model.max_seq_len = 4096;
  config.trainer.micro_batch_tokens = 2048;
  EXPECT_THAT(std::string(config.validate().message()),
              HasSubstr("trainer.micro_batch_tokens: 2048 tokens cannot hold one sequence of "
                        "model.max_seq_len (4096) tokens"));
  config.trainer.micro_batch_tokens = 4096;
  EXPECT_TRUE(config.validate().ok());
  config.buffer.push_timeout_s = 30;
  config.buffer.server.rpc_deadline_s = 30;
  EXPECT_THAT(std::string(config.validate().message()),
              HasSubstr("buffer.push_timeout_s: 30 s must be less than server.rpc_deadline_s"));
  config.buffer.push_timeout_s = 29;
  EXPECT_TRUE(config.validate().ok());
  // The group filter on one reward function's score needs that function (issue 32).
  config.rewards.functions = {{"exact_match"}, {"process_reward_model", "prm"}};
  config.buffer.filter_metric = "exact_mach";
  EXPECT_THAT(std::string(config.validate().message()),
              HasSubstr("buffer.filter_metric: 'exact_mach' names no reward function of "
                        "rewards.functions (labels: exact_match, prm)"));
  for (const char* metric : {"exact_match", "prm"}) {
    config.buffer.filter_metric = metric;
    EXPECT_TRUE(config.validate().ok()) << metric;
  }
  // Not the name where a label is set, nor a component (absent when the function fails).
  for (const char* metric : {"process_reward_model", "prm/placed"}) {
    config.buffer.filter_metric = metric;
    EXPECT_FALSE(config.validate().ok()) << metric;
  }
}

TEST(ConfigValidateTest, NestedSectionRulesCarryTheirPath) {
  Config config;
  config.buffer.server.tls_cert = "cert.pem";
  EXPECT_THAT(std::string(config.validate().message()),
              HasSubstr("buffer.server.tls_key: tls_cert and tls_key must be set together"));
}

TEST(ConfigKeyPathsTest, ListsSectionsLeavesAndListEntries) {
  std::vector<std::string> paths = all_config_key_paths();
  auto has = [&](const std::string& p) {
    return std::find(paths.begin(), paths.end(), p) != paths.end();
  };
  EXPECT_TRUE(has("trainer"));
  EXPECT_TRUE(has("trainer.lr"));
  EXPECT_TRUE(has("buffer.server.bind_address"));
  EXPECT_TRUE(has("rewards.functions[].name"));
  EXPECT_TRUE(has("plugins"));
  for (const char* section :
       {"model", "tokenizer", "data", "rollout", "algorithm", "rewards", "environment", "trainer",
        "buffer", "cluster", "weight_sync", "checkpoint", "logging"}) {
    EXPECT_TRUE(has(section)) << section;
  }
}

}  // namespace
}  // namespace flywheel::core
