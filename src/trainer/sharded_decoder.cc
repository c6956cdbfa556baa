#include "flywheel/trainer/sharded_decoder.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "flywheel/core/status_macros.h"
#include "flywheel/model/cpu/decode_rows.h"
#include "flywheel/model/cpu/small_gemm.h"
#include "flywheel/model/device_choice.h"
#include "flywheel/model/hf_checkpoint.h"
#include "flywheel/model/logprobs.h"
#include "flywheel/model/lora.h"
#include "flywheel/model/param_spec.h"
#include "unit_autograd.h"

namespace flywheel::trainer {

ShardingOptions ShardingOptions::from_config(const core::TrainerOptions& t,
                                             const std::string& model_path) {
  ShardingOptions o;
  o.param_dtype = model::resolve_dtype(t.param_dtype, /*on_cuda=*/false);
  o.reduce_dtype = model::resolve_dtype(t.reduce_dtype, /*on_cuda=*/false);
  o.reshard_after_forward = t.reshard_after_forward;
  o.lora.adapters = model::LoraOptions::from_config(t.lora);
  o.lora.dropout = t.lora.dropout;
  o.lora.seed = static_cast<uint64_t>(t.seed);
  o.lora.base_path = model_path;
  return o;
}
namespace {

// Groups `specs` into units: "embed", "layers.<i>", "head".
std::vector<std::pair<std::string, std::vector<model::ParamSpec>>> split_units(
    const std::vector<model::ParamSpec>& specs, int64_t layers) {
  std::vector<std::pair<std::string, std::vector<model::ParamSpec>>> units;
  units.push_back({"embed", {}});
  for (int64_t i = 0; i < layers; ++i) units.push_back({absl::StrCat("layers.", i), {}});
  units.push_back({"head", {}});
  for (const model::ParamSpec& spec : specs) {
    if (spec.name == "model.embed_tokens.weight") {
      units.front().second.push_back(spec);
    } else if (const int64_t layer = model::layer_index(spec.name); layer >= 0) {
      units[1 + layer].second.push_back(spec);
    } else {
      units.back().second.push_back(spec);
    }
  }
  return units;
}

}  // namespace

std::vector<std::pair<std::string, std::vector<model::ParamSpec>>> decoder_units(
    const model::ModelConfig& config, bool value_head, const model::LoraOptions& lora) {
  auto units = split_units(
      value_head ? critic_parameter_specs(config) : model::decoder_parameter_specs(config),
      config.num_hidden_layers);
  for (auto& [name, specs] :
       split_units(model::lora_parameter_specs(config, lora), config.num_hidden_layers)) {
    if (!specs.empty() && absl::StartsWith(name, "layers.")) {
      units.emplace_back(name + ".lora", std::move(specs));
    }
  }
  return units;
}

std::vector<model::ParamSpec> critic_parameter_specs(const model::ModelConfig& config) {
  std::vector<model::ParamSpec> specs;
  for (const model::ParamSpec& spec : model::decoder_parameter_specs(config)) {
    if (spec.name != "lm_head.weight") specs.push_back(spec);
  }
  specs.push_back({"score.weight", {1, config.hidden_size}});
  return specs;
}

bool wants_load_balancing(const model::ModelConfig& config) {
  return config.num_moe_layers() > 0 && config.output_router_logits &&
         config.router_aux_loss_coef > 0;
}

absl::Status refuse_load_balancing(const model::ModelConfig& config, const std::string& who) {
  if (!wants_load_balancing(config)) return absl::OkStatus();
  return absl::UnimplementedError(absl::StrCat(
      "the model's config.json asks for the mixture-of-experts load-balancing loss "
      "(output_router_logits with router_aux_loss_coef > 0), which ",
      who,
      " does not implement (flywheel sft and the RL learner do); set output_router_logits to "
      "false"));
}

ShardedDecoder::ShardedDecoder(const model::ModelConfig& config, comm::Communicator* comm,
                               const ShardingOptions& options)
    : config_(config), comm_(comm), options_(options) {}

absl::StatusOr<std::unique_ptr<ShardedDecoder>> ShardedDecoder::create(
    const model::ModelConfig& config, comm::Communicator* comm, const ShardingOptions& options) {
  if (comm == nullptr) return absl::InvalidArgumentError("sharded decoder needs a communicator");
  FLYWHEEL_RETURN_IF_ERROR(config.validate());
  for (at::ScalarType t : {options.param_dtype, options.reduce_dtype}) {
    if (t != at::kFloat && t != at::kBFloat16 && t != at::kHalf) {
      return absl::InvalidArgumentError(absl::StrCat("sharded decoder: dtype ", c10::toString(t),
                                                     " is not one of float32, bfloat16, float16"));
    }
  }
  if (options.param_dtype == at::kHalf && options.device.is_cpu()) {
    return absl::InvalidArgumentError(
        "sharded decoder: float16 compute is for GPUs (LibTorch's CPU kernels lack float16 "
        "matmuls); use bfloat16 or float32 on CPU");
  }
  FLYWHEEL_RETURN_IF_ERROR(model::validate_lora(config, options.lora.adapters));
  if (options.lora.adapters.enabled() && options.value_head) {
    return absl::UnimplementedError(
        "trainer.lora on a value-head model (a critic, a reward model) is not implemented: its "
        "score head starts untrained; set trainer.lora.rank to 0 for it");
  }
  std::unique_ptr<ShardedDecoder> model(new ShardedDecoder(config, comm, options));
  const bool lora = options.lora.adapters.enabled();
  model->layers_ = config.num_hidden_layers;
  model->lora_unit_.assign(config.num_hidden_layers, -1);
  for (auto& [name, unit_specs] :
       decoder_units(config, options.value_head, options.lora.adapters)) {
    const bool adapters = absl::EndsWith(name, ".lora");
    if (adapters) {
      const int64_t layer = std::stoll(name.substr(std::string("layers.").size()));
      model->lora_unit_[layer] = static_cast<int64_t>(model->units_.size());
    }
    model->units_.emplace_back(name, unit_specs, comm->rank(), comm->size(), options.decay_all,
                               options.device);
    if (lora && !adapters) model->units_.back().freeze();
  }
  return model;
}

std::vector<FlatUnit*> ShardedDecoder::trainable_units() {
  std::vector<FlatUnit*> out;
  for (FlatUnit& unit : units_) {
    if (unit.trainable()) out.push_back(&unit);
  }
  return out;
}

std::vector<const FlatUnit*> ShardedDecoder::trainable_units() const {
  std::vector<const FlatUnit*> out;
  for (const FlatUnit& unit : units_) {
    if (unit.trainable()) out.push_back(&unit);
  }
  return out;
}

void ShardedDecoder::init_adapters(const model::DecoderModel::TensorLookup* lookup) {
  std::vector<model::ParamSpec> specs;
  std::vector<std::pair<FlatUnit*, const FlatParam*>> where;
  for (int64_t unit : lora_unit_) {
    if (unit < 0) continue;
    for (const FlatParam& p : units_[unit].params()) {
      specs.push_back({p.name, p.shape});
      where.emplace_back(&units_[unit], &p);
    }
  }
  size_t i = 0;
  model::lora_initial_values(
      specs, options_.lora.seed, [&](const model::ParamSpec& spec, const at::Tensor& values) {
        absl::StatusOr<at::Tensor> given =
            lookup != nullptr ? (*lookup)(spec.name) : absl::NotFoundError(spec.name);
        where[i].first->set_param(*where[i].second, given.ok() ? *given : values);
        ++i;
      });
}

absl::Status ShardedDecoder::load(const model::DecoderModel::TensorLookup& lookup) {
  std::vector<std::string> missing;
  for (int64_t u = 0; u < layers_ + 2; ++u) {  // the base units; adapters below
    FlatUnit& unit = units_[u];
    for (const FlatParam& p : unit.params()) {
      absl::StatusOr<at::Tensor> source = lookup(p.name);
      if (!source.ok()) {
        if (absl::IsNotFound(source.status())) {
          missing.push_back(p.name);
          continue;
        }
        return source.status();
      }
      if (source->sizes() != at::IntArrayRef(p.shape)) {
        return absl::InvalidArgumentError(
            absl::StrCat("tensor '", p.name, "' has shape [", absl::StrJoin(source->sizes(), ", "),
                         "] but the config needs [", absl::StrJoin(p.shape, ", "), "]"));
      }
      unit.set_param(p, *source);  // copies (and converts) only this rank's slice
    }
  }
  if (!missing.empty()) {
    return absl::NotFoundError(
        absl::StrCat("checkpoint lacks tensors: ", absl::StrJoin(missing, ", ")));
  }
  init_adapters(&lookup);
  return absl::OkStatus();
}

void ShardedDecoder::init_random(uint64_t seed) {
  std::vector<model::ParamSpec> specs;
  std::vector<std::pair<FlatUnit*, const FlatParam*>> where;
  for (int64_t u = 0; u < layers_ + 2; ++u) {
    for (const FlatParam& p : units_[u].params()) {
      specs.push_back({p.name, p.shape});
      where.emplace_back(&units_[u], &p);
    }
  }
  // DecoderModel's order, so that the values equal DecoderModel::init_random(seed)'s.
  size_t i = 0;
  model::random_parameters(specs, config_.initializer_range, seed,
                           [&](const model::ParamSpec&, const at::Tensor& values) {
                             where[i].first->set_param(*where[i].second, values);
                             ++i;
                           });
  init_adapters(nullptr);
}

bool ShardedDecoder::engine_kernels_run() const {
  return options_.device.is_cpu() && model::small_gemm_supports(options_.param_dtype);
}

TokenOutputs ShardedDecoder::forward(const PackedBatch& batch, const HeadOptions& head) {
  const GatherSpec spec{comm_, options_.param_dtype, options_.reduce_dtype};
  model::ForwardBatch fb;
  fb.tokens = batch.tokens;
  fb.positions = batch.positions;
  fb.segment_ids = batch.segment_ids;
  fb.prefix_ids = batch.prefix_ids;
  const bool routed = options_.routes != RouteUse::kIgnore && batch.routes.defined();
  if (routed) {
    fb.routes = batch.routes;
    fb.replay = options_.routes == RouteUse::kReplay;
  }
  // Captured by value (or by pointer to members): checkpointed units run again in backward,
  // after this function returned.
  model::SequenceContext context =
      model::sequence_context(config_, fb, options_.param_dtype, options_.device);
  const bool engine = head.engine_kernels && !at::GradMode::is_enabled() && engine_kernels_run();
  model::WorkerPool* pool = nullptr;
  if (engine) {
    if (pool_ == nullptr) pool_ = std::make_unique<model::WorkerPool>(at::get_num_threads());
    pool = pool_.get();
    context.pool = pool;
    context.key_slots = model::make_key_slots(fb);
  }
  record_ = model::RouteRecord{};
  if (routed) context.record = &record_;
  ++forwards_;
  if (options_.lora.dropout > 0 && at::GradMode::is_enabled()) {
    context.lora_dropout = options_.lora.dropout;
    context.dropout_seed =
        (options_.lora.seed * 1000003u + forwards_) * 65599u + static_cast<uint64_t>(comm_->rank());
  }
  const double lora_scale = has_adapters() ? options_.lora.adapters.scale() : 0.0;
  const model::ModelConfig* config = &config_;
  const bool value_head = options_.value_head;
  at::Tensor tokens = batch.tokens.to(options_.device);
  at::Tensor targets = batch.targets.to(options_.device);

  // Runs `fn` over `units`, checkpointed or on parameters kept gathered.
  auto run = [&](std::vector<FlatUnit*> units, std::vector<at::Tensor> inputs, UnitFn fn) {
    if (options_.reshard_after_forward) return checkpointed_units(units, inputs, fn, spec);
    ParamViews params;
    for (FlatUnit* unit : units) {
      for (auto& [name, p] : gathered_params(*unit, spec)) params[name] = p;
    }
    return fn(inputs, params);
  };

  FlatUnit* embed = &units_.front();
  at::Tensor x = run({embed}, {tokens}, [](const std::vector<at::Tensor>& in, const ParamViews& p) {
    return std::vector<at::Tensor>{at::embedding(p.at("model.embed_tokens.weight"), in[0])};
  })[0];
  // The load-balancing loss: each sparse layer also returns its router's sums over the batch's
  // tokens (padding left out).
  const bool balance = options_.load_balancing && wants_load_balancing(config_);
  const at::Tensor valid =
      balance ? batch.segment_ids.ne(0).reshape({-1}).to(options_.device) : at::Tensor();
  std::vector<model::RouterSums> router_sums;
  for (int64_t layer = 0; layer < layers_; ++layer) {
    const bool sums = balance && config_.is_moe_layer(layer);
    std::vector<FlatUnit*> layer_units = {&units_[1 + layer]};
    if (lora_unit_[layer] >= 0) layer_units.push_back(&units_[lora_unit_[layer]]);
    std::vector<at::Tensor> out = run(
        layer_units, {x},
        [config, context, layer, sums, valid, lora_scale](const std::vector<at::Tensor>& in,
                                                          const ParamViews& p) {
          auto find = [&p](const std::string& name) {
            auto it = p.find(name);
            return it == p.end() ? at::Tensor() : it->second;
          };
          const model::DecoderLayerWeights weights = model::layer_weights(layer, find, lora_scale);
          if (!sums) {
            return std::vector<at::Tensor>{model::decoder_layer(*config, weights, in[0], context)};
          }
          model::RouterOutputs router;
          at::Tensor y = model::decoder_layer(*config, weights, in[0], context, &router);
          const model::RouterSums s = model::router_sums(router, valid);
          return std::vector<at::Tensor>{y, s.probs, s.picks};
        });
    x = out[0];
    if (sums) router_sums.push_back({out[1], out[2]});
  }
  // The head: final norm, then log-probs of the targets (lm_head, or the tied embedding) or the
  // critic's values.
  std::vector<FlatUnit*> head_units = {&units_[1 + layers_]};
  if (!value_head && config_.tie_word_embeddings) head_units.push_back(embed);
  std::vector<at::Tensor> out =
      run(head_units, {x, targets},
          [config, value_head, head, pool](const std::vector<at::Tensor>& in, const ParamViews& p) {
            const at::Tensor& norm = p.at("model.norm.weight");
            at::Tensor h = pool != nullptr
                               ? model::rms_norm_rows(in[0], norm, config->rms_norm_eps, pool)
                               : model::rms_norm(in[0], norm, config->rms_norm_eps);
            if (value_head) {
              at::Tensor v = at::matmul(h, p.at("score.weight").t()).squeeze(-1).to(at::kFloat);
              return std::vector<at::Tensor>{v};
            }
            const at::Tensor& w = config->tie_word_embeddings ? p.at("model.embed_tokens.weight")
                                                              : p.at("lm_head.weight");
            model::TokenLogprobOptions o;
            o.temperature = head.temperature;
            o.with_entropy = head.with_entropy;
            o.chunk_size = head.chunk_size;
            if (pool != nullptr && !head.with_entropy) {
              return std::vector<at::Tensor>{model::engine_token_logprobs(h, w, in[1], o, pool)};
            }
            model::TokenLogprobs lp = model::token_logprobs(h, w, in[1], o);
            if (head.with_entropy) return std::vector<at::Tensor>{lp.logprobs, lp.entropy};
            return std::vector<at::Tensor>{lp.logprobs};
          });
  route_stats_.pairs += record_.replayed;
  route_stats_.disagreements += record_.disagreements;
  TokenOutputs result;
  if (balance) {
    result.aux_loss = model::load_balancing_loss(router_sums, valid.sum().item<double>());
  }
  if (value_head) {
    result.values = out[0];
  } else {
    result.logprobs = out[0];
    if (head.with_entropy) result.entropy = out[1];
  }
  return result;
}

void ShardedDecoder::for_each_full_bucket(int64_t bucket_bytes, at::ScalarType dtype,
                                          const BucketFn& fn, bool adapters_only) {
  std::vector<std::pair<std::string, at::Tensor>> bucket;
  int64_t bytes = 0;
  auto flush = [&] {
    if (!bucket.empty()) fn(bucket);
    bucket.clear();
    bytes = 0;
  };
  const GatherSpec spec{comm_, at::kFloat, at::kFloat};
  at::NoGradGuard no_grad;
  const double scale = has_adapters() ? options_.lora.adapters.scale() : 0.0;
  for (int64_t u = 0; u < layers_ + 2; ++u) {
    const int64_t layer = u - 1;
    const bool adapted = layer >= 0 && layer < layers_ && lora_unit_[layer] >= 0;
    if (adapters_only && !adapted) continue;
    FlatUnit& unit = adapters_only ? units_[lora_unit_[layer]] : units_[u];
    ParamViews params = gathered_params(unit, spec);
    if (adapted && !adapters_only) {
      for (auto& [name, a] : gathered_params(units_[lora_unit_[layer]], spec)) params[name] = a;
    }
    for (const FlatParam& p : unit.params()) {
      at::Tensor value = params.at(p.name);
      auto a = params.find(model::lora_a_name(p.name));
      if (!adapters_only && a != params.end()) {
        value = model::merge_lora(value, a->second, params.at(model::lora_b_name(p.name)), scale);
      }
      value = value.detach().to(dtype).clone();
      const int64_t size = value.numel() * static_cast<int64_t>(value.element_size());
      if (bytes > 0 && bytes + size > bucket_bytes) flush();
      bucket.emplace_back(p.name, std::move(value));
      bytes += size;
    }
  }
  flush();
}

int64_t ShardedDecoder::local_bytes() const {
  int64_t bytes = 0;
  for (const FlatUnit& unit : units_) {
    bytes += unit.shard().numel() * 4;
    if (unit.trainable()) bytes += unit.shard().numel() * 4;  // its gradient
  }
  return bytes;
}

}  // namespace flywheel::trainer
