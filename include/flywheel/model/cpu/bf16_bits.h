// bfloat16 as uint16_t bit patterns, converted to and from float32 in plain code that vectorises.
// float32 -> bfloat16 rounds to nearest even, as c10::BFloat16 (and so LibTorch) rounds, and
// keeps a NaN a quiet NaN. Static and always inlined: every translation unit keeps its own copy,
// compiled for that unit's instruction set (the small_gemm_<isa>.cc kernels, target_clones loops).
#pragma once

#include <cstdint>
#include <cstring>

namespace flywheel::model {

__attribute__((always_inline)) static inline float bf16_to_float(uint16_t bits) {
  const uint32_t wide = static_cast<uint32_t>(bits) << 16;
  float x;
  std::memcpy(&x, &wide, sizeof(x));
  return x;
}

__attribute__((always_inline)) static inline uint16_t float_to_bf16(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof(bits));
  const uint32_t rounded = (bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16;
  return static_cast<uint16_t>((bits & 0x7fffffffu) > 0x7f800000u ? 0x7fc0u : rounded);
}

}  // namespace flywheel::model
