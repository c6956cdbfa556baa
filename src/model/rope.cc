// RoPE frequencies and tables (rope.h).
#include "flywheel/model/rope.h"

#include <cmath>
#include <vector>

#include <ATen/ATen.h>

namespace flywheel::model {

at::Tensor rope_inverse_frequencies(const ModelConfig& config) {
  const int64_t half = config.head_dim / 2;
  std::vector<float> inv(half);
  for (int64_t i = 0; i < half; ++i) {
    // Same float32 arithmetic order as transformers: base ** (arange(0, dim, 2) / dim).
    float exponent = static_cast<float>(2 * i) / static_cast<float>(config.head_dim);
    inv[i] = 1.0f / std::pow(static_cast<float>(config.rope_theta), exponent);
  }
  if (config.has_llama3_rope_scaling) {
    const auto& s = config.rope_scaling;
    const double low_wavelen = s.original_max_position_embeddings / s.low_freq_factor;
    const double high_wavelen = s.original_max_position_embeddings / s.high_freq_factor;
    for (int64_t i = 0; i < half; ++i) {
      const double wavelen = 2 * M_PI / inv[i];
      if (wavelen > low_wavelen) {
        inv[i] = static_cast<float>(inv[i] / s.factor);
      } else if (wavelen >= high_wavelen) {  // medium band: smooth interpolation
        const double smooth = (s.original_max_position_embeddings / wavelen - s.low_freq_factor) /
                              (s.high_freq_factor - s.low_freq_factor);
        inv[i] = static_cast<float>((1 - smooth) * inv[i] / s.factor + smooth * inv[i]);
      }
    }
  }
  return at::tensor(inv, at::kFloat);
}

std::pair<at::Tensor, at::Tensor> rope_tables(const at::Tensor& positions,
                                              const at::Tensor& inv_freq, at::ScalarType dtype) {
  if (positions.device().is_cpu()) {
    const at::Tensor pos = positions.to(at::kLong).contiguous();
    const at::Tensor inv = inv_freq.to(at::kFloat).contiguous();
    const int64_t n = pos.numel(), half = inv.numel();
    std::vector<int64_t> shape(positions.sizes().begin(), positions.sizes().end());
    shape.push_back(1);
    shape.push_back(2 * half);
    at::Tensor cos = at::empty(shape, at::kFloat), sin = at::empty(shape, at::kFloat);
    const int64_t* p = pos.data_ptr<int64_t>();
    const float* f = inv.data_ptr<float>();
    float *c = cos.data_ptr<float>(), *s = sin.data_ptr<float>();
    for (int64_t i = 0; i < n; ++i) {
      const float position = static_cast<float>(p[i]);
      for (int64_t j = 0; j < half; ++j) {
        const float angle = position * f[j];
        c[i * 2 * half + j] = c[i * 2 * half + half + j] = std::cos(angle);
        s[i * 2 * half + j] = s[i * 2 * half + half + j] = std::sin(angle);
      }
    }
    return {cos.to(dtype), sin.to(dtype)};
  }
  at::Tensor freqs = positions.to(at::kFloat).unsqueeze(-1) * inv_freq;  // [B, T, hd/2]
  at::Tensor emb = at::cat({freqs, freqs}, -1).unsqueeze(2);             // [B, T, 1, hd]
  return {emb.cos().to(dtype), emb.sin().to(dtype)};
}

}  // namespace flywheel::model
