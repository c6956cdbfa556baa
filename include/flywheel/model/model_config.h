// The architecture of a decoder-only model, read from a Hugging Face config.json.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "flywheel/core/json.h"

namespace flywheel::model {

// Llama 3 rope_scaling ("rope_type" or "type" == "llama3").
struct Llama3RopeScaling {
  double factor = 8.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 8192;
};

struct ModelConfig {
  // Upper bounds checked by validate(): far above any released model, low enough that no size
  // or product of sizes overflows, and checked before anything is allocated.
  static constexpr int64_t kMaxVocabSize = int64_t{1} << 24;         // 16,777,216
  static constexpr int64_t kMaxHiddenSize = int64_t{1} << 20;        // 1,048,576
  static constexpr int64_t kMaxIntermediateSize = int64_t{1} << 24;  // 16,777,216
  static constexpr int64_t kMaxLayers = int64_t{1} << 16;            // 65,536
  static constexpr int64_t kMaxHeads = int64_t{1} << 16;             // 65,536
  static constexpr int64_t kMaxHeadDim = int64_t{1} << 16;           // 65,536
  static constexpr int64_t kMaxPositionEmbeddings = int64_t{1} << 30;
  static constexpr int64_t kMaxParameters = int64_t{1} << 42;  // ~4.4 trillion
  static constexpr int64_t kMaxExperts = int64_t{1} << 16;     // expert ids fit 16 bits

  std::string model_type;  // qwen2 | qwen3 | qwen3_moe | llama
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;  // GQA; defaults to num_attention_heads
  int64_t head_dim = 0;             // defaults to hidden_size / num_attention_heads
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  bool has_llama3_rope_scaling = false;
  Llama3RopeScaling rope_scaling;
  int64_t max_position_embeddings = 4096;
  bool tie_word_embeddings = false;
  bool qkv_bias = false;  // biases on q, k, v (Qwen2 always; Llama/Qwen3 with attention_bias)
  bool o_bias = false;    // bias on o_proj (Llama/Qwen3 with attention_bias)
  bool qk_norm = false;   // per-head RMSNorm of q and k before RoPE (Qwen3, Qwen3-MoE)
  // Mixture of experts (qwen3_moe). Layer i is sparse when num_experts > 0, i is not in
  // mlp_only_layers and (i + 1) % decoder_sparse_step == 0: a router (mlp.gate) picks the
  // num_experts_per_tok experts of highest softmax probability for each token, and their
  // SwiGLU MLPs (moe_intermediate_size wide) are summed with those probabilities (renormalised
  // over the chosen ones with norm_topk_prob). Other layers use the dense MLP.
  int64_t num_experts = 0;
  int64_t num_experts_per_tok = 0;
  int64_t moe_intermediate_size = 0;
  int64_t decoder_sparse_step = 1;
  bool norm_topk_prob = false;
  std::vector<int64_t> mlp_only_layers;
  // The load-balancing loss's weight in training, applied when output_router_logits is true
  // (as transformers does).
  double router_aux_loss_coef = 0.001;
  bool output_router_logits = false;
  double initializer_range = 0.02;
  std::string torch_dtype = "float32";
  std::vector<int64_t> bos_token_ids;
  std::vector<int64_t> eos_token_ids;

  // Reads config.json. Errors name `source` and the key: a missing required key, a wrong type,
  // an unknown model_type or an unsupported option (sliding window, other rope_scaling types,
  // activations other than silu), with what is supported.
  static absl::StatusOr<ModelConfig> from_json(const core::Json& json, const std::string& source);
  static absl::StatusOr<ModelConfig> from_file(const std::string& path);

  // config.json for this model, loadable by transformers.
  core::Json to_json() const;

  // InvalidArgument naming the field: a size that is not positive or exceeds its limit above, a
  // parameter count above kMaxParameters, inconsistent shapes (heads divide, head_dim even),
  // rms_norm_eps / rope_theta not positive and finite, a negative initializer_range, and for
  // llama3 rope_scaling: factor, low_freq_factor, original_max_position_embeddings not
  // positive, or high_freq_factor not above low_freq_factor (each would make RoPE NaN).
  absl::Status validate() const;

  // The mixture-of-experts fields: with num_experts > 0, model_type qwen3_moe,
  // 1 <= num_experts_per_tok <= num_experts <= kMaxExperts, moe_intermediate_size and
  // decoder_sparse_step positive, mlp_only_layers within the layers, router_aux_loss_coef >= 0.
  absl::Status validate_experts() const;

  // Saturates at INT64_MAX (validate() bounds it by kMaxParameters).
  int64_t num_parameters() const;

  // Whether layer `layer` is a mixture-of-experts layer (see num_experts).
  bool is_moe_layer(int64_t layer) const;
  // The number of mixture-of-experts layers.
  int64_t num_moe_layers() const;
};

}  // namespace flywheel::model
