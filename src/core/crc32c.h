// CRC-32C (Castagnoli) and TFRecord's masked form.
#pragma once

#include <cstddef>
#include <cstdint>

namespace flywheel::core {

// CRC-32C of `size` bytes; crc32c("123456789") == 0xE3069283.
uint32_t crc32c(const void* data, size_t size);

// TFRecord's masking: rotate right by 15 and add 0xa282ead8.
inline uint32_t mask_crc32c(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

}  // namespace flywheel::core
