// The reward service (issue 32's shared judge): RemoteReward scores through a RewardServer in
// this process as the function itself does (score, components, step rewards, the judge flag);
// a sample's error stays that sample's; a call past its deadline is every sample's error; a
// server that is down, a wrong token or an unknown function is an error at start.
#include <chrono>

#include "flywheel/rewards/composite_reward.h"
#include "flywheel/rewards/remote/remote_reward.h"
#include "flywheel/rewards/remote/reward_server.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "reward_test_util.h"
#include "test_rewards.h"

namespace flywheel::rewards {
namespace {

using ::testing::HasSubstr;

// A judge whose verdict is 1 for "yes" and that pays its score at step ends.
class StepJudge : public RewardFunction {
 public:
  absl::StatusOr<RewardOutput> score(const RewardInput& input) const override {
    if (input.record == nullptr || input.record->find("answer") == nullptr) {
      return missing_key_error(input, "step_judge", "answer");
    }
    RewardOutput out;
    out.score = input.completion == "yes" ? 1 : 0;
    out.components["ids"] = static_cast<double>(input.completion_ids.size());
    out.step_ends = {1};
    out.step_rewards = {out.score};
    return out;
  }
  bool judge() const override { return true; }
};

struct Served {
  std::unique_ptr<RewardServer> server;
  RemoteRewardOptions client;
};

Served serve(const std::string& token = "") {
  auto composite = std::make_shared<const CompositeReward>(
      std::vector<WeightedReward>{{"judge", 1.0, std::make_shared<StepJudge>()},
                                  {"slow", 1.0, std::make_shared<testing::ScriptedReward>(2.0)}},
      -1.0);
  auto server = RewardServer::start(composite, {"127.0.0.1:0", token});
  EXPECT_TRUE(server.ok()) << server.status();
  Served s;
  s.server = std::move(*server);
  s.client.address = absl::StrCat("127.0.0.1:", s.server->port());
  s.client.function = "judge";
  s.client.timeout_s = 0.5;
  return s;
}

TEST(RemoteRewardTest, ScoresThroughTheServerAsTheFunctionDoes) {
  Served s = serve("t0ken");
  s.client.token = "t0ken";
  auto remote = RemoteReward::create(s.client);
  ASSERT_TRUE(remote.ok()) << remote.status();
  EXPECT_TRUE((*remote)->judge());
  OwnedSample yes = testing::sample(R"({"answer": "4"})", "yes", {7, 8, 9});
  OwnedSample no = testing::sample(R"({"answer": "4"})", "no");
  OwnedSample bad = testing::sample("{}", "yes");
  auto out = (*remote)->score_batch({yes.view(), bad.view(), no.view()});
  ASSERT_EQ(out.size(), 3u);
  ASSERT_TRUE(out[0].ok()) << out[0].status();
  EXPECT_EQ(out[0]->score, 1);
  EXPECT_EQ(out[0]->components.at("ids"), 3);
  EXPECT_EQ(out[0]->step_ends, std::vector<int32_t>{1});
  EXPECT_EQ(out[0]->step_rewards, std::vector<double>{1});
  ASSERT_FALSE(out[1].ok());
  EXPECT_THAT(out[1].status().message(), HasSubstr("needs the key 'answer'"));
  ASSERT_TRUE(out[2].ok());
  EXPECT_EQ(out[2]->score, 0);
}

TEST(RemoteRewardTest, ACallPastItsDeadlineIsEverySamplesError) {
  Served s = serve();
  s.client.function = "slow";
  auto remote = RemoteReward::create(s.client);
  ASSERT_TRUE(remote.ok()) << remote.status();
  EXPECT_FALSE((*remote)->judge());
  OwnedSample hang = testing::sample("{}", "hang");
  OwnedSample quick = testing::sample("{}", "ab");
  const auto start = std::chrono::steady_clock::now();
  auto out = (*remote)->score_batch({quick.view(), hang.view()});
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 1.9);
  ASSERT_EQ(out.size(), 2u);
  for (const auto& o : out) {
    ASSERT_FALSE(o.ok());
    EXPECT_THAT(o.status().message(), HasSubstr("Score failed"));
  }
}

TEST(RemoteRewardTest, StartErrorsNameTheAddress) {
  Served s = serve("t0ken");
  RemoteRewardOptions o = s.client;
  auto refused = RemoteReward::create(o);  // no token
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(refused.status().message(), HasSubstr("refused the token"));
  o.token = "t0ken";
  o.function = "nope";
  auto unknown = RemoteReward::create(o);
  ASSERT_FALSE(unknown.ok());
  EXPECT_THAT(unknown.status().message(), HasSubstr("serves [judge, slow]; not 'nope'"));
  o.function = "";
  EXPECT_THAT(RemoteReward::create(o).status().message(),
              HasSubstr("name one with option 'function'"));
  const std::string address = o.address;
  s.server->shutdown();
  o.function = "judge";
  auto down = RemoteReward::create(o);
  ASSERT_FALSE(down.ok());
  EXPECT_TRUE(absl::IsUnavailable(down.status()));
  EXPECT_THAT(down.status().message(),
              HasSubstr(absl::StrCat("reward 'llm_judge' at ", address, " is not reachable")));
}

TEST(RemoteRewardTest, OptionsAreRead) {
  EXPECT_THAT(parse_remote_reward_options(testing::spec("llm_judge")).status().message(),
              HasSubstr("option 'address'"));
  RewardSpec spec = testing::spec("llm_judge", {{"address", "h:1"}, {"timeout_s", "3"}});
  auto o = parse_remote_reward_options(spec);
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->timeout_s, 3);
  spec.params["path"] = "/judge";  // the judge's own options are the server's
  EXPECT_THAT(parse_remote_reward_options(spec).status().message(), HasSubstr("path"));
  spec = testing::spec("llm_judge", {{"address", "h:1"}, {"token_file", "/nonexistent/t"}});
  EXPECT_THAT(parse_remote_reward_options(spec).status().message(),
              HasSubstr("cannot read token file '/nonexistent/t'"));
}

}  // namespace
}  // namespace flywheel::rewards
