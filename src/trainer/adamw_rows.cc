#include "flywheel/trainer/adamw_rows.h"

#include <cmath>

namespace flywheel::trainer {

void adamw_update_rows(const AdamWRows& rows, const AdamWCoefficients& c) {
  // The tensor ops' scalars, as LibTorch casts them for float32 tensors.
  const float scale = static_cast<float>(c.grad_scale);
  const float decay = static_cast<float>(c.lr * c.weight_decay);
  const float b1 = static_cast<float>(c.beta1), one_minus_b1 = static_cast<float>(1 - c.beta1);
  const float b2 = static_cast<float>(c.beta2), one_minus_b2 = static_cast<float>(1 - c.beta2);
  const float root_bias2 = static_cast<float>(std::sqrt(c.bias2));
  const float eps = static_cast<float>(c.eps);
  const float step = static_cast<float>(-c.lr / c.bias1);
  float* __restrict p = rows.param;
  const float* __restrict grad = rows.grad;
  float* __restrict m = rows.exp_avg;
  float* __restrict v = rows.exp_avg_sq;
  const float* __restrict mask = rows.decay_mask;
  const bool decayed = mask != nullptr && decay != 0;
  for (int64_t i = 0; i < rows.n; ++i) {
    const float g = grad[i] * scale;
    float param = p[i];
    if (decayed) param *= 1.0f - decay * mask[i];
    const float mi = m[i] * b1 + g * one_minus_b1;
    const float vi = v[i] * b2 + one_minus_b2 * g * g;
    m[i] = mi;
    v[i] = vi;
    p[i] = param + step * (mi / (std::sqrt(vi) / root_bias2 + eps));
  }
}

}  // namespace flywheel::trainer
