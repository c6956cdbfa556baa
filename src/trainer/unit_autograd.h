// Autograd for FSDP units (private to flywheel_trainer).
//
//   gathered_params(): differentiable all-gather of a unit's shard (cast to the compute dtype),
//     as one tensor per parameter; its backward reduce-scatters their gradients (in the
//     reduction dtype) into the shard's grad. The gathered buffer lives as long as the autograd
//     graph needs it.
//   checkpointed_units(): runs `fn` over gathered parameters without keeping them or the
//     activations inside it; backward gathers again, recomputes `fn` with gradient, and
//     reduce-scatters the parameter gradients (activation checkpointing per unit).
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <torch/csrc/autograd/variable.h>

#include "flywheel/comm/communicator.h"
#include "flywheel/trainer/flat_unit.h"

namespace flywheel::trainer {

struct GatherSpec {
  comm::Communicator* comm = nullptr;
  at::ScalarType param_dtype = at::kFloat;
  at::ScalarType reduce_dtype = at::kFloat;
};

// Parameters of the units a function needs, by Hugging Face name.
using ParamViews = std::map<std::string, at::Tensor>;
using UnitFn = std::function<std::vector<at::Tensor>(const std::vector<at::Tensor>& inputs,
                                                     const ParamViews& params)>;

// The parameters of `unit` in the compute dtype, by name, differentiable w.r.t. its shard.
ParamViews gathered_params(FlatUnit& unit, const GatherSpec& spec);

// fn(inputs, params of `units`) with activation checkpointing. Outputs that fn leaves undefined
// stay undefined. Inputs that do not require grad get no gradient.
std::vector<at::Tensor> checkpointed_units(const std::vector<FlatUnit*>& units,
                                           const std::vector<at::Tensor>& inputs, UnitFn fn,
                                           const GatherSpec& spec);

}  // namespace flywheel::trainer
