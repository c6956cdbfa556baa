// The decoder-only transformer of the Qwen2 / Qwen3 / Llama 3 families, configured from a
// Hugging Face config.json (ModelConfig), with Hugging Face tensor names.
//
// One forward() serves training (full sequences, causal, with padding/packing) and generation
// (prefill and decode into a KvCache). Parameters are plain leaf tensors in the model dtype;
// RMSNorm, RoPE tables and attention softmax run in float32.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

#include "absl/status/statusor.h"
#include "flywheel/model/cpu/packed_weights.h"
#include "flywheel/model/cpu/worker_pool.h"
#include "flywheel/model/kv_cache.h"
#include "flywheel/model/lora.h"
#include "flywheel/model/model_config.h"
#include "flywheel/model/param_spec.h"
#include "flywheel/model/rope.h"

namespace flywheel::model {

struct DecoderOptions {
  at::ScalarType dtype = at::kFloat;  // kFloat, kBFloat16 or kHalf (kHalf needs a GPU)
  at::Device device = at::kCPU;
  // Threads of flywheel's CPU kernels (small_gemm.h), which run every inference projection of a
  // float32 or bfloat16 model where the CPU has AVX2 or AVX-512 (small_gemm_supports); 0 =
  // at::get_num_threads() when the model is
  // created. Processes that apply a ThreadLayout pass its budget (layout.threads): under the
  // kKernels split ATen itself has one thread.
  int threads = 0;
  // LoRA adapters on the targeted projections (rank 0: none). Their tensors are parameters too
  // (lora_parameter_specs' names, zero until loaded), so that a weight update may carry adapters
  // only. Merged (lora.merged): the projections run W + scale * B A, recomputed by
  // merge_adapters(); unmerged: x W^T + scale * (x A^T) B^T in every forward.
  LoraOptions lora;
};

// One forward pass. Rows are right-padded to T tokens.
struct ForwardBatch {
  at::Tensor tokens;     // [B, T] int64
  at::Tensor positions;  // [B, T] int64: RoPE position of each token (>= 0, also for padding)
  // Without a cache: segment id of each token [B, T] int64. A token attends causally to earlier
  // tokens of its own segment; 0 marks padding (attends only to itself). Undefined: one segment
  // per row, no padding.
  at::Tensor segment_ids;
  // Without a cache, optional (shared-prefix packing): per token, the segment id of a shared
  // prefix it also attends to, causally (0: none). A prefix's tokens precede the segments that
  // read it in the row. Undefined: none.
  at::Tensor prefix_ids;
  // With a cache: row b's first lengths[b] tokens are written to slot slots[b] at their
  // positions, and attend to every position of that slot up to their own (earlier prefill or
  // decode steps included). Tokens past lengths[b] are padding and are not written.
  std::vector<int64_t> slots;
  std::vector<int64_t> lengths;
  // Mixture of experts, optional: routes to replay (rollout routing replay, R3), [B, T,
  // moe_layers, num_experts_per_tok] integer expert ids. A token whose first id in a layer is
  // negative is routed by the router there; the others use the given experts, weighted by the
  // router's probabilities of those experts (so the router still gets its gradient). With
  // `replay` false the routes are only compared with the router's (RouteRecord::disagreements).
  at::Tensor routes;
  bool replay = true;
};

// What a mixture-of-experts forward reports about its routing (forward's `record`). A layer
// reports once per record: a layer run again (activation checkpointing recomputes it in the
// backward pass) does not count twice.
struct RouteRecord {
  // Per mixture-of-experts layer, in order: [B, T, num_experts_per_tok] int64, the experts each
  // token used, replayed or routed (routed ones in the router's order, replayed ones as given).
  std::vector<at::Tensor> layers;
  // Among (token, layer) pairs given routes: how many, and at how many the router's own top-k
  // (as a set) differs from the given experts.
  int64_t replayed = 0;
  int64_t disagreements = 0;

  // The layers side by side: [B, T, moe_layers, num_experts_per_tok] (undefined without any).
  at::Tensor stacked() const;
};

// Every parameter of a decoder of `config`, in DecoderModel's order: the embedding, each
// layer's weights, the final norm and (unless tied) lm_head.weight.
std::vector<ParamSpec> decoder_parameter_specs(const ModelConfig& config);

// Hugging Face's initialisation of `specs`, in order, from one generator seeded with `seed`:
// weights ~ N(0, initializer_range), norms 1, biases 0, drawn in float32. `sink` receives each
// parameter's values (DecoderModel::init_random copies them; a sharded learner keeps its slice).
void random_parameters(const std::vector<ParamSpec>& specs, double initializer_range, uint64_t seed,
                       const std::function<void(const ParamSpec&, const at::Tensor&)>& sink);

// One expert of a mixture-of-experts layer: a SwiGLU MLP.
struct ExpertWeights {
  at::Tensor gate, up, down;
};

// A LoRA adapter of one projection (lora.h): A [rank, in], B [out, rank]; undefined: none.
struct LoraAdapter {
  at::Tensor a, b;
};

// The weights of one decoder layer; optional ones (biases, q/k norms) are undefined when the
// config has none. A mixture-of-experts layer has a router ([num_experts, hidden]) and experts
// in place of gate / up / down. Unmerged LoRA adapters add lora_scale * B A to their projection.
struct DecoderLayerWeights {
  int64_t layer = 0;  // the layer's index
  at::Tensor input_norm, q, q_bias, k, k_bias, v, v_bias, o, o_bias, q_norm, k_norm;
  at::Tensor post_norm, gate, up, down;
  at::Tensor router;
  std::vector<ExpertWeights> experts;
  LoraAdapter q_lora, k_lora, v_lora, o_lora, gate_lora, up_lora, down_lora;
  double lora_scale = 0;
};

// Layer `layer`'s weights, looked up by Hugging Face name ("model.layers.<layer>.*"), LoRA
// adapters included (scaled by `lora_scale`) where `find` has them. `find(name)` returns an
// undefined tensor for names it does not have.
DecoderLayerWeights layer_weights(int64_t layer,
                                  const std::function<at::Tensor(const std::string&)>& find,
                                  double lora_scale = 0);

// Attention of a forward without a cache in the engine's CPU kernel (decode_attention.h), for
// passes without gradients that must equal the engine's log-probs bit for bit: every token reads
// its sequence's keys, gathered in position order into a slot as the engine's cache holds them
// (a shared prefix's keys first, then the branch's own; make_key_slots).
struct KeySlots {
  at::Tensor gather;  // [slots * max_len] int64: the token (b * T + t) each slot position holds
  int64_t slots = 0, max_len = 0;
  std::vector<int64_t> token_slot, token_length;  // per token b * T + t: its slot, keys read (0:
                                                  // padding, which reads none and outputs zeros)
};

// The slots of `batch` (ForwardBatch::segment_ids and prefix_ids; without segments one sequence
// per row). Throws c10::Error when a token's keys are not its position + 1 (a layout the
// engine's cache cannot hold).
std::shared_ptr<const KeySlots> make_key_slots(const ForwardBatch& batch);

// What every layer of one cache-less forward shares: RoPE tables (in the compute dtype), the
// attention mask built from positions and segment ids (see ForwardBatch) and the batch's routes
// to replay (ForwardBatch::routes). With `record` set, mixture-of-experts layers add what they
// chose to it, in layer order.
// Training only: dropout of probability lora_dropout on the inputs of LoRA adapters, its masks
// drawn from dropout_seed, the layer and the projection (a recomputed layer draws the same).
struct SequenceContext {
  at::Tensor cos, sin, mask;
  at::Tensor routes;
  bool replay = true;
  RouteRecord* record = nullptr;
  double lora_dropout = 0;
  uint64_t dropout_seed = 0;
  // Without gradients, on the CPU: with a pool, projections and row-wise work run in the engine's
  // kernels (small_gemm.h, decode_rows.h); with key_slots (and a dtype small_gemm_supports),
  // attention too.
  WorkerPool* pool = nullptr;
  std::shared_ptr<const KeySlots> key_slots;
};

// What decoder_layer() reports of a mixture-of-experts layer's router, for the load-balancing
// loss: the softmax over the experts of every token [B * T, num_experts] (float32,
// differentiable with respect to the router and the input) and the experts the router itself
// picked [B * T, num_experts_per_tok] (before any replay).
struct RouterOutputs {
  at::Tensor probs;
  at::Tensor picked;
};
SequenceContext sequence_context(const ModelConfig& config, const ForwardBatch& batch,
                                 at::ScalarType dtype, at::Device device);

// One decoder layer without a cache, for callers that own the weights (the sharded learner):
// x [B, T, hidden] -> [B, T, hidden], differentiable with respect to x and the weights.
at::Tensor decoder_layer(const ModelConfig& config, const DecoderLayerWeights& weights,
                         const at::Tensor& x, const SequenceContext& context,
                         RouterOutputs* router = nullptr);

// One sparse layer's router over the tokens where `valid` ([B * T] bool) holds: its
// probabilities summed ([num_experts], differentiable) and how often each expert was picked, in
// any of the k slots ([num_experts], float32, no gradient).
struct RouterSums {
  at::Tensor probs, picks;
};
RouterSums router_sums(const RouterOutputs& router, const at::Tensor& valid);

// transformers' load_balancing_loss_func over every sparse layer of one forward of
// `valid_tokens` tokens: num_experts x the sum over experts of (the fraction of (token, layer)
// pairs that picked the expert) x (its mean probability). num_experts_per_tok when the routing
// is uniform; differentiable through the probabilities.
at::Tensor load_balancing_loss(const std::vector<RouterSums>& layers, double valid_tokens);

class DecoderModel {
 public:
  // A model with zero parameters (load() or init_random() fills them). InvalidArgument for an
  // invalid config or an unsupported dtype/device combination.
  static absl::StatusOr<std::unique_ptr<DecoderModel>> create(const ModelConfig& config,
                                                              const DecoderOptions& options);

  const ModelConfig& config() const { return config_; }
  const DecoderOptions& options() const { return options_; }

  // Parameters with their Hugging Face names, in a fixed order. For tied embeddings there is no
  // "lm_head.weight".
  const std::vector<std::pair<std::string, at::Tensor>>& named_parameters() const {
    return parameters_;
  }

  // Fills every parameter from `lookup(name)` (converted to the model dtype and device).
  // lookup returns NotFound for absent names. Errors: a missing tensor, or a shape mismatch
  // (naming the tensor and both shapes).
  using TensorLookup = std::function<absl::StatusOr<at::Tensor>(const std::string& name)>;
  absl::Status load(const TensorLookup& lookup);

  // Hugging Face's initialisation: weights ~ N(0, initializer_range), norms 1, biases 0.
  // Deterministic for a seed (drawn in float32, then cast). LoRA adapters start at zero.
  void init_random(uint64_t seed);

  // Merged LoRA adapters (DecoderOptions::lora.merged): recomputes every adapted projection from
  // the current parameters, W + scale * B A. load() and init_random() call it; callers that
  // change parameters in place (the engine's weight updates) call it after. The packed weights
  // (packs_) follow in-place writes by LibTorch's version counters (copy_, addmm_out): only the
  // weights written are packed again.
  void merge_adapters();

  // Packs every projection weight the CPU kernels read packed (PackedWeights: bfloat16 on
  // AVX512-BF16; nothing elsewhere) now rather than in the next forward, so that the first step
  // after a load or a weight update costs what the others do. The generation engine calls it.
  void pack_weights() const;
  // The packed weights (null where the kernels read none packed).
  const PackedWeights* packed_weights() const { return packs_.get(); }

  // Final hidden states [B, T, hidden] (after the last RMSNorm), in the model dtype. Without
  // gradients (or with inputs that need none), CPU projections run in small_gemm.h's
  // kernels (see DecoderOptions::threads), otherwise in LibTorch. A malformed
  // batch (shapes, lengths, slots or positions outside the cache) throws c10::Error: batches are
  // built by flywheel's own code, so a bad one is a bug. Token ids must be < vocab_size.
  // With `record`, a mixture-of-experts model reports its routing there (see RouteRecord).
  at::Tensor forward(const ForwardBatch& batch, KvCache* cache = nullptr,
                     RouteRecord* record = nullptr) const;

  // The output projection [vocab, hidden] (the embedding matrix when tied).
  const at::Tensor& lm_head_weight() const { return lm_head_; }
  // Float32 logits for hidden states [..., hidden].
  at::Tensor logits(const at::Tensor& hidden) const;

  // The threads of the CPU kernels (null where they do not run): callers may run their
  // own row-independent CPU work on them between forwards (the engine's sampling).
  WorkerPool* cpu_pool() const { return pool_.get(); }

  // A cache sized for this model, in the model dtype and device.
  absl::StatusOr<std::unique_ptr<KvCache>> make_cache(int64_t slots, int64_t max_len) const;

 private:
  DecoderModel(const ModelConfig& config, const DecoderOptions& options);
  at::Tensor forward_with_cache(const ForwardBatch& batch, KvCache* cache,
                                RouteRecord* record) const;

  ModelConfig config_;
  DecoderOptions options_;
  std::vector<std::pair<std::string, at::Tensor>> parameters_;
  at::Tensor embed_, final_norm_, lm_head_;
  std::vector<DecoderLayerWeights> layers_;
  // Merged LoRA: per adapted projection, the tensor forwards use and the parameters it is made of.
  struct MergedProjection {
    at::Tensor merged, base, a, b;
  };
  std::vector<MergedProjection> merged_;
  at::Tensor inv_freq_;  // float32 [head_dim / 2]
  // The threads of the kernels; null where they do not run (other dtypes, devices, or CPUs
  // without them: small_gemm_supports), and LibTorch projects.
  std::shared_ptr<WorkerPool> pool_;
  // bfloat16 with AVX512-BF16 (PackedWeights::used_for), with a pool: the projections' weights in
  // the kernel's layout, packed on first use and after in-place changes (as many bytes again as
  // the weights); null otherwise.
  std::unique_ptr<PackedWeights> packs_;
};

// RMSNorm as Hugging Face computes it: normalise in float32, cast back, multiply by weight.
at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps);

}  // namespace flywheel::model
