#include "flywheel/core/crc32c.h"

#include <cstring>
#include <string>

#include "gtest/gtest.h"

namespace flywheel::core {
namespace {

TEST(Crc32cTest, MatchesKnownVectors) {
  EXPECT_EQ(crc32c("", 0), 0u);
  EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u);
  std::string zeros(32, '\0');
  EXPECT_EQ(crc32c(zeros.data(), zeros.size()), 0x8A9136AAu);  // RFC 3720 B.4
  std::string ones(32, '\xff');
  EXPECT_EQ(crc32c(ones.data(), ones.size()), 0x62A8AB43u);
}

TEST(Crc32cTest, MaskIsTfRecordsRotatePlusConstant) {
  uint32_t crc = 0x12345678u;
  EXPECT_EQ(mask_crc32c(crc), ((crc >> 15) | (crc << 17)) + 0xa282ead8u);
  EXPECT_NE(mask_crc32c(crc), crc);
}

}  // namespace
}  // namespace flywheel::core
