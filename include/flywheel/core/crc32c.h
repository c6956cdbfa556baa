// CRC-32C (Castagnoli): whole buffers, continued and combined; and TFRecord's masked form.
#pragma once

#include <cstddef>
#include <cstdint>

namespace flywheel::core {

// CRC-32C of `size` bytes continuing from `crc`, the CRC-32C of the bytes before them (0 for
// none): crc32c_extend(crc32c_extend(0, A), B) == crc32c_extend(0, A + B). Uses the CPU's crc32
// instruction where it has one (~10x the table's speed).
uint32_t crc32c_extend(uint32_t crc, const void* data, size_t size);

// CRC-32C of `size` bytes from a table, byte by byte: crc32c("123456789") == 0xE3069283. The
// portable form (crc32c_extend's fallback, and the reference its instruction path is tested
// against); fine for small inputs.
uint32_t crc32c(const void* data, size_t size);

// The CRC-32C of A + B from crc32c(A), crc32c(B) and B's size, in O(log size_b).
uint32_t crc32c_combine(uint32_t crc_a, uint32_t crc_b, uint64_t size_b);

// TFRecord's masking: rotate right by 15 and add 0xa282ead8.
inline uint32_t mask_crc32c(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

}  // namespace flywheel::core
