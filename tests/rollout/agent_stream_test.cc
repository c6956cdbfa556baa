// The agent endpoint's pieces without HTTP: chat rendering with tools, reading replies back
// into tool calls, request parsing, and the episode stream's rewrite and budget rules.
#include <memory>
#include <string>
#include <vector>

#include "chat_format.h"
#include "episode_stream.h"
#include "flywheel/model/tokenizer/tokenizer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "openai_request.h"

namespace flywheel::rollout::agent {
namespace {

using ::testing::HasSubstr;

std::vector<ToolSpec> calc_tool() {
  absl::StatusOr<core::Json> body = core::Json::parse(
      R"({"tools": [{"type": "function", "function": {"name": "calc", "parameters":
          {"type": "object", "properties": {"expression": {"type": "string"}}}}}],
          "messages": [{"role": "user", "content": "x"}]})");
  absl::StatusOr<CompletionRequest> request = parse_chat_request(*body);
  EXPECT_TRUE(request.ok()) << request.status();
  return request->tools;
}

TEST(AgentChatFormatTest, HermesToolsCallsAndResultsInChatml) {
  ChatFormat format(*model::ChatTemplate::by_name("chatml"), core::ToolFormat::kAuto);
  EXPECT_EQ(format.tool_format(), core::ToolFormat::kHermes);
  const std::vector<ToolSpec> tools = calc_tool();
  std::vector<AgentMessage> messages = {{"user", "2*3?", {}, "", ""}};
  const std::string first = *format.render(messages, tools);
  EXPECT_THAT(first, ::testing::StartsWith("<|im_start|>system\n# Tools\n\nYou may call"));
  EXPECT_THAT(first, HasSubstr("<tools>\n{\"type\": \"function\", \"function\": {\"name\": "
                               "\"calc\""));
  EXPECT_THAT(first, ::testing::EndsWith("<|im_start|>user\n2*3?<|im_end|>\n"
                                         "<|im_start|>assistant\n"));
  const ParsedReply reply = format.parse_reply(
      "Let me compute.\n<tool_call>\n{\"name\": \"calc\", \"arguments\": {\"expression\": "
      "\"2*3\"}}\n</tool_call>",
      tools);
  EXPECT_EQ(reply.content, "Let me compute.");
  ASSERT_EQ(reply.tool_calls.size(), 1u);
  EXPECT_EQ(reply.tool_calls[0].arguments, "{\"expression\":\"2*3\"}");
  // Two results after the assistant turn: one user turn, then the generation prompt.
  const std::string next = *format.render_after_assistant(
      {{"tool", "6", {}, "call_0", ""}, {"tool", "7", {}, "call_1", ""}}, 2);
  EXPECT_EQ(next,
            "\n<|im_start|>user\n<tool_response>\n6\n</tool_response>\n<tool_response>\n7\n"
            "</tool_response><|im_end|>\n<|im_start|>assistant\n");
  // A call that does not parse stays content.
  EXPECT_TRUE(format.parse_reply("<tool_call>\n{oops}\n</tool_call>", tools).tool_calls.empty());
  EXPECT_THAT(format.render({{"robot", "x", {}, "", ""}}, {}).status().message(),
              HasSubstr("messages[0].role"));
}

TEST(AgentChatFormatTest, TagsWithoutATemplate) {
  ChatFormat format(std::nullopt, core::ToolFormat::kAuto);
  EXPECT_EQ(format.tool_format(), core::ToolFormat::kTags);
  const std::vector<ToolSpec> tools = calc_tool();
  EXPECT_EQ(format.stop_strings(tools), std::vector<std::string>{"</calc>"});
  const ParsedReply reply = format.parse_reply("<calc>2*3</calc>", tools);
  ASSERT_EQ(reply.tool_calls.size(), 1u);
  EXPECT_EQ(reply.tool_calls[0].name, "calc");
  EXPECT_EQ(reply.tool_calls[0].arguments, "{\"expression\":\"2*3\"}");
  EXPECT_EQ(*format.render({{"user", "2*3=", {}, "", ""}}, tools), "2*3=");
  EXPECT_EQ(*format.render_after_assistant({{"tool", "6", {}, "call_0", ""}}, 2),
            "<result>6</result>");
}

class EpisodeStreamTest : public ::testing::Test {
 protected:
  EpisodeStreamTest()
      : tokenizer_(*model::load_tokenizer("/nonexistent-dir", core::TokenizerType::kChar)),
        format_(std::nullopt, core::ToolFormat::kTags) {
    options_.tokenizer = tokenizer_.get();
    options_.format = &format_;
    options_.stop_token_ids = {2};
    options_.max_new_tokens = 40;
  }
  CompletionRequest chat(std::vector<AgentMessage> messages) {
    CompletionRequest r;
    r.messages = std::move(messages);
    return r;
  }
  Reply reply(const std::string& text) {
    Reply r;
    r.sample.token_ids = *tokenizer_->encode(text, {false});
    r.sample.logprobs.assign(r.sample.token_ids.size(), -0.5f);
    r.sample.versions.assign(r.sample.token_ids.size(), 3);
    r.sample.finish_reason = FinishReason::kStop;
    r.message = {"assistant", text, {}, "", ""};
    return r;
  }
  std::unique_ptr<model::Tokenizer> tokenizer_;
  ChatFormat format_;
  EpisodeStreamOptions options_;
};

TEST_F(EpisodeStreamTest, ARetryDiscardsTheReplyAndARewriteStartsASegment) {
  options_.max_segments = 2;
  EpisodeStream stream(options_);
  const AgentMessage user{"user", "hi", {}, "", ""};
  ASSERT_TRUE(stream.plan(chat({user}), 0).ok());
  stream.record({reply("yo")}, 0);
  // The same request again: the reply is discarded, the stream restarts from the prompt.
  ASSERT_TRUE(stream.plan(chat({user}), 1).ok());
  stream.record({reply("ok")}, 1);
  const AgentMessage ok{"assistant", "ok", {}, "", ""};
  absl::StatusOr<TurnPlan> second = stream.plan(chat({user, ok, {"user", "more", {}, "", ""}}), 2);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_FALSE(second->new_segment);
  EXPECT_EQ(*tokenizer_->decode(second->prompt_ids), "hiokmore");
  stream.record({reply("x")}, 2);
  // An edited first message: a new segment, then the second rewrite is one too many.
  absl::StatusOr<TurnPlan> third = stream.plan(chat({{"user", "HI", {}, "", ""}}), 3);
  ASSERT_TRUE(third.ok()) << third.status();
  EXPECT_TRUE(third->new_segment);
  stream.record({reply("z")}, 3);
  const AgentMessage z{"assistant", "z", {}, "", ""};
  ASSERT_TRUE(
      stream.plan(chat({{"user", "HI", {}, "", ""}, z, {"user", "again", {}, "", ""}}), 4).ok());
  stream.record({reply("w")}, 4);
  EXPECT_THAT(stream.plan(chat({{"user", "other", {}, "", ""}}), 5).status().message(),
              HasSubstr("max_segments is 2"));
  EXPECT_EQ(stream.stats().rewrites, 1);
  EXPECT_EQ(stream.stats().discarded_replies, 2);  // "yo" (a retry) and "x" (left behind)
  const std::vector<Segment> segments = stream.finish();
  ASSERT_EQ(segments.size(), 2u);
  // The branch the agent left ("more", then "x") is not trained on.
  EXPECT_EQ(*tokenizer_->decode(segments[0].sample.token_ids), "ok");
  EXPECT_EQ(*tokenizer_->decode(segments[1].prompt_ids), "HI");
  EXPECT_EQ(*tokenizer_->decode(segments[1].sample.token_ids), "zagainw");
  EXPECT_EQ(segments[1].sample.from_model, (std::vector<uint8_t>{1, 0, 0, 0, 0, 0, 1}));
  EXPECT_EQ(segments[1].sample.versions[1], -1);
  EXPECT_EQ(segments[1].sample.logprobs[6], -0.5f);
  EXPECT_EQ(segments[1].turn_ends, (std::vector<int64_t>{1, 7}));
}

TEST_F(EpisodeStreamTest, DropRefusesARewriteAndTheBudgetBoundsTheStream) {
  options_.drop_on_rewrite = true;
  options_.max_new_tokens = 6;
  EpisodeStream stream(options_);
  const AgentMessage user{"user", "hi", {}, "", ""};
  absl::StatusOr<TurnPlan> first = stream.plan(chat({user}), 0);
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(first->max_new_tokens, 6);
  stream.record({reply("abc")}, 0);
  const AgentMessage abc{"assistant", "abc", {}, "", ""};
  const AgentMessage m{"user", "m", {}, "", ""};
  absl::StatusOr<TurnPlan> second = stream.plan(chat({user, abc, m}), 1);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(second->max_new_tokens, 2);  // 6 - 3 replied - 1 new
  stream.record({reply("de")}, 1);
  const AgentMessage de{"assistant", "de", {}, "", ""};
  EXPECT_EQ(stream.plan(chat({user, abc, m, de, {"user", "more", {}, "", ""}}), 2).status().code(),
            absl::StatusCode::kOutOfRange);
  EXPECT_THAT(stream.plan(chat({{"user", "HI", {}, "", ""}}), 2).status().message(),
              HasSubstr("on_rewrite is drop"));
}

TEST(AgentRequestTest, FieldsAreReadAndBadOnesNamed) {
  absl::StatusOr<CompletionRequest> r = parse_chat_request(*core::Json::parse(
      R"({"model": "m", "messages": [{"role": "developer", "content": [{"type": "text",
      "text": "be brief"}]}, {"role": "user", "content": "x"}], "temperature": 0.5,
      "top_p": 0.9, "max_completion_tokens": 7, "stop": "END", "n": 2, "seed": 4,
      "logprobs": true, "top_logprobs": 3, "stream": true, "stream_options":
      {"include_usage": true}, "frequency_penalty": 0, "something_new": [1]})"));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->messages[0].role, "system");
  EXPECT_EQ(r->messages[0].content, "be brief");
  EXPECT_EQ(*r->temperature, 0.5);
  EXPECT_EQ(*r->max_tokens, 7);
  EXPECT_EQ(r->stop, std::vector<std::string>{"END"});
  EXPECT_EQ(r->n, 2);
  EXPECT_EQ(*r->seed, 4u);
  EXPECT_TRUE(r->logprobs && r->stream && r->include_usage);
  EXPECT_EQ(r->top_logprobs, 3);
  absl::StatusOr<CompletionRequest> ids =
      parse_completion_request(*core::Json::parse(R"({"prompt": [5, 6, 7], "logprobs": 2})"));
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_TRUE(ids->prompt_is_ids);
  EXPECT_EQ(ids->top_logprobs, 2);
  EXPECT_EQ(*ids->max_tokens, 16);  // OpenAI's default
  EXPECT_THAT(parse_chat_request(*core::Json::parse(
                                     R"({"messages": [{"role": "user", "content": [{"type":
                                     "image_url"}]}]})"))
                  .status()
                  .message(),
              HasSubstr("messages[0].content[0].type"));
}

}  // namespace
}  // namespace flywheel::rollout::agent
