#include "flywheel/model/safetensors.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <ATen/ATen.h>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/scratch_dir.h"

namespace flywheel::model {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

class SafetensorsTest : public ::testing::Test {
 protected:
  std::string path(const std::string& name) const { return scratch_.sub(name); }

  // A file with the given header text and `data_bytes` bytes of data.
  std::string raw(const std::string& name, const std::string& header, size_t data_bytes,
                  int64_t declared_size = -1) {
    std::string bytes(8, '\0');
    uint64_t n = declared_size >= 0 ? static_cast<uint64_t>(declared_size) : header.size();
    std::memcpy(bytes.data(), &n, 8);
    bytes += header;
    bytes.append(data_bytes, '\x01');
    std::ofstream(path(name), std::ios::binary) << bytes;
    return path(name);
  }

  std::string error(const std::string& file) {
    auto opened = SafetensorsFile::open(file);
    EXPECT_FALSE(opened.ok());
    return opened.ok() ? "" : std::string(opened.status().message());
  }

  flywheel::testing::ScratchDir scratch_{"flywheel_st"};
  const fs::path& dir_ = scratch_.path();
};

std::string read_all(const std::string& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST_F(SafetensorsTest, RoundTripsEveryDtypeAndShape) {
  at::Tensor f32 = at::arange(12, at::kFloat).view({3, 4});
  at::Tensor bf16 = at::linspace(-2, 2, 5).to(at::kBFloat16);
  at::Tensor f16 = at::tensor(std::vector<float>{0.5f, -1.25f}).to(at::kHalf);
  at::Tensor scalar = at::scalar_tensor(3.5, at::kFloat);
  at::Tensor empty = at::zeros({0, 7});
  absl::Status written = write_safetensors(
      path("a.safetensors"),
      {{"w.f32", f32.t()}, {"b.bf16", bf16}, {"c.f16", f16}, {"s", scalar}, {"e", empty}});
  ASSERT_TRUE(written.ok()) << written;
  auto file = SafetensorsFile::open(path("a.safetensors"));
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ((*file)->entries().size(), 5u);
  EXPECT_EQ((*file)->metadata().at("format"), "pt");
  EXPECT_TRUE(at::equal(*(*file)->tensor("w.f32"), f32.t()));
  EXPECT_TRUE(at::equal(*(*file)->tensor("b.bf16"), bf16));
  EXPECT_TRUE(at::equal(*(*file)->tensor("c.f16"), f16));
  EXPECT_EQ((*file)->tensor("s")->dim(), 0);
  EXPECT_EQ((*file)->tensor("e")->sizes(), (std::vector<int64_t>{0, 7}));
  EXPECT_EQ((*file)->tensor("nope").status().code(), absl::StatusCode::kNotFound);
}

TEST_F(SafetensorsTest, HeaderIsPaddedAndOutputIsDeterministic) {
  std::vector<std::pair<std::string, at::Tensor>> t = {{"z", at::ones({3})}, {"a", at::zeros({2})}};
  ASSERT_TRUE(write_safetensors(path("1.safetensors"), t).ok());
  auto file = SafetensorsFile::open(path("1.safetensors"));
  ASSERT_TRUE(file.ok());
  // Rewrite what was read: byte-identical.
  std::vector<std::pair<std::string, at::Tensor>> again;
  for (const auto& e : (*file)->entries()) again.emplace_back(e.name, *(*file)->tensor(e.name));
  ASSERT_TRUE(write_safetensors(path("2.safetensors"), again).ok());
  std::string a = read_all(path("1.safetensors")), b = read_all(path("2.safetensors"));
  EXPECT_EQ(a, b);
  uint64_t header;
  std::memcpy(&header, a.data(), 8);
  EXPECT_EQ(header % 8, 0u);
  EXPECT_THAT(a.substr(8, header), HasSubstr("\"a\":{\"dtype\":\"F32\""));
}

TEST_F(SafetensorsTest, MappedTensorsOutliveTheFileObject) {
  ASSERT_TRUE(write_safetensors(path("m.safetensors"), {{"x", at::arange(4, at::kFloat)}}).ok());
  at::Tensor x;
  {
    auto file = SafetensorsFile::open(path("m.safetensors"));
    x = *(*file)->tensor("x");
  }
  EXPECT_EQ(x[3].item<float>(), 3.0f);
}

TEST_F(SafetensorsTest, CorruptFilesAreErrorsNotCrashes) {
  EXPECT_THAT(error(path("missing")), HasSubstr("cannot open"));
  std::ofstream(path("tiny"), std::ios::binary) << "abc";
  EXPECT_THAT(error(path("tiny")), HasSubstr("truncated"));
  EXPECT_THAT(error(raw("huge", "{}", 0, /*declared=*/int64_t{1} << 40)),
              HasSubstr("exceeds the limit"));
  EXPECT_THAT(error(raw("short", "{}", 0, /*declared=*/4096)), HasSubstr("truncated: header"));
  EXPECT_THAT(error(raw("json", "{\"a\": ", 0)), HasSubstr("malformed header JSON"));
  EXPECT_THAT(error(raw("list", "[]", 0)), HasSubstr("not a JSON object"));
  EXPECT_THAT(error(raw("dtype", R"({"a":{"dtype":"F64","shape":[1],"data_offsets":[0,8]}})", 8)),
              HasSubstr("unsupported safetensors dtype 'F64'"));
  EXPECT_THAT(error(raw("beyond", R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 8)),
              HasSubstr("beyond the data section"));
  EXPECT_THAT(error(raw("size", R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,16]}})", 16)),
              HasSubstr("need a different size"));
  EXPECT_THAT(error(raw("neg", R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", 4)),
              HasSubstr("invalid shape"));
  EXPECT_THAT(error(raw("order", R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[8,4]}})", 8)),
              HasSubstr("invalid data_offsets"));
  EXPECT_THAT(
      error(raw(
          "overlap",
          R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
          12)),
      HasSubstr("overlap"));
  EXPECT_THAT(
      error(raw("overflow",
                R"({"a":{"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,16]}})",
                16)),
      HasSubstr("need a different size"));
  EXPECT_THAT(error(raw("fields", R"({"a":{"dtype":"F32"}})", 0)), HasSubstr("needs dtype, shape"));
}

TEST_F(SafetensorsTest, TruncatedRealFileIsAnError) {
  ASSERT_TRUE(write_safetensors(path("t.safetensors"), {{"x", at::ones({64})}}).ok());
  std::string bytes = read_all(path("t.safetensors"));
  std::ofstream(path("cut.safetensors"), std::ios::binary) << bytes.substr(0, bytes.size() - 10);
  EXPECT_THAT(error(path("cut.safetensors")), HasSubstr("beyond the data section"));
}

TEST_F(SafetensorsTest, SpecialFilesAreRefusedWithoutBlocking) {
  // A FIFO without a writer: opening it for reading must not wait for one.
  ASSERT_EQ(mkfifo(path("fifo.safetensors").c_str(), 0600), 0);
  EXPECT_THAT(error(path("fifo.safetensors")), HasSubstr("not a regular file"));
  EXPECT_THAT(error(dir_.string()), HasSubstr("not a regular file"));
  EXPECT_THAT(error("/dev/zero"), HasSubstr("not a regular file"));
}

TEST_F(SafetensorsTest, UnsupportedDtypeCannotBeWritten) {
  EXPECT_EQ(write_safetensors(path("x"), {{"i", at::ones({2}, at::kLong)}}).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace flywheel::model
