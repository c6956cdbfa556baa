#include "flywheel/model/model_config.h"

#include <cmath>
#include <limits>
#include <map>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "flywheel/core/file_io.h"
#include "flywheel/core/status_macros.h"

namespace flywheel::model {
namespace {

constexpr const char* kSupportedTypes = "qwen2, qwen3, qwen3_moe, llama";

// Reads typed keys of a JSON object, collecting the first error with the key name.
class KeyReader {
 public:
  KeyReader(const core::Json& json, const std::string& source) : json_(json), source_(source) {}

  void integer(const char* key, int64_t* out, bool required) {
    const core::Json* v = json_.find(key);
    if (v == nullptr || v->is_null()) {
      if (required) fail(key, "missing required key");
      return;
    }
    if (!v->is_integer())
      return fail(key, absl::StrCat("expected an integer, got ", core::Json::type_name(v->type())));
    *out = v->as_int();
  }
  void number(const char* key, double* out) {
    const core::Json* v = json_.find(key);
    if (v == nullptr || v->is_null()) return;
    if (!v->is_number())
      return fail(key, absl::StrCat("expected a number, got ", core::Json::type_name(v->type())));
    *out = v->as_double();
  }
  void boolean(const char* key, bool* out) {
    const core::Json* v = json_.find(key);
    if (v == nullptr || v->is_null()) return;
    if (!v->is_bool())
      return fail(key,
                  absl::StrCat("expected true or false, got ", core::Json::type_name(v->type())));
    *out = v->as_bool();
  }
  void string(const char* key, std::string* out) {
    const core::Json* v = json_.find(key);
    if (v == nullptr || v->is_null()) return;
    if (!v->is_string())
      return fail(key, absl::StrCat("expected a string, got ", core::Json::type_name(v->type())));
    *out = v->as_string();
  }
  // An id or a list of ids.
  void ids(const char* key, std::vector<int64_t>* out) {
    const core::Json* v = json_.find(key);
    if (v == nullptr || v->is_null()) return;
    if (v->is_integer()) {
      out->push_back(v->as_int());
      return;
    }
    if (v->is_array()) {
      for (const core::Json& item : v->as_array()) {
        if (!item.is_integer()) return fail(key, "expected an integer or a list of integers");
        out->push_back(item.as_int());
      }
      return;
    }
    fail(key, "expected an integer or a list of integers");
  }
  void fail(const std::string& key, const std::string& message) {
    if (status_.ok()) {
      status_ = absl::InvalidArgumentError(absl::StrCat(source_, ": ", key, ": ", message));
    }
  }
  const absl::Status& status() const { return status_; }

 private:
  const core::Json& json_;
  const std::string& source_;
  absl::Status status_;
};

// a * b and a + b for non-negative values, saturating at INT64_MAX.
int64_t mul_sat(int64_t a, int64_t b) {
  int64_t out = 0;
  return __builtin_mul_overflow(a, b, &out) ? std::numeric_limits<int64_t>::max() : out;
}
int64_t add_sat(int64_t a, int64_t b) {
  int64_t out = 0;
  return __builtin_add_overflow(a, b, &out) ? std::numeric_limits<int64_t>::max() : out;
}

absl::Status bounded(const char* key, int64_t value, int64_t limit) {
  if (value <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(key, " must be positive, got ", value));
  }
  if (value > limit) {
    return absl::InvalidArgumentError(
        absl::StrCat(key, " ", value, " exceeds the limit of ", limit));
  }
  return absl::OkStatus();
}

absl::Status positive_finite(const char* key, double value) {
  if (!(value > 0) || !std::isfinite(value)) {
    return absl::InvalidArgumentError(
        absl::StrCat(key, " must be a positive finite number, got ", value));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ModelConfig> ModelConfig::from_json(const core::Json& json,
                                                   const std::string& source) {
  if (!json.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": expected a JSON object"));
  }
  ModelConfig c;
  KeyReader r(json, source);
  r.string("model_type", &c.model_type);
  if (c.model_type.empty()) {
    r.fail("model_type", absl::StrCat("missing required key (supported: ", kSupportedTypes, ")"));
  } else if (c.model_type != "qwen2" && c.model_type != "qwen3" && c.model_type != "qwen3_moe" &&
             c.model_type != "llama") {
    r.fail("model_type", absl::StrCat("unsupported model type '", c.model_type,
                                      "'; supported: ", kSupportedTypes));
  }
  r.integer("vocab_size", &c.vocab_size, true);
  r.integer("hidden_size", &c.hidden_size, true);
  r.integer("intermediate_size", &c.intermediate_size, true);
  r.integer("num_hidden_layers", &c.num_hidden_layers, true);
  r.integer("num_attention_heads", &c.num_attention_heads, true);
  c.num_key_value_heads = c.num_attention_heads;
  r.integer("num_key_value_heads", &c.num_key_value_heads, false);
  r.integer("head_dim", &c.head_dim, false);
  if (c.head_dim == 0 && c.num_attention_heads > 0)
    c.head_dim = c.hidden_size / c.num_attention_heads;
  r.number("rms_norm_eps", &c.rms_norm_eps);
  r.number("rope_theta", &c.rope_theta);
  r.integer("max_position_embeddings", &c.max_position_embeddings, false);
  r.boolean("tie_word_embeddings", &c.tie_word_embeddings);
  r.number("initializer_range", &c.initializer_range);
  r.string("torch_dtype", &c.torch_dtype);
  r.ids("bos_token_id", &c.bos_token_ids);
  r.ids("eos_token_id", &c.eos_token_ids);

  std::string act = "silu";
  r.string("hidden_act", &act);
  if (act != "silu")
    r.fail("hidden_act", absl::StrCat("unsupported activation '", act, "'; supported: silu"));

  bool attention_bias = false;
  r.boolean("attention_bias", &attention_bias);
  if (c.model_type == "qwen2") {
    c.qkv_bias = true;  // Qwen2 has q/k/v biases and no o_proj bias, with no config key for it
    bool sliding = false;
    r.boolean("use_sliding_window", &sliding);
    if (sliding) r.fail("use_sliding_window", "sliding-window attention is not supported");
  } else {
    c.qkv_bias = attention_bias;
    c.o_bias = attention_bias;
  }
  c.qk_norm = c.model_type == "qwen3" || c.model_type == "qwen3_moe";
  if (c.model_type == "qwen3_moe") {
    bool sliding = false;
    r.boolean("use_sliding_window", &sliding);
    if (sliding) r.fail("use_sliding_window", "sliding-window attention is not supported");
    r.integer("num_experts", &c.num_experts, true);
    r.integer("num_experts_per_tok", &c.num_experts_per_tok, true);
    r.integer("moe_intermediate_size", &c.moe_intermediate_size, true);
    r.integer("decoder_sparse_step", &c.decoder_sparse_step, false);
    r.boolean("norm_topk_prob", &c.norm_topk_prob);
    r.ids("mlp_only_layers", &c.mlp_only_layers);
    r.number("router_aux_loss_coef", &c.router_aux_loss_coef);
    r.boolean("output_router_logits", &c.output_router_logits);
  }
  bool mlp_bias = false;
  r.boolean("mlp_bias", &mlp_bias);
  if (mlp_bias) r.fail("mlp_bias", "MLP biases are not supported");

  if (const core::Json* scaling = json.find("rope_scaling"); scaling && !scaling->is_null()) {
    std::string type;
    if (const core::Json* t = scaling->find("rope_type"); t && t->is_string())
      type = t->as_string();
    if (const core::Json* t = scaling->find("type"); type.empty() && t && t->is_string()) {
      type = t->as_string();
    }
    if (type == "llama3") {
      c.has_llama3_rope_scaling = true;
      KeyReader s(*scaling, source + " rope_scaling");
      s.number("factor", &c.rope_scaling.factor);
      s.number("low_freq_factor", &c.rope_scaling.low_freq_factor);
      s.number("high_freq_factor", &c.rope_scaling.high_freq_factor);
      s.integer("original_max_position_embeddings",
                &c.rope_scaling.original_max_position_embeddings, false);
      if (!s.status().ok()) return s.status();
    } else if (type != "default") {
      r.fail("rope_scaling", absl::StrCat("unsupported rope_scaling type '", type,
                                          "'; supported: llama3 (or null)"));
    }
  }
  if (!r.status().ok()) return r.status();
  absl::Status valid = c.validate();
  if (!valid.ok()) return absl::InvalidArgumentError(absl::StrCat(source, ": ", valid.message()));
  return c;
}

absl::StatusOr<ModelConfig> ModelConfig::from_file(const std::string& path) {
  absl::StatusOr<core::Json> json = core::read_json_file(path);
  if (absl::IsNotFound(json.status())) {
    return absl::NotFoundError(absl::StrCat("cannot read model config '", path, "'"));
  }
  if (!json.ok()) return json.status();
  return from_json(*json, path);
}

absl::Status ModelConfig::validate() const {
  using Bound = std::tuple<const char*, int64_t, int64_t>;
  for (const auto& [key, value, limit] :
       {Bound{"vocab_size", vocab_size, kMaxVocabSize},
        Bound{"hidden_size", hidden_size, kMaxHiddenSize},
        Bound{"intermediate_size", intermediate_size, kMaxIntermediateSize},
        Bound{"num_hidden_layers", num_hidden_layers, kMaxLayers},
        Bound{"num_attention_heads", num_attention_heads, kMaxHeads},
        Bound{"num_key_value_heads", num_key_value_heads, kMaxHeads},
        Bound{"head_dim", head_dim, kMaxHeadDim},
        Bound{"max_position_embeddings", max_position_embeddings, kMaxPositionEmbeddings}}) {
    FLYWHEEL_RETURN_IF_ERROR(bounded(key, value, limit));
  }
  if (num_attention_heads % num_key_value_heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat("num_attention_heads (", num_attention_heads,
                                                   ") must be a multiple of num_key_value_heads (",
                                                   num_key_value_heads, ")"));
  }
  if (head_dim % 2 != 0) return absl::InvalidArgumentError("head_dim must be even (RoPE)");
  FLYWHEEL_RETURN_IF_ERROR(validate_experts());
  if (const int64_t n = num_parameters(); n > kMaxParameters) {
    return absl::InvalidArgumentError(absl::StrCat(
        "vocab_size ", vocab_size, ", hidden_size ", hidden_size, ", intermediate_size ",
        intermediate_size, " and num_hidden_layers ", num_hidden_layers, " make ",
        n == std::numeric_limits<int64_t>::max() ? "over 9.2e18" : absl::StrCat(n),
        " parameters, more than the limit of ", kMaxParameters));
  }
  FLYWHEEL_RETURN_IF_ERROR(positive_finite("rms_norm_eps", rms_norm_eps));
  FLYWHEEL_RETURN_IF_ERROR(positive_finite("rope_theta", rope_theta));
  if (!(initializer_range >= 0) || !std::isfinite(initializer_range)) {
    return absl::InvalidArgumentError(
        absl::StrCat("initializer_range must be a finite number >= 0, got ", initializer_range));
  }
  if (has_llama3_rope_scaling) {
    const Llama3RopeScaling& s = rope_scaling;
    FLYWHEEL_RETURN_IF_ERROR(positive_finite("rope_scaling.factor", s.factor));
    FLYWHEEL_RETURN_IF_ERROR(positive_finite("rope_scaling.low_freq_factor", s.low_freq_factor));
    FLYWHEEL_RETURN_IF_ERROR(positive_finite("rope_scaling.high_freq_factor", s.high_freq_factor));
    if (!(s.high_freq_factor > s.low_freq_factor)) {  // the smoothed band divides by the gap
      return absl::InvalidArgumentError(absl::StrCat(
          "rope_scaling.high_freq_factor (", s.high_freq_factor,
          ") must be greater than rope_scaling.low_freq_factor (", s.low_freq_factor, ")"));
    }
    FLYWHEEL_RETURN_IF_ERROR(bounded("rope_scaling.original_max_position_embeddings",
                                     s.original_max_position_embeddings, kMaxPositionEmbeddings));
  }
  return absl::OkStatus();
}

absl::Status ModelConfig::validate_experts() const {
  if (num_experts == 0) return absl::OkStatus();
  if (model_type != "qwen3_moe") {
    return absl::InvalidArgumentError(
        absl::StrCat("num_experts ", num_experts, " needs model_type qwen3_moe, not ", model_type));
  }
  FLYWHEEL_RETURN_IF_ERROR(bounded("num_experts", num_experts, kMaxExperts));
  FLYWHEEL_RETURN_IF_ERROR(bounded("num_experts_per_tok", num_experts_per_tok, num_experts));
  FLYWHEEL_RETURN_IF_ERROR(
      bounded("moe_intermediate_size", moe_intermediate_size, kMaxIntermediateSize));
  FLYWHEEL_RETURN_IF_ERROR(bounded("decoder_sparse_step", decoder_sparse_step, kMaxLayers));
  for (int64_t layer : mlp_only_layers) {
    if (layer < 0 || layer >= num_hidden_layers) {
      return absl::InvalidArgumentError(
          absl::StrCat("mlp_only_layers: layer ", layer, " outside [0, ", num_hidden_layers, ")"));
    }
  }
  if (!(router_aux_loss_coef >= 0) || !std::isfinite(router_aux_loss_coef)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "router_aux_loss_coef must be a finite number >= 0, got ", router_aux_loss_coef));
  }
  return absl::OkStatus();
}

bool ModelConfig::is_moe_layer(int64_t layer) const {
  if (num_experts <= 0 || decoder_sparse_step <= 0) return false;
  for (int64_t dense : mlp_only_layers) {
    if (dense == layer) return false;
  }
  return (layer + 1) % decoder_sparse_step == 0;
}

int64_t ModelConfig::num_moe_layers() const {
  int64_t n = 0;
  for (int64_t i = 0; i < num_hidden_layers; ++i) n += is_moe_layer(i) ? 1 : 0;
  return n;
}

core::Json ModelConfig::to_json() const {
  core::Json j = core::Json::object();
  static const std::map<std::string, std::string> kArchitecture = {
      {"qwen2", "Qwen2ForCausalLM"},
      {"qwen3", "Qwen3ForCausalLM"},
      {"qwen3_moe", "Qwen3MoeForCausalLM"},
      {"llama", "LlamaForCausalLM"}};
  auto arch = kArchitecture.find(model_type);
  j.set(
      "architectures",
      core::Json::array({core::Json(arch == kArchitecture.end() ? std::string() : arch->second)}));
  j.set("model_type", core::Json(model_type));
  j.set("vocab_size", core::Json(vocab_size));
  j.set("hidden_size", core::Json(hidden_size));
  j.set("intermediate_size", core::Json(intermediate_size));
  j.set("num_hidden_layers", core::Json(num_hidden_layers));
  j.set("num_attention_heads", core::Json(num_attention_heads));
  j.set("num_key_value_heads", core::Json(num_key_value_heads));
  j.set("head_dim", core::Json(head_dim));
  j.set("hidden_act", core::Json("silu"));
  j.set("rms_norm_eps", core::Json(rms_norm_eps));
  j.set("rope_theta", core::Json(rope_theta));
  if (has_llama3_rope_scaling) {
    core::Json s = core::Json::object();
    s.set("rope_type", core::Json("llama3"));
    s.set("factor", core::Json(rope_scaling.factor));
    s.set("low_freq_factor", core::Json(rope_scaling.low_freq_factor));
    s.set("high_freq_factor", core::Json(rope_scaling.high_freq_factor));
    s.set("original_max_position_embeddings",
          core::Json(rope_scaling.original_max_position_embeddings));
    j.set("rope_scaling", std::move(s));
  } else {
    j.set("rope_scaling", core::Json());
  }
  j.set("max_position_embeddings", core::Json(max_position_embeddings));
  j.set("tie_word_embeddings", core::Json(tie_word_embeddings));
  if (model_type != "qwen2") j.set("attention_bias", core::Json(qkv_bias));
  if (model_type == "qwen2" || model_type == "qwen3_moe") {
    j.set("use_sliding_window", core::Json(false));
  }
  if (model_type == "qwen3_moe") {
    j.set("num_experts", core::Json(num_experts));
    j.set("num_experts_per_tok", core::Json(num_experts_per_tok));
    j.set("moe_intermediate_size", core::Json(moe_intermediate_size));
    j.set("decoder_sparse_step", core::Json(decoder_sparse_step));
    j.set("norm_topk_prob", core::Json(norm_topk_prob));
    core::Json dense = core::Json::array();
    for (int64_t layer : mlp_only_layers) dense.push_back(core::Json(layer));
    j.set("mlp_only_layers", std::move(dense));
    j.set("router_aux_loss_coef", core::Json(router_aux_loss_coef));
    j.set("output_router_logits", core::Json(output_router_logits));
  }
  j.set("initializer_range", core::Json(initializer_range));
  j.set("torch_dtype", core::Json(torch_dtype));
  auto ids = [](const std::vector<int64_t>& v) {
    if (v.size() == 1) return core::Json(v[0]);
    core::Json a = core::Json::array();
    for (int64_t id : v) a.push_back(core::Json(id));
    return v.empty() ? core::Json() : a;
  };
  j.set("bos_token_id", ids(bos_token_ids));
  j.set("eos_token_id", ids(eos_token_ids));
  return j;
}

int64_t ModelConfig::num_parameters() const {
  const int64_t q = mul_sat(num_attention_heads, head_dim);
  const int64_t kv = mul_sat(num_key_value_heads, head_dim);
  int64_t attention = mul_sat(hidden_size, add_sat(mul_sat(2, q), mul_sat(2, kv)));  // q k v o
  if (qkv_bias) attention = add_sat(attention, add_sat(q, mul_sat(2, kv)));
  if (o_bias) attention = add_sat(attention, hidden_size);
  if (qk_norm) attention = add_sat(attention, mul_sat(2, head_dim));
  const int64_t mlp = mul_sat(3, mul_sat(hidden_size, intermediate_size));
  // A sparse layer: the router [num_experts, hidden] and each expert's three projections.
  const int64_t experts = mul_sat(
      num_experts, add_sat(hidden_size, mul_sat(3, mul_sat(hidden_size, moe_intermediate_size))));
  const int64_t norms = mul_sat(2, hidden_size);
  const int64_t moe_layers = num_moe_layers(), dense_layers = num_hidden_layers - moe_layers;
  const int64_t layers = add_sat(mul_sat(dense_layers, add_sat(add_sat(attention, mlp), norms)),
                                 mul_sat(moe_layers, add_sat(add_sat(attention, experts), norms)));
  const int64_t embeddings = mul_sat(mul_sat(vocab_size, hidden_size), tie_word_embeddings ? 1 : 2);
  return add_sat(add_sat(layers, embeddings), hidden_size);
}

}  // namespace flywheel::model
