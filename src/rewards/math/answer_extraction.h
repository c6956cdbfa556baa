// Finds the final answer in a math completion (or in a reference solution).
#pragma once

#include "absl/strings/string_view.h"

namespace flywheel::rewards::math {

// Where an answer came from.
enum class AnswerSource {
  kNone,        // nothing found
  kBoxed,       // the last \boxed{...} / \fbox{...} to close (nested braces allowed)
  kHashes,      // GSM8K: the rest of the line after the last "####"
  kAnswerIs,    // "... the answer is X." (case-insensitive), up to the end of the sentence
  kLastNumber,  // the last number in the text (only when asked for)
};

struct ExtractedAnswer {
  absl::string_view text;  // a view into the scanned text; empty when source is kNone
  AnswerSource source = AnswerSource::kNone;
  bool found() const { return source != AnswerSource::kNone; }
};

// Returns the final answer of `text`, the one stated last:
// - when `text` holds "</think>", only what follows the last one is read (a reasoning model's
//   tries inside its thinking are not its answer);
// - of the boxed answer that closes last (a \boxed{ that never closes, say in a truncated
//   completion, is skipped), the text after the last "####" and the text after the last
//   "answer is", the one whose match ends last wins; a box inside the "answer is" sentence or
//   the "####" line is that answer ("The answer is \boxed{5}." is the box), and of a "####" and
//   an "answer is" that end together the inner one wins;
// - "answer is" followed by a comment ("... this answer is correct") is skipped for the phrase
//   before it (at most 4 phrases are read); in its sentence a '$' before a digit that is never
//   closed on its line is currency ("The answer is $18. I hope this helps!" is "$18");
// - a box that holds only a box is unwrapped ("\boxed{\boxed{5}}" is "5"); "\boxed 5" and
//   "\boxed5" box the next token;
// - else (when `fallback_to_last_number`) the last number.
// Linear in the size of `text`, no recursion and no allocation: any bytes (invalid UTF-8, NULs,
// 10^5 nested braces) are fine. Thread-safe.
ExtractedAnswer extract_answer(absl::string_view text, bool fallback_to_last_number);

const char* answer_source_name(AnswerSource source);

}  // namespace flywheel::rewards::math
