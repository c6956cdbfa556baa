#include "episode_stream.h"

#include <algorithm>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace flywheel::rollout::agent {
namespace {

bool messages_start_with(const std::vector<AgentMessage>& messages,
                         const std::vector<AgentMessage>& prefix) {
  if (messages.size() < prefix.size()) return false;
  for (size_t i = 0; i < prefix.size(); ++i) {
    if (!same_message(messages[i], prefix[i])) return false;
  }
  return true;
}

std::string tools_key(const CompletionRequest& request) {
  std::string key;
  for (const ToolSpec& tool : request.tools) absl::StrAppend(&key, tool.function.dump(), "\n");
  return key;
}

bool ids_start_with(const std::vector<int64_t>& ids, const std::vector<int64_t>& prefix,
                    size_t from = 0) {
  return ids.size() >= from + prefix.size() &&
         std::equal(prefix.begin(), prefix.end(), ids.begin() + static_cast<int64_t>(from));
}

void append_tokens(Sample* to, const std::vector<int64_t>& ids, const Sample* from) {
  for (size_t i = 0; i < ids.size(); ++i) {
    to->token_ids.push_back(ids[i]);
    to->logprobs.push_back(from ? from->logprobs[i] : 0.0f);
    to->versions.push_back(from ? from->versions[i] : -1);
    to->from_model.push_back(from ? 1 : 0);
  }
}

}  // namespace

// The conversation a segment's stream covers, as the agent writes it.
struct EpisodeStream::State {
  bool chat = true;
  bool ids = false;                    // completions with token-id prompts
  std::string tools;                   // chat: tools_key()
  std::vector<AgentMessage> messages;  // chat
  std::string text;                    // completions (text prompts)
  bool model_tokens = false;           // a reply was taken up
};

// The last request: the tokens it appended and the replies it was given.
struct EpisodeStream::Pending {
  std::vector<int64_t> appended;
  std::vector<AgentMessage> messages;  // chat: the request's messages
  std::string text;                    // completions: its prompt
  std::vector<int64_t> ids;            // completions with ids: its prompt
  std::vector<Reply> replies;
  double replied_at = 0;
};

EpisodeStream::EpisodeStream(const EpisodeStreamOptions& options) : options_(options) {}
EpisodeStream::~EpisodeStream() = default;

absl::StatusOr<std::vector<int64_t>> EpisodeStream::encode(const std::string& text) const {
  model::EncodeOptions encode;
  encode.add_special_tokens = false;  // a continuation: no BOS in the middle of the stream
  return options_.tokenizer->encode(text, encode);
}

absl::StatusOr<std::string> EpisodeStream::reply_text(const Sample& sample) const {
  std::vector<int64_t> ids = sample.token_ids;
  const std::vector<int64_t>& stops = options_.stop_token_ids;
  if (sample.finish_reason == FinishReason::kStop && !ids.empty() &&
      std::find(stops.begin(), stops.end(), ids.back()) != stops.end()) {
    ids.pop_back();  // the end of turn (or eos) is not part of the reply's text
  }
  return options_.tokenizer->decode(ids);
}

int64_t EpisodeStream::stream_tokens() const {
  if (segments_.empty()) return 0;
  const Segment& s = segments_.back();
  return static_cast<int64_t>(s.prompt_ids.size() + s.sample.token_ids.size());
}

void EpisodeStream::commit(size_t choice, double now_s) {
  Pending& p = pending_.front();
  Segment& segment = segments_.back();
  State& state = states_.back();
  Reply& reply = p.replies[choice];
  append_tokens(&segment.sample, p.appended, nullptr);
  append_tokens(&segment.sample, reply.sample.token_ids, &reply.sample);
  segment.turn_ends.push_back(static_cast<int64_t>(segment.sample.token_ids.size()));
  segment.step_seconds.push_back(std::max(0.0, now_s - p.replied_at));
  segment.tool_calls += static_cast<int64_t>(reply.message.tool_calls.size());
  segment.sample.finish_reason = reply.sample.finish_reason;
  segment.last_content = state.chat ? reply.message.content : reply.text;
  stats_.discarded_replies += static_cast<int64_t>(p.replies.size()) - 1;
  if (state.chat) {
    state.messages = std::move(p.messages);
    state.messages.push_back(reply.message);
  } else if (!state.ids) {
    state.text = absl::StrCat(p.text, reply.text);
  }
  state.model_tokens = true;
  pending_.clear();
}

absl::StatusOr<TurnPlan> EpisodeStream::start_segment(const CompletionRequest& request,
                                                      bool rewrite) {
  const bool replace = !segments_.empty() && !states_.back().model_tokens;
  if (rewrite && !replace) {
    if (options_.drop_on_rewrite) {
      return absl::FailedPreconditionError(
          "the request rewrites the episode's history (its messages do not extend the "
          "conversation so far) and rollout.agent.on_rewrite is drop");
    }
    if (static_cast<int64_t>(segments_.size()) >= options_.max_segments) {
      return absl::FailedPreconditionError(
          absl::StrCat("the request rewrites the episode's history for the ", segments_.size(),
                       "th time; rollout.agent.max_segments is ", options_.max_segments));
    }
  }
  State state;
  state.chat = request.chat;
  state.ids = request.prompt_is_ids;
  Segment segment;
  if (request.chat) {
    absl::StatusOr<std::string> text = options_.format->render(request.messages, request.tools);
    if (!text.ok()) return text.status();
    model::EncodeOptions encode;
    // A rendered chat carries its own special tokens; plain concatenation is a text prompt.
    encode.add_special_tokens = options_.format->end_of_turn().empty();
    absl::StatusOr<std::vector<int64_t>> ids = options_.tokenizer->encode(*text, encode);
    if (!ids.ok())
      return absl::InvalidArgumentError(absl::StrCat("messages: ", ids.status().message()));
    segment.prompt_ids = *std::move(ids);
    state.tools = tools_key(request);
    state.messages = request.messages;
  } else if (request.prompt_is_ids) {
    segment.prompt_ids = request.prompt_ids;
  } else {
    absl::StatusOr<std::vector<int64_t>> ids = options_.tokenizer->encode(request.prompt);
    if (!ids.ok())
      return absl::InvalidArgumentError(absl::StrCat("prompt: ", ids.status().message()));
    segment.prompt_ids = *std::move(ids);
    state.text = request.prompt;
  }
  if (segment.prompt_ids.empty()) return absl::InvalidArgumentError("prompt: renders to no tokens");
  const bool started = !replace;
  if (replace) {
    stats_.discarded_replies += pending_.empty() ? 0 : pending_.front().replies.size();
    segments_.back() = std::move(segment);
    states_.back() = std::move(state);
  } else {
    if (!pending_.empty()) stats_.discarded_replies += pending_.front().replies.size();
    if (rewrite) ++stats_.rewrites;
    segments_.push_back(std::move(segment));
    states_.push_back(std::move(state));
  }
  pending_.clear();
  Pending p;
  p.messages = request.messages;
  p.text = request.prompt;
  p.ids = request.prompt_ids;
  pending_.push_back(std::move(p));
  TurnPlan plan;
  plan.prompt_ids = segments_.back().prompt_ids;
  plan.max_new_tokens = options_.max_new_tokens;
  plan.appended_tokens = static_cast<int64_t>(plan.prompt_ids.size());
  plan.new_segment = started && segments_.size() > 1;
  return plan;
}

absl::StatusOr<TurnPlan> EpisodeStream::plan(const CompletionRequest& request, double now_s) {
  ++stats_.requests;
  if (segments_.empty()) return start_segment(request, false);
  const State& state = states_.back();
  const Segment& segment = segments_.back();
  const bool same_mode = state.chat == request.chat && state.ids == request.prompt_is_ids &&
                         (!request.chat || state.tools == tools_key(request));
  if (!same_mode) return start_segment(request, true);

  // Which reply of the last request this one carries, if any, and what follows it.
  std::optional<size_t> taken;
  std::vector<AgentMessage> new_messages;
  size_t first_new = 0;
  std::string new_text;
  std::vector<int64_t> new_ids;
  std::string stop_cut;
  const bool replied = !pending_.empty() && !pending_.front().replies.empty();
  const Pending* p = replied ? &pending_.front() : nullptr;
  if (request.chat) {
    const std::vector<AgentMessage>& m = request.messages;
    if (p != nullptr && m.size() > p->messages.size() && messages_start_with(m, p->messages)) {
      for (size_t c = 0; c < p->replies.size() && !taken; ++c) {
        if (same_message(m[p->messages.size()], p->replies[c].message)) taken = c;
      }
    }
    if (taken) {
      first_new = p->messages.size() + 1;
    } else if (state.model_tokens && messages_start_with(m, state.messages)) {
      first_new = state.messages.size();
    } else {
      return start_segment(request, true);
    }
    new_messages.assign(m.begin() + static_cast<int64_t>(first_new), m.end());
  } else if (request.prompt_is_ids) {
    std::vector<int64_t> stream = segment.prompt_ids;
    stream.insert(stream.end(), segment.sample.token_ids.begin(), segment.sample.token_ids.end());
    size_t consumed = 0;
    if (p != nullptr && ids_start_with(request.prompt_ids, p->ids)) {
      for (size_t c = 0; c < p->replies.size() && !taken; ++c) {
        if (ids_start_with(request.prompt_ids, p->replies[c].sample.token_ids, p->ids.size())) {
          taken = c;
          consumed = p->ids.size() + p->replies[c].sample.token_ids.size();
        }
      }
    }
    if (!taken) {
      if (!state.model_tokens || !ids_start_with(request.prompt_ids, stream)) {
        return start_segment(request, true);
      }
      consumed = stream.size();
    }
    new_ids.assign(request.prompt_ids.begin() + static_cast<int64_t>(consumed),
                   request.prompt_ids.end());
  } else {
    const std::string& prompt = request.prompt;
    size_t consumed = 0;
    if (p != nullptr && absl::StartsWith(prompt, p->text)) {
      size_t best = 0;
      for (size_t c = 0; c < p->replies.size(); ++c) {
        const std::string& text = p->replies[c].text;
        if (absl::StartsWith(absl::string_view(prompt).substr(p->text.size()), text) &&
            (!taken || text.size() > best)) {
          taken = c;
          best = text.size();
        }
      }
      if (taken) consumed = p->text.size() + best;
    }
    if (!taken) {
      if (!state.model_tokens || !absl::StartsWith(prompt, state.text)) {
        return start_segment(request, true);
      }
      consumed = state.text.size();
    }
    new_text = prompt.substr(consumed);
    // A stop sequence cut from the reply's text is in the stream already: an agent that writes
    // it back does not add it twice.
    if (taken && !p->replies[*taken].cut.empty() &&
        absl::StartsWith(new_text, p->replies[*taken].cut)) {
      new_text = new_text.substr(p->replies[*taken].cut.size());
      stop_cut = p->replies[*taken].cut;
    }
  }

  // The new tokens, before anything changes.
  std::vector<int64_t> appended;
  const std::vector<int64_t>* last_tokens =
      taken ? &p->replies[*taken].sample.token_ids : &segment.sample.token_ids;
  if (request.chat) {
    const std::vector<int64_t>& eot = options_.end_of_turn_ids;
    if (!eot.empty() && !(last_tokens->size() >= eot.size() &&
                          std::equal(eot.begin(), eot.end(),
                                     last_tokens->end() - static_cast<int64_t>(eot.size())))) {
      appended = eot;  // the reply ended at a stop string, not at the end of its turn
    }
    absl::StatusOr<std::string> text =
        options_.format->render_after_assistant(new_messages, first_new);
    if (!text.ok()) return text.status();
    absl::StatusOr<std::vector<int64_t>> ids = encode(*text);
    if (!ids.ok())
      return absl::InvalidArgumentError(absl::StrCat("messages: ", ids.status().message()));
    appended.insert(appended.end(), ids->begin(), ids->end());
  } else if (request.prompt_is_ids) {
    appended = std::move(new_ids);
  } else if (!new_text.empty()) {
    absl::StatusOr<std::vector<int64_t>> ids = encode(new_text);
    if (!ids.ok())
      return absl::InvalidArgumentError(absl::StrCat("prompt: ", ids.status().message()));
    appended = *std::move(ids);
  }
  const int64_t after_prompt =
      static_cast<int64_t>(segment.sample.token_ids.size() + appended.size()) +
      (taken ? static_cast<int64_t>(p->replies[*taken].sample.token_ids.size() + p->appended.size())
             : 0);
  const int64_t left = options_.max_new_tokens - after_prompt;
  if (left < 1) {
    return absl::OutOfRangeError(absl::StrCat(
        "the episode's token budget is spent: ", after_prompt,
        " tokens after its first prompt, rollout.max_new_tokens is ", options_.max_new_tokens));
  }

  if (taken) {
    commit(*taken, now_s);
    if (!states_.back().chat) states_.back().text += stop_cut;
  } else if (!pending_.empty()) {
    stats_.discarded_replies += static_cast<int64_t>(pending_.front().replies.size());
    pending_.clear();
  }
  Pending next;
  next.appended = appended;
  next.messages = request.messages;
  next.text = request.prompt;
  next.ids = request.prompt_ids;
  pending_.push_back(std::move(next));

  TurnPlan plan;
  const Segment& current = segments_.back();
  plan.prompt_ids = current.prompt_ids;
  plan.prompt_ids.insert(plan.prompt_ids.end(), current.sample.token_ids.begin(),
                         current.sample.token_ids.end());
  plan.prompt_ids.insert(plan.prompt_ids.end(), appended.begin(), appended.end());
  plan.max_new_tokens = left;
  plan.appended_tokens = static_cast<int64_t>(appended.size());
  return plan;
}

void EpisodeStream::record(std::vector<Reply> replies, double now_s) {
  if (pending_.empty()) return;
  pending_.front().replies = std::move(replies);
  pending_.front().replied_at = now_s;
}

std::vector<Segment> EpisodeStream::finish() {
  if (!pending_.empty() && !pending_.front().replies.empty() && !segments_.empty()) {
    // The last reply: the agent ended after reading it (its final answer).
    Pending& p = pending_.front();
    const double at = p.replied_at;
    commit(0, at);
    segments_.back().step_seconds.pop_back();  // no request took it up
  }
  pending_.clear();
  std::vector<Segment> out;
  for (Segment& segment : segments_) {
    if (std::count(segment.sample.from_model.begin(), segment.sample.from_model.end(), 1) > 0) {
      out.push_back(std::move(segment));
    }
  }
  segments_.clear();
  states_.clear();
  return out;
}

}  // namespace flywheel::rollout::agent
