#include "unit_autograd.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>

namespace flywheel::trainer {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// all-gather of the shard, cast to the compute dtype first (half the bytes for bfloat16).
at::Tensor gather(const FlatUnit& unit, const GatherSpec& spec) {
  at::Tensor shard = unit.shard().detach().to(spec.param_dtype).contiguous();
  at::Tensor full = at::empty({unit.padded_numel()}, shard.options());
  spec.comm->all_gather(shard, full);
  return full;
}

// The shard's gradient: the sum over ranks of `grad_full`, reduced in the reduction dtype.
at::Tensor scatter_grad(const FlatUnit& unit, const at::Tensor& grad_full, const GatherSpec& spec) {
  at::Tensor full = grad_full.to(spec.reduce_dtype).contiguous();
  at::Tensor shard = at::empty({unit.shard_numel()}, full.options());
  spec.comm->reduce_scatter(full, shard, comm::ReduceOp::kSum);
  return shard.to(at::kFloat);
}

struct UnitClosure : torch::CustomClassHolder {
  std::vector<FlatUnit*> units;
  UnitFn fn;
  GatherSpec spec;
  std::vector<bool> input_needs_grad;
};

class Gather : public torch::autograd::Function<Gather> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& shard, FlatUnit* unit,
                            GatherSpec spec) {
    ctx->saved_data["unit"] = reinterpret_cast<int64_t>(unit);
    ctx->saved_data["comm"] = reinterpret_cast<int64_t>(spec.comm);
    ctx->saved_data["reduce_dtype"] = static_cast<int64_t>(spec.reduce_dtype);
    (void)shard;
    return gather(*unit, spec);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto* unit = reinterpret_cast<FlatUnit*>(ctx->saved_data["unit"].toInt());
    GatherSpec spec;
    spec.comm = reinterpret_cast<comm::Communicator*>(ctx->saved_data["comm"].toInt());
    spec.reduce_dtype = static_cast<at::ScalarType>(ctx->saved_data["reduce_dtype"].toInt());
    return {scatter_grad(*unit, grads[0], spec), at::Tensor(), at::Tensor()};
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
    ctx->saved_data["inputs"] = static_cast<int64_t>(inputs.size());
    (void)shards;
    return outputs;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto closure =
        c10::static_intrusive_pointer_cast<UnitClosure>(ctx->saved_data["closure"].toCapsule());
    const std::vector<at::Tensor> saved = ctx->get_saved_variables();
    // Recompute with gradient, on detached inputs and freshly gathered parameters.
    at::AutoGradMode enable_grad(true);
    std::vector<at::Tensor> inputs;
    for (size_t i = 0; i < saved.size(); ++i) {
      at::Tensor x = saved[i].detach();
      if (closure->input_needs_grad[i]) x.requires_grad_(true);
      inputs.push_back(x);
    }
    std::vector<at::Tensor> fulls;
    ParamViews params;
    for (FlatUnit* unit : closure->units) {
      at::Tensor full = gather(*unit, closure->spec).requires_grad_(true);
      fulls.push_back(full);
      for (auto& [name, view] : unit->views(full)) params[name] = view;
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
    for (const at::Tensor& full : fulls) wrt.push_back(full);
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
    for (size_t u = 0; u < closure->units.size(); ++u, ++k) {
      at::Tensor g = computed[k].defined() ? computed[k] : at::zeros_like(fulls[u]);
      result.push_back(scatter_grad(*closure->units[u], g, closure->spec));
    }
    result.push_back(at::Tensor());  // the closure
    return result;
  }
};

}  // namespace

at::Tensor gathered_params(FlatUnit& unit, const GatherSpec& spec) {
  return Gather::apply(unit.shard(), &unit, spec);
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
