// An independent float64 reference of the decoder families for tests: written literally from the
// Hugging Face modelling code's equations (a loop per head, per token and per expert), sharing
// nothing with decoder.cc but the parameters.
#pragma once

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "flywheel/model/decoder.h"
#include "flywheel/model/model_config.h"

namespace flywheel::model::testing {

// The tokens the decoder tests score.
inline const std::vector<int64_t> kTokens = {5, 17, 3, 88, 42, 42, 9, 60, 1, 33, 71, 96};

// One row of `tokens` at positions 0, 1, ...
inline ForwardBatch full_batch(const std::vector<int64_t>& tokens) {
  ForwardBatch b;
  const int64_t T = tokens.size();
  b.tokens = at::tensor(tokens, at::kLong).view({1, T});
  b.positions = at::arange(T, at::kLong).view({1, T});
  return b;
}

// The parameter `name` of m (undefined when it has none).
inline at::Tensor param(const DecoderModel& m, const std::string& name) {
  for (const auto& [n, p] : m.named_parameters()) {
    if (n == name) return p;
  }
  return {};
}

// Inverse frequencies written from the Llama 3 recipe in double precision.
inline std::vector<double> reference_inv_freq(const ModelConfig& c) {
  std::vector<double> inv;
  for (int64_t i = 0; i < c.head_dim / 2; ++i) {
    double f = 1.0 / std::pow(c.rope_theta, 2.0 * i / c.head_dim);
    if (c.has_llama3_rope_scaling) {
      const auto& s = c.rope_scaling;
      double wavelen = 2 * M_PI / f;
      double low = s.original_max_position_embeddings / s.low_freq_factor;
      double high = s.original_max_position_embeddings / s.high_freq_factor;
      if (wavelen > low) {
        f = f / s.factor;
      } else if (wavelen >= high) {
        double smooth = (s.original_max_position_embeddings / wavelen - s.low_freq_factor) /
                        (s.high_freq_factor - s.low_freq_factor);
        f = (1 - smooth) * f / s.factor + smooth * f;
      }
    }
    inv.push_back(f);
  }
  return inv;
}

inline at::Tensor ref_rms(const at::Tensor& x, const at::Tensor& w, double eps) {
  return w * (x / at::sqrt((x * x).mean(-1, true) + eps));
}

// Qwen3-MoE's sparse block for one token h [hidden], written from the Hugging Face modelling
// code's equations one expert at a time: softmax over the router's logits, the top-k experts,
// their probabilities renormalised when norm_topk_prob, and the weighted sum of their SwiGLU
// outputs.
inline at::Tensor reference_moe(const ModelConfig& c, const at::Tensor& h, const std::string& p,
                                const std::function<at::Tensor(const std::string&)>& P) {
  std::vector<double> probs(c.num_experts);
  double total = 0;
  const at::Tensor logits = at::matmul(P(p + "mlp.gate.weight"), h);
  for (int64_t e = 0; e < c.num_experts; ++e)
    total += probs[e] = std::exp(logits[e].item<double>());
  std::vector<int64_t> order(c.num_experts);
  for (int64_t e = 0; e < c.num_experts; ++e) order[e] = e;
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return probs[a] > probs[b]; });
  double chosen_total = 0;
  for (int64_t j = 0; j < c.num_experts_per_tok; ++j) chosen_total += probs[order[j]] / total;
  at::Tensor out = at::zeros_like(h);
  for (int64_t j = 0; j < c.num_experts_per_tok; ++j) {
    const int64_t e = order[j];
    double weight = probs[e] / total;
    if (c.norm_topk_prob) weight /= chosen_total;
    const std::string x = p + "mlp.experts." + std::to_string(e) + ".";
    at::Tensor g = at::matmul(P(x + "gate_proj.weight"), h);
    at::Tensor u = at::matmul(P(x + "up_proj.weight"), h);
    out = out + weight * at::matmul(P(x + "down_proj.weight"), g * at::sigmoid(g) * u);
  }
  return out;
}

// A literal, loop-per-head float64 implementation of the Hugging Face decoder for one sequence.
inline at::Tensor reference_logits(const DecoderModel& m, const std::vector<int64_t>& tokens) {
  const ModelConfig& c = m.config();
  const int64_t T = tokens.size(), hd = c.head_dim, half = hd / 2;
  const int64_t groups = c.num_attention_heads / c.num_key_value_heads;
  auto P = [&](const std::string& n) { return param(m, n).to(at::kDouble); };
  std::vector<double> inv = reference_inv_freq(c);
  at::Tensor cos = at::empty({T, hd}, at::kDouble), sin = at::empty({T, hd}, at::kDouble);
  for (int64_t p = 0; p < T; ++p) {
    for (int64_t i = 0; i < half; ++i) {
      cos[p][i] = cos[p][i + half] = std::cos(p * inv[i]);
      sin[p][i] = sin[p][i + half] = std::sin(p * inv[i]);
    }
  }
  auto rope = [&](at::Tensor x) {  // x [T, hd]: pairs (i, i + half)
    at::Tensor a = x.narrow(1, 0, half), b = x.narrow(1, half, half);
    at::Tensor c1 = cos.narrow(1, 0, half), s1 = sin.narrow(1, 0, half);
    return at::cat({a * c1 - b * s1, b * c1 + a * s1}, 1);
  };
  at::Tensor x = P("model.embed_tokens.weight").index_select(0, at::tensor(tokens, at::kLong));
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    at::Tensor h = ref_rms(x, P(p + "input_layernorm.weight"), c.rms_norm_eps);
    auto proj = [&](const std::string& name, bool bias) {
      at::Tensor y = at::matmul(h, P(p + "self_attn." + name + ".weight").t());
      return bias ? y + P(p + "self_attn." + name + ".bias") : y;
    };
    at::Tensor q = proj("q_proj", c.qkv_bias), k = proj("k_proj", c.qkv_bias),
               v = proj("v_proj", c.qkv_bias);
    std::vector<at::Tensor> heads;
    for (int64_t j = 0; j < c.num_attention_heads; ++j) {
      const int64_t kv = j / groups;
      at::Tensor qj = q.narrow(1, j * hd, hd), kj = k.narrow(1, kv * hd, hd),
                 vj = v.narrow(1, kv * hd, hd);
      if (c.qk_norm) {
        qj = ref_rms(qj, P(p + "self_attn.q_norm.weight"), c.rms_norm_eps);
        kj = ref_rms(kj, P(p + "self_attn.k_norm.weight"), c.rms_norm_eps);
      }
      qj = rope(qj);
      kj = rope(kj);
      at::Tensor s = at::matmul(qj, kj.t()) / std::sqrt(double(hd));
      s = s.masked_fill(at::ones({T, T}, at::kBool).triu(1), -INFINITY);
      heads.push_back(at::matmul(at::softmax(s, -1), vj));
    }
    at::Tensor attn = at::matmul(at::cat(heads, 1), P(p + "self_attn.o_proj.weight").t());
    if (c.o_bias) attn = attn + P(p + "self_attn.o_proj.bias");
    x = x + attn;
    h = ref_rms(x, P(p + "post_attention_layernorm.weight"), c.rms_norm_eps);
    if (c.is_moe_layer(l)) {
      std::vector<at::Tensor> rows;
      for (int64_t t = 0; t < T; ++t) rows.push_back(reference_moe(c, h[t], p, P));
      x = x + at::stack(rows);
      continue;
    }
    at::Tensor g = at::matmul(h, P(p + "mlp.gate_proj.weight").t());
    at::Tensor u = at::matmul(h, P(p + "mlp.up_proj.weight").t());
    x = x + at::matmul(g * at::sigmoid(g) * u, P(p + "mlp.down_proj.weight").t());
  }
  x = ref_rms(x, P("model.norm.weight"), c.rms_norm_eps);
  return at::matmul(x, m.lm_head_weight().to(at::kDouble).t());
}

}  // namespace flywheel::model::testing
