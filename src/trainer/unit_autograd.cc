#include "unit_autograd.h"

#include <ATen/ATen.h>
#include <ATen/record_function.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>

namespace flywheel::trainer {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// all-gather of the shard, cast to the compute dtype first (half the bytes for bfloat16).
at::Tensor gather(const FlatUnit& unit, const GatherSpec& spec) {
  RECORD_USER_SCOPE("flywheel::collective");  // profilers' phase (learner_bench --profile)
  at::Tensor shard = unit.shard().detach().to(spec.param_dtype).contiguous();
  if (spec.comm->size() == 1) return shard;  // the whole unit already (no copy in float32)
  at::Tensor full = at::empty({unit.padded_numel()}, shard.options());
  spec.comm->all_gather(shard, full);
  return full;
}

// The shard's gradient from the unit's parameter gradients (in the unit's parameter order; an
// undefined one is zero): one flat buffer, reduce-scattered (summed over ranks) in the reduction
// dtype. Parameters are separate tensors to autograd, never views of one flat tensor: the
// backward of a view allocates and adds a zero tensor of the whole buffer per parameter.
at::Tensor scatter_grad(const FlatUnit& unit, const std::vector<at::Tensor>& grads,
                        const GatherSpec& spec) {
  RECORD_USER_SCOPE("flywheel::collective");
  // Every element is written once: the parameters lie back to back from offset 0 (FlatUnit), then
  // the padding up to padded_numel(). (Zeroing the whole buffer first cost a bfloat16 learner
  // ~3% of its step.)
  at::Tensor full = at::empty({unit.padded_numel()},
                              unit.shard().options().dtype(spec.reduce_dtype).requires_grad(false));
  for (size_t i = 0; i < unit.params().size(); ++i) {
    const FlatParam& p = unit.params()[i];
    at::Tensor part = full.narrow(0, p.offset, p.numel);
    if (i < grads.size() && grads[i].defined()) {
      part.copy_(grads[i].reshape({-1}));
    } else {
      part.zero_();
    }
  }
  full.narrow(0, unit.numel(), unit.padded_numel() - unit.numel()).zero_();
  if (spec.comm->size() == 1) return full.to(at::kFloat);  // nothing to sum over
  at::Tensor shard = at::empty({unit.shard_numel()}, full.options());
  spec.comm->reduce_scatter(full, shard, comm::ReduceOp::kSum);
  return shard.to(at::kFloat);
}

// The unit's parameters as views of `full`, in the unit's order.
std::vector<at::Tensor> param_views(const FlatUnit& unit, const at::Tensor& full) {
  std::vector<at::Tensor> views;
  for (const FlatParam& p : unit.params()) {
    views.push_back(full.narrow(0, p.offset, p.numel).view(p.shape));
  }
  return views;
}

struct UnitClosure : torch::CustomClassHolder {
  std::vector<FlatUnit*> units;
  UnitFn fn;
  GatherSpec spec;
  std::vector<bool> input_needs_grad;
};

struct GatherClosure : torch::CustomClassHolder {
  FlatUnit* unit = nullptr;
  GatherSpec spec;
};

// shard -> the unit's parameters (one output each); backward: their gradients -> the shard's.
class Gather : public torch::autograd::Function<Gather> {
 public:
  static variable_list forward(AutogradContext* ctx, const at::Tensor& shard,
                               c10::intrusive_ptr<GatherClosure> closure) {
    (void)shard;
    ctx->saved_data["closure"] = c10::IValue::make_capsule(closure);
    return param_views(*closure->unit, gather(*closure->unit, closure->spec));
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto closure =
        c10::static_intrusive_pointer_cast<GatherClosure>(ctx->saved_data["closure"].toCapsule());
    return {scatter_grad(*closure->unit, grads, closure->spec), at::Tensor()};
  }
};

class Checkpoint : public torch::autograd::Function<Checkpoint> {
 public:
  static variable_list forward(AutogradContext* ctx, at::TensorList inputs, at::TensorList shards,
                               c10::intrusive_ptr<UnitClosure> closure) {
    std::vector<at::Tensor> saved(inputs.begin(), inputs.end());
    ctx->save_for_backward(saved);
    ParamViews params;
    for (FlatUnit* unit : closure->units) {
      for (auto& [name, view] : unit->views(gather(*unit, closure->spec))) params[name] = view;
    }
    // Without gradient, also for custom functions inside fn: nothing of fn is kept.
    at::NoGradGuard no_grad;
    std::vector<at::Tensor> detached;
    for (const at::Tensor& x : saved) detached.push_back(x.detach());
    std::vector<at::Tensor> outputs = closure->fn(detached, params);  // params freed after
    ctx->saved_data["closure"] = c10::IValue::make_capsule(closure);
    (void)shards;
    return outputs;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto closure =
        c10::static_intrusive_pointer_cast<UnitClosure>(ctx->saved_data["closure"].toCapsule());
    const std::vector<at::Tensor> saved = ctx->get_saved_variables();
    // Recompute with gradient, on detached inputs and freshly gathered parameters, each
    // parameter its own leaf.
    at::AutoGradMode enable_grad(true);
    std::vector<at::Tensor> inputs;
    for (size_t i = 0; i < saved.size(); ++i) {
      at::Tensor x = saved[i].detach();
      if (closure->input_needs_grad[i]) x.requires_grad_(true);
      inputs.push_back(x);
    }
    std::vector<std::vector<at::Tensor>> leaves;
    ParamViews params;
    for (FlatUnit* unit : closure->units) {
      std::vector<at::Tensor> unit_leaves = param_views(*unit, gather(*unit, closure->spec));
      for (size_t i = 0; i < unit_leaves.size(); ++i) {
        unit_leaves[i] = unit_leaves[i].detach().requires_grad_(unit->trainable());
        params[unit->params()[i].name] = unit_leaves[i];
      }
      // A frozen unit's parameters get no gradient (and cost no weight-gradient matmuls).
      leaves.push_back(unit->trainable() ? std::move(unit_leaves) : std::vector<at::Tensor>());
    }
    std::vector<at::Tensor> outputs = closure->fn(inputs, params);
    std::vector<at::Tensor> roots, root_grads;
    for (size_t i = 0; i < outputs.size(); ++i) {
      if (outputs[i].defined() && outputs[i].requires_grad() && grads[i].defined()) {
        roots.push_back(outputs[i]);
        root_grads.push_back(grads[i]);
      }
    }
    std::vector<at::Tensor> wrt;
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (closure->input_needs_grad[i]) wrt.push_back(inputs[i]);
    }
    for (const auto& unit_leaves : leaves)
      wrt.insert(wrt.end(), unit_leaves.begin(), unit_leaves.end());
    std::vector<at::Tensor> computed;
    if (!roots.empty()) {
      computed = torch::autograd::grad(roots, wrt, root_grads, /*retain_graph=*/false,
                                       /*create_graph=*/false, /*allow_unused=*/true);
    } else {
      computed.resize(wrt.size());
    }
    variable_list result;
    size_t k = 0;
    for (size_t i = 0; i < inputs.size(); ++i) {
      result.push_back(closure->input_needs_grad[i] ? computed[k++] : at::Tensor());
    }
    for (size_t u = 0; u < closure->units.size(); ++u) {
      std::vector<at::Tensor> unit_grads(computed.begin() + k,
                                         computed.begin() + k + leaves[u].size());
      k += leaves[u].size();
      result.push_back(closure->units[u]->trainable()
                           ? scatter_grad(*closure->units[u], unit_grads, closure->spec)
                           : at::Tensor());
    }
    result.push_back(at::Tensor());  // the closure
    return result;
  }
};

}  // namespace

ParamViews gathered_params(FlatUnit& unit, const GatherSpec& spec) {
  auto closure = c10::make_intrusive<GatherClosure>();
  closure->unit = &unit;
  closure->spec = spec;
  variable_list params = Gather::apply(unit.shard(), closure);
  ParamViews out;
  for (size_t i = 0; i < params.size(); ++i) out[unit.params()[i].name] = params[i];
  return out;
}

std::vector<at::Tensor> checkpointed_units(const std::vector<FlatUnit*>& units,
                                           const std::vector<at::Tensor>& inputs, UnitFn fn,
                                           const GatherSpec& spec) {
  auto closure = c10::make_intrusive<UnitClosure>();
  closure->units = units;
  closure->fn = std::move(fn);
  closure->spec = spec;
  for (const at::Tensor& x : inputs) closure->input_needs_grad.push_back(x.requires_grad());
  std::vector<at::Tensor> shards;
  for (FlatUnit* unit : units) shards.push_back(unit->shard());
  return Checkpoint::apply(at::TensorList(inputs), at::TensorList(shards), closure);
}

}  // namespace flywheel::trainer
