// One agent episode's token streams. Every request must extend what the episode already holds:
// its messages (or completion prompt) start with those the stream covers, followed by one of
// the replies it was given; then only the new messages are rendered and tokenized, on their
// own, and appended after the model's tokens, which are never re-tokenized. A request that does
// not extend the stream rewrote history: it starts a new segment (a stream of its own, from the
// whole conversation rendered afresh) or, with on_rewrite drop, is refused.
//
//   EpisodeStream stream(options);
//   absl::StatusOr<TurnPlan> plan = stream.plan(request, now);   // what the engine computes
//   ... generate plan->prompt_ids ...
//   stream.record(replies, now);                                 // the choices returned
//   std::vector<Segment> segments = stream.finish();             // at the episode's end
//
// A reply joins the stream when a later request carries it (or, for the last one, at finish());
// replies no request took up (n > 1, or a retry) are discarded and counted.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "agent_messages.h"
#include "chat_format.h"
#include "flywheel/model/tokenizer/tokenizer.h"
#include "flywheel/rollout/engine.h"
#include "flywheel/rollout/episode_runner.h"
#include "openai_request.h"

namespace flywheel::rollout::agent {

struct EpisodeStreamOptions {
  const model::Tokenizer* tokenizer = nullptr;  // not owned
  const ChatFormat* format = nullptr;           // not owned
  std::vector<int64_t> end_of_turn_ids;         // the template's end of turn, tokenized
  std::vector<int64_t> stop_token_ids;          // the model's eos ids (end the reply's text)
  int64_t max_new_tokens = 1024;  // a segment's tokens after its prompt (rollout.max_new_tokens)
  bool drop_on_rewrite = false;
  int64_t max_segments = 4;
};

// What the engine computes for a request.
struct TurnPlan {
  std::vector<int64_t> prompt_ids;  // the segment's prompt, its stream and the new tokens
  int64_t max_new_tokens = 0;       // what the segment's budget leaves
  int64_t appended_tokens = 0;      // of prompt_ids, the tokens this request added
  bool new_segment = false;         // this request started a segment
};

// One generated choice, as the engine returned it and as the agent was given it.
struct Reply {
  Sample sample;         // the model's tokens, log-probs and versions
  AgentMessage message;  // chat: the assistant message returned
  std::string text;      // completions: the text returned (a stop sequence cut off)
  std::string cut;       // the stop sequence cut off the end of the reply's text, if any
};

// One stream of an episode, as trained: the prompt, then (in sample) every token after it, with
// the reply turns, the agent's time per step and the tool calls made in its replies.
struct Segment : EpisodeSegment {
  std::string last_content;  // the last reply's content (or text)
};

struct EpisodeStreamStats {
  int64_t requests = 0;
  int64_t rewrites = 0;           // segments started by a rewrite
  int64_t discarded_replies = 0;  // replies no request took up
};

class EpisodeStream {
 public:
  explicit EpisodeStream(const EpisodeStreamOptions& options);
  ~EpisodeStream();

  // The tokens a request has the engine compute. Errors, after which the stream is as before:
  // InvalidArgument for what cannot be rendered or tokenized (naming the field), OutOfRange
  // when the segment's token budget is spent, FailedPrecondition for a rewrite under
  // drop_on_rewrite or past max_segments.
  absl::StatusOr<TurnPlan> plan(const CompletionRequest& request, double now_s);
  // The choices returned for the last planned request.
  void record(std::vector<Reply> replies, double now_s);
  // The segments with model tokens, the last reply (its first choice) included.
  std::vector<Segment> finish();

  // The reply's text as the model wrote it: its tokens decoded, a final stop id left out.
  absl::StatusOr<std::string> reply_text(const Sample& sample) const;
  int64_t stream_tokens() const;  // the current segment's prompt and stream
  const EpisodeStreamStats& stats() const { return stats_; }

 private:
  struct State;  // the conversation a segment's stream covers
  struct Pending;

  absl::StatusOr<std::vector<int64_t>> encode(const std::string& text) const;
  absl::StatusOr<TurnPlan> start_segment(const CompletionRequest& request, bool rewrite);
  void commit(size_t choice, double now_s);

  EpisodeStreamOptions options_;
  std::vector<Segment> segments_;
  std::vector<State> states_;     // one per segment
  std::vector<Pending> pending_;  // at most one: the last request's, until taken up
  EpisodeStreamStats stats_;
};

}  // namespace flywheel::rollout::agent
