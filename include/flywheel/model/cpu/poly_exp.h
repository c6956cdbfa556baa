// exp(x) for float32 lanes, written so that a loop of it vectorises (no calls, no branches):
// exp(x) = 2^n p(r), r = x - n ln 2 in [-ln 2 / 2, ln 2 / 2] (ln 2 in two parts, Cody-Waite), p
// the degree-7 Taylor polynomial (truncation error below 1e-8 relative): within 2 float32 ulps.
#pragma once

#include <cstdint>
#include <cstring>

namespace flywheel::model {

// The argument range of poly_exp: below it 2^n is not a normal float, above it not finite.
constexpr float kPolyExpMin = -87.0f, kPolyExpMax = 88.0f;

// exp(x) for x in [kPolyExpMin, kPolyExpMax]; callers clamp. Static: every translation unit
// keeps its own copy, compiled for that unit's instruction set (the small_gemm_<isa>.cc kernels,
// target_clones loops), so that no unit can be linked to another's AVX-512 copy.
__attribute__((always_inline)) static inline float poly_exp(float x) {
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2Hi = 0.693359375f, kLn2Lo = -2.12194440e-4f;
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: x + kRound - kRound rounds x to an integer
  const float k = (x * kLog2e + kRound) - kRound;
  const float r = (x - k * kLn2Hi) - k * kLn2Lo;
  float p = 1.0f / 5040;
  p = p * r + 1.0f / 720;
  p = p * r + 1.0f / 120;
  p = p * r + 1.0f / 24;
  p = p * r + 1.0f / 6;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const int32_t bits = (static_cast<int32_t>(k) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  return p * scale;
}

}  // namespace flywheel::model
