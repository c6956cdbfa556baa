// The built-in synthetic tasks of `flywheel make-data`: generated from a seed, no download.
//
//   addition:    "a+b=" -> the sum (the quickstart; digit orders below).
//   addition-pairs: preference pairs of the same prompts for `flywheel dpo` and `flywheel rm`:
//                the sum is chosen, a near miss (one digit of the sum changed) rejected:
//                  {"prompt": "123+456=", "chosen": "579", "rejected": "589", "answer": "579"}
//   addition-judge: examples to SFT a judge of the same prompts (the llm_judge reward, template
//                "{completion}|{prompt}"): an answer to judge, the sum (half the time) or a
//                wrong one like a policy's (some digits changed, or one, often by one as a
//                carry gone wrong, a digit dropped or added, another number), then the
//                addition; the response works the sum out (the answer comes first, so that
//                the judge adds rather than copies), marks each digit of the answer ('=' the
//                sum's, 'x' another or missing), then gives the verdict, so that every step
//                is a local one a small model learns:
//                  {"prompt": "589|123+456=", "response": "579 =x= no", "answer": "579 =x= no"}
//   addition-prm: step-labelled answers to the same prompts for `flywheel rm --process` (a
//                process reward model; rm.separator ""): an answer like a policy's (the sum
//                half the time, else a wrong one as addition-judge draws them), each digit a
//                step labelled by whether it is the sum's digit at that place, and the end of
//                the answer ("<eos>", the character tokenizer's stop token) a last step
//                labelled by whether the sum has that many digits:
//                  {"prompt": "123+456=", "completions": ["5", "8", "9", "<eos>"],
//                   "labels": [true, false, true, true], "answer": "579"}
//   calculator:  "a*b=" -> the product, a of `digits` digits and b of 2: more than a small
//                model computes in its head, easy with the calculator environment. Besides
//                train.jsonl and eval.jsonl it writes sft.jsonl, demonstration episodes cut
//                into their two model turns (each turn's prompt is the episode's stream so
//                far, so the SFT loss falls on model tokens only):
//                  {"prompt": "123*45=", "response": "<calc>123*45</calc>"}
//                  {"prompt": "123*45=<calc>123*45</calc><result>5535</result>",
//                   "response": "5535"}
//
//   guess:       the guess_number environment's game: "guess 1-16:" with a hidden "target"; the
//                answer is the target written with as many digits as the maximum ("08"), which
//                is how every guess is written, so a model's turn is exactly that many tokens.
//                sft.jsonl holds binary-search demonstration episodes cut into their turns:
//                  {"prompt": "guess 1-16:", "response": "08"}
//                  {"prompt": "guess 1-16:08higher", "response": "12"} ...
//
// Held-out pairs never appear in training (guess: every target appears in both); records
// carry "prompt", "answer" and (addition) "response".
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "absl/status/statusor.h"

namespace flywheel::eval {

struct SyntheticTaskOptions {
  // addition | addition-pairs | addition-judge | addition-prm | calculator | guess
  std::string task = "addition";
  int digits = 3;  // of each addend; of the calculator's first factor
  int64_t train = 20000;
  int64_t eval = 200;
  int64_t demos = 1000;    // calculator, guess: demonstration episodes in sft.jsonl
  int64_t guess_max = 16;  // guess: targets in [1, guess_max]
  uint64_t seed = 7;
  // addition: msd "123+456=" -> "579"; sum-lsd: the sum least-significant digit first,
  // "123+456=" -> "975"; lsd: every number least-significant digit first, "321+654=" -> "975".
  std::string digit_order = "msd";
};

// File name -> JSONL text. InvalidArgument for an unknown task or digit order, or more records
// than there are distinct operand pairs.
absl::StatusOr<std::map<std::string, std::string>> make_synthetic_task(
    const SyntheticTaskOptions& options);

// addition-prm from a policy's own answers: every completion of `flywheel generate`'s output at
// `path` (records with "prompt", "answer" and "completions": [{"text", "finish_reason"}])
// becomes a step-labelled record as addition-prm writes them (a completion that stopped on its
// own ends with the "<eos>" step). JSONL text; InvalidArgument naming path:line for a record
// without those fields.
absl::StatusOr<std::string> label_addition_samples(const std::string& path);

}  // namespace flywheel::eval
