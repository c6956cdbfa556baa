// A deeper copy of a model: decoder layers appended after its last, each the identity at
// initialisation, so that the copy computes exactly what the model does until it is trained.
// For heads that must compare what the model's last layers compute (a reward model checking a
// sum the policy predicts a token earlier): the appended layers give them that depth.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "flywheel/model/decoder.h"

namespace flywheel::model {

struct GrowOptions {
  int64_t add_layers = 1;  // layers appended, >= 1
  uint64_t seed = 1;       // their initialisation (DecoderModel::init_random)
};

// `base` with `options.add_layers` layers appended (config: num_hidden_layers grows; a mixture of
// experts' layer pattern extends as its config says). Every parameter of `base` is copied by
// name. An appended layer is initialised like a fresh model's (DecoderModel::init_random) except
// its output projections (self_attn.o_proj and every mlp down_proj, with their biases), which are
// zero: the layer adds nothing to the residual stream, so the grown model's outputs equal
// `base`'s bit for bit, and the first gradient step moves the output projections (their
// gradients are not zero) and through them the rest. InvalidArgument for add_layers < 1 or a
// model with LoRA adapters (merge them first).
absl::StatusOr<std::unique_ptr<DecoderModel>> grow_model(const DecoderModel& base,
                                                         const GrowOptions& options);

}  // namespace flywheel::model
