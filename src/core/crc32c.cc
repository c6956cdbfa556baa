#include "flywheel/core/crc32c.h"

#include <array>
#include <cstring>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace flywheel::core {
namespace {

constexpr uint32_t kPolynomial = 0x82F63B78u;  // reversed Castagnoli polynomial

constexpr std::array<uint32_t, 256> make_table() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t crc = i;
    for (int bit = 0; bit < 8; ++bit) crc = (crc >> 1) ^ ((crc & 1u) ? kPolynomial : 0u);
    table[i] = crc;
  }
  return table;
}

constexpr std::array<uint32_t, 256> kTable = make_table();

// The table CRC-32C of `size` bytes continuing from `crc` (the fallback without a crc32
// instruction).
uint32_t crc32c_table(uint32_t crc, const void* data, size_t size) {
  const auto* bytes = static_cast<const unsigned char*>(data);
  crc = ~crc;
  for (size_t i = 0; i < size; ++i) crc = kTable[(crc ^ bytes[i]) & 0xFFu] ^ (crc >> 8);
  return ~crc;
}

// GF(2) 32x32 matrices acting on a CRC register (zlib's crc32_combine).
uint32_t gf2_times(const uint32_t* mat, uint32_t vec) {
  uint32_t sum = 0;
  for (; vec != 0; vec >>= 1, ++mat) {
    if (vec & 1u) sum ^= *mat;
  }
  return sum;
}

void gf2_square(uint32_t* square, const uint32_t* mat) {
  for (int n = 0; n < 32; ++n) square[n] = gf2_times(mat, mat[n]);
}

#if defined(__x86_64__)
bool have_crc_instruction() {
  static const bool have = __builtin_cpu_supports("sse4.2");
  return have;
}

// The register (not inverted) after `size` bytes, starting from `state`.
__attribute__((target("sse4.2"))) uint32_t crc32c_hw(uint32_t state, const unsigned char* p,
                                                     size_t size) {
  uint64_t c = state;
  for (; size > 0 && (reinterpret_cast<uintptr_t>(p) & 7u) != 0; --size) {
    c = _mm_crc32_u8(static_cast<uint32_t>(c), *p++);
  }
  for (; size >= 32; size -= 32, p += 32) {
    uint64_t v[4];
    std::memcpy(v, p, sizeof(v));
    c = _mm_crc32_u64(c, v[0]);
    c = _mm_crc32_u64(c, v[1]);
    c = _mm_crc32_u64(c, v[2]);
    c = _mm_crc32_u64(c, v[3]);
  }
  for (; size >= 8; size -= 8, p += 8) {
    uint64_t v;
    std::memcpy(&v, p, sizeof(v));
    c = _mm_crc32_u64(c, v);
  }
  for (; size > 0; --size) c = _mm_crc32_u8(static_cast<uint32_t>(c), *p++);
  return static_cast<uint32_t>(c);
}
#endif

}  // namespace

uint32_t crc32c(const void* data, size_t size) { return crc32c_table(0, data, size); }

uint32_t crc32c_combine(uint32_t crc_a, uint32_t crc_b, uint64_t size_b) {
  if (size_b == 0) return crc_a;
  uint32_t even[32];  // operator for an even power of two zero bits
  uint32_t odd[32];   // and for an odd one
  odd[0] = kPolynomial;
  uint32_t row = 1;
  for (int n = 1; n < 32; ++n, row <<= 1) odd[n] = row;
  gf2_square(even, odd);  // 2 zero bits
  gf2_square(odd, even);  // 4 zero bits
  // Applies size_b zero bytes to crc_a, one bit of size_b at a time (the first square gives 8).
  do {
    gf2_square(even, odd);
    if (size_b & 1u) crc_a = gf2_times(even, crc_a);
    size_b >>= 1;
    if (size_b == 0) break;
    gf2_square(odd, even);
    if (size_b & 1u) crc_a = gf2_times(odd, crc_a);
    size_b >>= 1;
  } while (size_b != 0);
  return crc_a ^ crc_b;
}

uint32_t crc32c_extend(uint32_t crc, const void* data, size_t size) {
#if defined(__x86_64__)
  if (have_crc_instruction()) {
    return ~crc32c_hw(~crc, static_cast<const unsigned char*>(data), size);
  }
#endif
  return crc32c_table(crc, data, size);
}

}  // namespace flywheel::core
