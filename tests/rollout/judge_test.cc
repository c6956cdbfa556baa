// llm_judge (flywheel_rollout_judge): the prompt template, verdict parsing, and the judge on a
// scripted model whose greedy continuation is fixed by the last token of its prompt.
#include "flywheel/rollout/judge/llm_judge.h"

#include <ATen/ATen.h>

#include <cmath>
#include <filesystem>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "../model/test_models.h"
#include "../testing/scratch_dir.h"
#include "flywheel/model/hf_checkpoint.h"
#include "flywheel/model/tokenizer/tokenizer.h"
#include "flywheel/rewards/composite_reward.h"
#include "flywheel/rewards/scoring_pool.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace flywheel::rollout {
namespace {

using ::testing::HasSubstr;

rewards::RewardInput input_of(const core::Json& record, const std::string& completion,
                              const std::string& prompt = "") {
  rewards::RewardInput in;
  in.record = &record;
  in.record_name = "line 3";
  in.prompt = prompt;
  in.completion = completion;
  return in;
}

TEST(JudgeTemplateTest, RendersThePromptTheCompletionAndTheRecordsFields) {
  auto t = JudgeTemplate::parse("Q: {prompt} A: {completion} ref={answer} n={n} ok={ok} {{x}}");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_THAT(t->fields(), ::testing::ElementsAre("prompt", "completion", "answer", "n", "ok"));
  core::Json record = core::Json::object();
  record.set("prompt", core::Json("1+2="));
  record.set("answer", core::Json("3"));
  record.set("n", core::Json(4));
  record.set("ok", core::Json(true));
  auto text = t->render(input_of(record, "3", "<chat>1+2=</chat>"));
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text, "Q: 1+2= A: 3 ref=3 n=4 ok=true {x}");
  // Without a "prompt" string in the record, the prompt the policy saw.
  core::Json bare = core::Json::object();
  auto prompt_only = JudgeTemplate::parse("[{prompt}|{completion}]");
  ASSERT_TRUE(prompt_only.ok());
  EXPECT_EQ(*prompt_only->render(input_of(bare, "c", "seen")), "[seen|c]");
}

TEST(JudgeTemplateTest, NamesWhatIsWrong) {
  EXPECT_THAT(std::string(JudgeTemplate::parse("a {prompt").status().message()),
              HasSubstr("'{' at offset 2 is not closed"));
  EXPECT_THAT(std::string(JudgeTemplate::parse("a } b").status().message()),
              HasSubstr("'}' at offset 2 closes no field"));
  EXPECT_THAT(std::string(JudgeTemplate::parse("{}").status().message()), HasSubstr("'{}'"));
  EXPECT_THAT(std::string(JudgeTemplate::parse("{a b}").status().message()), HasSubstr("'{a b}'"));
  auto t = JudgeTemplate::parse("{answer}");
  ASSERT_TRUE(t.ok());
  core::Json record = core::Json::object();
  EXPECT_THAT(std::string(t->render(input_of(record, "x")).status().message()),
              HasSubstr("line 3: reward 'llm_judge': the template's field {answer} is not a key"));
  record.set("answer", core::Json::array({}));
  EXPECT_THAT(std::string(t->render(input_of(record, "x")).status().message()),
              HasSubstr("is an object, a list or null"));
}

TEST(VerdictTest, LabelsParseAndTheLastStandingLabelIsTheVerdict) {
  auto labels = parse_judge_labels("yes=1, no=0, partly = 0.5");
  ASSERT_TRUE(labels.ok()) << labels.status();
  ASSERT_EQ(labels->size(), 3u);
  EXPECT_EQ((*labels)[2].first, "partly");
  EXPECT_EQ((*labels)[2].second, 0.5);
  EXPECT_EQ(*label_verdict("975 yes", *labels), 1);
  EXPECT_EQ(*label_verdict("Yes, at first; on reflection NO.", *labels), 0);  // the last one
  EXPECT_EQ(*label_verdict("partly", *labels), 0.5);
  // Inside a word is no label.
  EXPECT_THAT(std::string(label_verdict("yesterday noon", *labels).status().message()),
              HasSubstr("holds none of the labels yes, no, partly"));
  EXPECT_FALSE(label_verdict("", *labels).ok());
  for (const char* bad : {"yes=1", "yes=1, no", "yes=1, =0", "yes=1, no=x", "yes=1, YES=0",
                          "a b=1, no=0", "yes=1, no=inf"}) {
    EXPECT_FALSE(parse_judge_labels(bad).ok()) << bad;
  }
}

TEST(VerdictTest, TheLastNumberInRangeIsTheScore) {
  EXPECT_EQ(*score_verdict("7", 0, 10), 7);
  EXPECT_EQ(*score_verdict("Reasoning 1, 2, 3. Score: 8.5", 0, 10), 8.5);
  EXPECT_EQ(*score_verdict("Rating: 8/10.", 0, 10), 8);
  EXPECT_EQ(*score_verdict("-2", -5, 5), -2);
  EXPECT_EQ(*score_verdict("+3 points", -5, 5), 3);
  EXPECT_THAT(std::string(score_verdict("score 11", 0, 10).status().message()),
              HasSubstr("outside [0, 10]"));
  EXPECT_THAT(std::string(score_verdict("no idea", 0, 10).status().message()),
              HasSubstr("holds no number"));
}

TEST(VerdictTest, YesProbabilityIsTheTwoTokensShare) {
  EXPECT_NEAR(yes_probability(std::log(0.3), std::log(0.1)), 0.75, 1e-12);
  EXPECT_NEAR(yes_probability(-1000, 0), 0, 1e-12);
  EXPECT_NEAR(yes_probability(0, -1000), 1, 1e-12);
  const double inf = std::numeric_limits<double>::infinity();
  EXPECT_EQ(yes_probability(-inf, -inf), 0.5);
  EXPECT_EQ(yes_probability(-inf, -1), 0);
}

// A judge whose greedy continuation is fixed by the current token: every layer's output
// projections are zero, so the final hidden state is the normalised embedding of the current
// token, and lm_head maps it to the next token of a script:
//   '?' -> "yes"<eos>   '!' -> "no"<eos>   '#' -> "7"<eos>   '%' -> "12"<eos>   '.' -> "xxx..."
std::string write_scripted_judge(const std::string& dir) {
  model::ModelConfig config = model::testing::tiny_config("llama");
  config.vocab_size = 100;  // the default character tokenizer
  config.tie_word_embeddings = false;
  auto created = model::DecoderModel::create(config, {});
  EXPECT_TRUE(created.ok()) << created.status();
  model::DecoderModel& m = **created;
  m.init_random(3);
  std::filesystem::create_directories(dir);
  EXPECT_TRUE(model::save_default_char_tokenizer(dir).ok());
  auto tokenizer = std::move(*model::load_tokenizer(dir));
  auto id = [&](char c) { return tokenizer->encode(std::string(1, c), {false})->front(); };
  const int64_t eos = 2;
  const std::vector<std::pair<char, int64_t>> next = {
      {'?', id('y')}, {'y', id('e')}, {'e', id('s')}, {'s', eos},    {'!', id('n')},
      {'n', id('o')}, {'o', eos},     {'#', id('7')}, {'7', eos},    {'%', id('1')},
      {'1', id('2')}, {'2', eos},     {'.', id('x')}, {'x', id('x')}};
  at::NoGradGuard no_grad;
  at::Generator gen = at::detail::createCPUGenerator(11);
  at::Tensor embed;
  for (auto& [name, p] : m.named_parameters()) {
    auto& t = const_cast<at::Tensor&>(p);
    if (name.find("o_proj") != std::string::npos || name.find("down_proj") != std::string::npos) {
      t.zero_();
    } else if (name == "model.embed_tokens.weight") {
      t.normal_(0.0, 1.0, gen);
      embed = t;
    }
  }
  for (auto& [name, p] : m.named_parameters()) {
    if (name != "lm_head.weight") continue;
    auto& t = const_cast<at::Tensor&>(p);
    t.zero_();
    for (const auto& [from, to] : next) t[to].add_(embed[id(from)] * 10.0);
  }
  EXPECT_TRUE(model::save_hf_model(m, dir).ok());
  return dir;
}

class LlmJudgeTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = write_scripted_judge(scratch_.sub("judge")); }
  rewards::RewardSpec spec(std::map<std::string, std::string> params) const {
    rewards::RewardSpec s;
    s.name = "llm_judge";
    params["path"] = dir_;
    params.emplace("template", "{prompt}{completion}");
    s.params = std::move(params);
    return s;
  }
  std::unique_ptr<LlmJudge> judge(std::map<std::string, std::string> params) const {
    auto options = parse_llm_judge_options(spec(std::move(params)));
    EXPECT_TRUE(options.ok()) << options.status();
    auto made = LlmJudge::create(*options);
    EXPECT_TRUE(made.ok()) << made.status();
    return made.ok() ? std::move(*made) : nullptr;
  }

  flywheel::testing::ScratchDir scratch_{"flywheel_judge"};
  std::string dir_;
  core::Json record_ = core::Json::object();
};

TEST_F(LlmJudgeTest, YesProbabilityIsReadFromOneForwardAndIsTheSameInAnyBatch) {
  auto j = judge({{"verdict", "yes_prob"}});
  ASSERT_NE(j, nullptr);
  const std::vector<std::string> completions = {"12+3=15?", "1!", "abcdefgh?", "zz!", "q"};
  std::vector<rewards::RewardInput> inputs;
  for (const std::string& c : completions) inputs.push_back(input_of(record_, c));
  auto batched = j->score_batch(inputs);
  ASSERT_EQ(batched.size(), completions.size());
  // The same from the model by hand, one prompt at a time.
  auto model = model::load_hf_model(dir_, {});
  ASSERT_TRUE(model.ok()) << model.status();
  auto tokenizer = std::move(*model::load_tokenizer(dir_));
  const int64_t yes = tokenizer->encode("y", {false})->front();
  const int64_t no = tokenizer->encode("n", {false})->front();
  for (size_t i = 0; i < completions.size(); ++i) {
    ASSERT_TRUE(batched[i].ok()) << batched[i].status();
    auto alone = j->score(inputs[i]);
    ASSERT_TRUE(alone.ok());
    EXPECT_NEAR(alone->score, batched[i]->score, 1e-6) << completions[i];
    std::vector<int64_t> ids = *tokenizer->encode(completions[i], {false});
    model::ForwardBatch b;
    b.tokens = at::tensor(ids, at::kLong).unsqueeze(0);
    b.positions = at::arange(static_cast<int64_t>(ids.size())).unsqueeze(0);
    at::NoGradGuard no_grad;
    at::Tensor lp = at::log_softmax((*model)->logits((*model)->forward(b)[0][-1]), -1);
    const double want = yes_probability(lp[yes].item<double>(), lp[no].item<double>());
    EXPECT_NEAR(batched[i]->score, want, 1e-6) << completions[i];
    EXPECT_EQ(batched[i]->components.at("verdict"), batched[i]->score);
    EXPECT_GE(batched[i]->components.at("latency_s"), 0);
  }
  EXPECT_GT(batched[0]->score, 0.99);  // ends in '?': the judge says yes
  EXPECT_LT(batched[1]->score, 0.01);  // ends in '!': no
}

TEST_F(LlmJudgeTest, LabelsAndScoresAreReadFromTheGreedyOutput) {
  auto labels = judge({{"verdict", "label"}, {"labels", "yes=1, no=0"}});
  ASSERT_NE(labels, nullptr);
  auto out = labels->score_batch(
      {input_of(record_, "a?"), input_of(record_, "b!"), input_of(record_, "c.")});
  ASSERT_TRUE(out[0].ok()) << out[0].status();
  EXPECT_EQ(out[0]->score, 1);
  ASSERT_TRUE(out[1].ok()) << out[1].status();
  EXPECT_EQ(out[1]->score, 0);
  EXPECT_THAT(std::string(out[2].status().message()),
              HasSubstr("line 3: reward 'llm_judge': the judge's output 'xxxxxxxxxxxxxxxx' "
                        "holds none of the labels yes, no"));
  auto scores = judge({{"verdict", "score"}, {"score_min", "0"}, {"score_max", "10"}});
  ASSERT_NE(scores, nullptr);
  out = scores->score_batch({input_of(record_, "a#"), input_of(record_, "b%")});
  ASSERT_TRUE(out[0].ok()) << out[0].status();
  EXPECT_NEAR(out[0]->score, 0.7, 1e-12);
  EXPECT_EQ(out[0]->components.at("verdict"), 7);
  EXPECT_THAT(std::string(out[1].status().message()), HasSubstr("12 (output '12') is outside"));
}

TEST_F(LlmJudgeTest, GarbageAndTimeoutsScoreTheFallbackCountedAndScoringGoesOn) {
  auto made = make_llm_judge(spec({{"verdict", "label"}}));
  ASSERT_TRUE(made.ok()) << made.status();
  std::shared_ptr<const rewards::RewardFunction> j = std::move(*made);
  auto reward = std::make_shared<const rewards::CompositeReward>(
      std::vector<rewards::WeightedReward>{{"llm_judge", 1.0, j}}, -1.0);
  auto owned = [](std::vector<std::string> completions) {
    std::vector<rewards::OwnedSample> out;
    for (std::string& c : completions) {
      rewards::OwnedSample s;
      s.record = std::make_shared<core::Json>(core::Json::object());
      s.record_name = "s";
      s.completion = std::move(c);
      out.push_back(std::move(s));
    }
    return out;
  };
  {
    // A judging call past its deadline: the fallback, counted as a timeout.
    auto pool = std::move(*rewards::ScoringPool::create(reward, {1, 64, 1e-6, nullptr}));
    std::vector<rewards::ScoredSample> late = pool->score(owned({"a?", "b!"}));
    EXPECT_EQ(late[0].reward, -1.0);
    EXPECT_EQ(pool->counters().timeouts, 1);
  }
  auto pool = std::move(*rewards::ScoringPool::create(reward, {1, 64, 30, nullptr}));
  std::vector<rewards::ScoredSample> out = pool->score(owned({"a?", "b.", "c!"}));
  EXPECT_EQ(out[0].reward, 1.0);
  EXPECT_EQ(out[1].reward, -1.0);  // garbage: the fallback
  EXPECT_THAT(out[1].errors.at(0), HasSubstr("holds none of the labels"));
  EXPECT_EQ(out[2].reward, 0.0);
  EXPECT_EQ(pool->counters().errors, 1);  // the garbage, counted
  EXPECT_EQ(pool->counters().timeouts, 0);
}

// A verifiable reward of the tests: 1 when the completion holds "ok".
class HoldsOk : public rewards::RewardFunction {
 public:
  absl::StatusOr<rewards::RewardOutput> score(const rewards::RewardInput& in) const override {
    rewards::RewardOutput o;
    o.score = in.completion.find("ok") != absl::string_view::npos ? 1 : 0;
    return o;
  }
};

TEST_F(LlmJudgeTest, AgreementWithTheRunsOtherRewardsIsReported) {
  auto made = make_llm_judge(spec({{"verdict", "label"}}));
  ASSERT_TRUE(made.ok());
  rewards::CompositeReward reward(
      {{"judge", 1.0, std::move(*made)}, {"truth", 0.0, std::make_shared<HoldsOk>()}}, 0.0);
  EXPECT_EQ(reward.score(input_of(record_, "ok?")).parts.at("judge/agreement/truth"), 1);
  EXPECT_EQ(reward.score(input_of(record_, "ok!")).parts.at("judge/agreement/truth"), 0);
  rewards::ScoredSample both_fail = reward.score(input_of(record_, "b!"));
  EXPECT_EQ(both_fail.parts.at("judge/agreement/truth"), 1);
  EXPECT_EQ(both_fail.parts.count("truth/agreement/judge"), 0u);  // only a judge is compared
  // A judge that failed on the sample is not compared.
  EXPECT_EQ(reward.score(input_of(record_, "ok.")).parts.count("judge/agreement/truth"), 0u);
}

TEST_F(LlmJudgeTest, BadOptionsAreNamed) {
  auto error = [&](std::map<std::string, std::string> params) {
    auto options = parse_llm_judge_options(spec(std::move(params)));
    if (!options.ok()) return std::string(options.status().message());
    auto made = LlmJudge::create(*options);
    return made.ok() ? std::string("ok") : std::string(made.status().message());
  };
  // A shared judge (address) is the CLI's RemoteReward, not an option of the judge itself.
  EXPECT_THAT(error({{"address", "judge:50051"}}), HasSubstr("address"));
  EXPECT_THAT(error({{"verdict", "vibes"}}), HasSubstr("verdict"));
  EXPECT_THAT(error({{"yes", "yes"}, {"no", "yup"}}), HasSubstr("the same token as yes"));
  EXPECT_THAT(error({{"template", "{prompt"}}), HasSubstr("option 'template'"));
  EXPECT_THAT(error({{"verdict", "label"}, {"labels", "yes=1"}}), HasSubstr("option 'labels'"));
  EXPECT_THAT(error({{"score_min", "3"}, {"score_max", "3"}}), HasSubstr("score_min < score_max"));
  EXPECT_THAT(error({{"max_length", "4000"}}), HasSubstr("max_position_embeddings 128"));
  EXPECT_THAT(error({{"colour", "red"}}), HasSubstr("colour"));
  rewards::RewardSpec missing = spec({});
  missing.params["path"] = dir_ + "/nowhere";
  EXPECT_THAT(std::string(make_llm_judge(missing).status().message()),
              HasSubstr("is not a directory"));
  // A prompt longer than max_length is that sample's error.
  auto j = judge({{"max_length", "4"}});
  ASSERT_NE(j, nullptr);
  EXPECT_THAT(std::string(j->score(input_of(record_, "abcdef?")).status().message()),
              HasSubstr("the judge's prompt is 7 tokens, more than its max_length 4"));
}

}  // namespace
}  // namespace flywheel::rollout
