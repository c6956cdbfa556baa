// The policy (or critic, or frozen reference) decoder sharded across the learner ranks with
// ZeRO-3 / FSDP semantics. Units: the embedding, each transformer block, and the head (final
// norm plus lm_head, or a critic's scalar value head "score.weight"). Each unit's parameters
// are one flat float32 buffer split evenly across ranks (FlatUnit); nothing else of the model is
// held between steps.
//
// forward() gathers each unit's parameters when it runs (in param_dtype) and:
//  - reshard_after_forward: true frees them right after and recomputes the unit in backward
//    (activation checkpointing per unit: only each unit's input is kept), gathering again;
//  - false keeps the gathered parameters and the unit's activations until backward (faster,
//    more memory).
// Backward reduce-scatters each unit's gradient (in reduce_dtype) into its shard's grad, summed
// over ranks. Every collective happens inside forward() and backward(): all ranks must make the
// same calls in the same order (one forward/backward per micro-batch on every rank).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

#include "absl/status/statusor.h"
#include "flywheel/comm/communicator.h"
#include "flywheel/core/options/trainer_options.h"
#include "flywheel/model/decoder.h"
#include "flywheel/trainer/flat_unit.h"

namespace flywheel::trainer {

// What a forward does with PackedBatch::routes.
enum class RouteUse {
  kIgnore,   // nothing
  kCompare,  // count where the router's own choice differs (route_stats())
  kReplay,   // use them (rollout routing replay), and count as kCompare does
};

// route_stats(): (token, layer) pairs that had routes, and those where the router differed.
struct RouteStats {
  int64_t pairs = 0;
  int64_t disagreements = 0;
};

// LoRA on a sharded decoder: the base units are frozen (no gradient, no optimizer state, not
// checkpointed) and each adapted layer gains a unit "layers.<i>.lora" of its adapters.
struct LoraTraining {
  model::LoraOptions adapters;  // rank 0: off
  double dropout = 0;           // on the adapters' inputs
  uint64_t seed = 0;            // the adapters' initial values and dropout masks
  std::string base_path;        // where the frozen base weights come from (checkpoints say)
};

struct ShardingOptions {
  bool reshard_after_forward = true;
  at::ScalarType param_dtype = at::kFloat;   // compute dtype of gathered parameters
  at::ScalarType reduce_dtype = at::kFloat;  // dtype gradients are reduced in
  bool value_head = false;  // a critic: "score.weight" [1, hidden] instead of lm_head.weight
  bool decay_all = false;   // weight decay also on norms, biases and the embedding
  at::Device device = at::kCPU;
  RouteUse routes = RouteUse::kIgnore;  // mixture of experts: PackedBatch::routes
  // Mixture of experts whose config asks for the load-balancing loss (wants_load_balancing):
  // forward() computes it (TokenOutputs::aux_loss) for the trainer to add.
  bool load_balancing = false;
  LoraTraining lora;

  // trainer.param_dtype, reduce_dtype, reshard_after_forward and lora (its base weights in
  // `model_path`).
  static ShardingOptions from_config(const core::TrainerOptions& trainer,
                                     const std::string& model_path = "");
};

// One micro-batch: rows of packed sequences (see micro_batch.h).
struct PackedBatch {
  at::Tensor tokens;       // [B, T] int64
  at::Tensor positions;    // [B, T] int64, restarting at 0 for every sequence
  at::Tensor segment_ids;  // [B, T] int64: 1, 2, ... per sequence of a row; 0 = padding
  at::Tensor targets;      // [B, T] int64: the token predicted at each position (any id if unused)
  // [B, T] int64, optional: the segment of a shared prompt each token also reads (0: none;
  // model::ForwardBatch::prefix_ids). Undefined: no shared prompt.
  at::Tensor prefix_ids;
  // Mixture of experts, optional: [B, T, moe_layers, k] int64, the experts the rollout engine
  // routed each input token to (-1: none), replayed or compared (ShardingOptions::routes).
  at::Tensor routes;
};

struct HeadOptions {
  double temperature = 1.0;  // log-probs of logits / temperature
  bool with_entropy = false;
  int64_t chunk_size = 1024;  // positions per log-softmax chunk
  // Without gradients, on the CPU where small_gemm_supports(param_dtype): every op in the rollout
  // engine's kernels (projections, row-wise work, attention by slots, the log-softmax rows), so
  // that log-probs equal the engine's bit for bit (model::KeySlots). Ignored otherwise.
  bool engine_kernels = false;
};

struct TokenOutputs {
  at::Tensor logprobs;  // [B, T] float32 log-prob of `targets` (policy head)
  at::Tensor entropy;   // [B, T] float32 (with_entropy)
  at::Tensor values;    // [B, T] float32 (value head)
  // ShardingOptions::load_balancing: the forward's load-balancing loss over its non-padding
  // tokens (model::load_balancing_loss; a differentiable scalar), not yet weighted by
  // router_aux_loss_coef.
  at::Tensor aux_loss;
};

// Whether `config` asks for the mixture-of-experts load-balancing loss in training, as
// transformers does: sparse layers, output_router_logits true and router_aux_loss_coef > 0.
bool wants_load_balancing(const model::ModelConfig& config);
// For trainers (`who`) that do not add it: UnimplementedError when `config` wants it, else OK.
absl::Status refuse_load_balancing(const model::ModelConfig& config, const std::string& who);

class ShardedDecoder {
 public:
  // Parameters start at zero; load() or init_random() fill them. InvalidArgument for an
  // invalid config or dtypes other than float32 / bfloat16 / float16.
  static absl::StatusOr<std::unique_ptr<ShardedDecoder>> create(const model::ModelConfig& config,
                                                                comm::Communicator* comm,
                                                                const ShardingOptions& options);

  // Every parameter from `lookup(name)` (Hugging Face names); each rank keeps its slice.
  // NotFound listing missing tensors; InvalidArgument naming a tensor of the wrong shape.
  // LoRA adapters the lookup lacks start at their initial values (lora_initial_values).
  absl::Status load(const model::DecoderModel::TensorLookup& lookup);
  // DecoderModel::init_random(seed)'s values (a critic's score head included); LoRA adapters
  // at their initial values.
  void init_random(uint64_t seed);

  // Differentiable with respect to every unit's shard. Collective.
  TokenOutputs forward(const PackedBatch& batch, const HeadOptions& head = {});

  // This rank's route counts of the forwards since the last call (options().routes other than
  // kIgnore, batches with routes), then zero.
  RouteStats take_route_stats() { return std::exchange(route_stats_, {}); }

  // Gathers the full parameters unit by unit and calls `fn` with them (Hugging Face names,
  // converted to `dtype`) in buckets of about `bucket_bytes` (at least one parameter each);
  // each bucket is freed after `fn` returns. Collective: every rank gets every bucket.
  // With LoRA, the model's parameters are the merged W + s B A (no adapter tensors), or with
  // `adapters_only` the adapters alone.
  using BucketFn = std::function<void(const std::vector<std::pair<std::string, at::Tensor>>&)>;
  void for_each_full_bucket(int64_t bucket_bytes, at::ScalarType dtype, const BucketFn& fn,
                            bool adapters_only = false);

  // Units in order: "embed", "layers.<i>"..., "head", then with LoRA one "layers.<i>.lora" per
  // adapted layer.
  std::vector<FlatUnit>& units() { return units_; }
  const std::vector<FlatUnit>& units() const { return units_; }
  // The units that train (all, or with LoRA the adapters'): what optimizers update and
  // checkpoints hold.
  std::vector<FlatUnit*> trainable_units();
  std::vector<const FlatUnit*> trainable_units() const;
  bool has_adapters() const { return options_.lora.adapters.enabled(); }
  // Whether HeadOptions::engine_kernels takes effect: a CPU model in a dtype the engine's
  // kernels run (model::small_gemm_supports).
  bool engine_kernels_run() const;
  const model::ModelConfig& config() const { return config_; }
  const ShardingOptions& options() const { return options_; }
  comm::Communicator& comm() { return *comm_; }
  // Bytes of this rank's shards and of the gradients of the trainable ones (float32; frozen
  // shards have none).
  int64_t local_bytes() const;

 private:
  ShardedDecoder(const model::ModelConfig& config, comm::Communicator* comm,
                 const ShardingOptions& options);
  // The adapters from `lookup` where it has them, else at their initial values.
  void init_adapters(const model::DecoderModel::TensorLookup* lookup);

  model::ModelConfig config_;
  comm::Communicator* comm_;
  ShardingOptions options_;
  std::vector<FlatUnit> units_;  // embed, layers..., head
  // The routing the current forward reports (kept past forward(): checkpointed layers run
  // again in the backward pass, and do not report twice), and the totals since take_route_stats.
  model::RouteRecord record_;
  RouteStats route_stats_;
  int64_t layers_ = 0;              // units_[1 + i] is layer i, units_[1 + layers_] the head
  std::vector<int64_t> lora_unit_;  // per layer, its adapters' unit in units_ (-1: none)
  uint64_t forwards_ = 0;           // forward() calls: the dropout masks' seeds
  // The engine's CPU kernels' threads (HeadOptions::engine_kernels), made at first use with
  // at::get_num_threads() threads.
  std::unique_ptr<model::WorkerPool> pool_;
};

// The units of a decoder (or a critic: `value_head`), in order: "embed" (the embedding),
// "layers.<i>" (one per transformer block), "head" (final norm, lm_head or score), each with its
// parameters in DecoderModel's order; then with `lora` a "layers.<i>.lora" per adapted layer.
std::vector<std::pair<std::string, std::vector<model::ParamSpec>>> decoder_units(
    const model::ModelConfig& config, bool value_head, const model::LoraOptions& lora = {});

// Parameter specs of a decoder with a value head: the decoder's, with "score.weight"
// [1, hidden] instead of lm_head.weight.
std::vector<model::ParamSpec> critic_parameter_specs(const model::ModelConfig& config);

}  // namespace flywheel::trainer
