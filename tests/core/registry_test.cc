#include "flywheel/core/registry.h"

#include <stdexcept>

#include "flywheel/core/plugin_registry.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace flywheel::core {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

struct Shape {
  static constexpr char kRegistryKind[] = "shape";
  virtual ~Shape() = default;
  virtual int sides() const = 0;
};

struct Polygon : Shape {
  explicit Polygon(int n) : n(n) {}
  int sides() const override { return n; }
  int n;
};

using ShapeRegistry = Registry<Shape, int>;

absl::StatusOr<std::unique_ptr<Shape>> make_polygon(int n) {
  if (n < 3) return absl::InvalidArgumentError("a polygon has at least 3 sides");
  return std::make_unique<Polygon>(n);
}

TEST(RegistryTest, CreatesByNameWithArguments) {
  ShapeRegistry registry("shape");
  ASSERT_TRUE(registry.add("polygon", &make_polygon).ok());
  absl::StatusOr<std::unique_ptr<Shape>> shape = registry.create("polygon", 5);
  ASSERT_TRUE(shape.ok()) << shape.status();
  EXPECT_EQ((*shape)->sides(), 5);
  EXPECT_TRUE(registry.contains("polygon"));
}

TEST(RegistryTest, FactoryErrorsPassThrough) {
  ShapeRegistry registry("shape");
  ASSERT_TRUE(registry.add("polygon", &make_polygon).ok());
  EXPECT_EQ(registry.create("polygon", 2).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(RegistryTest, DuplicateNameIsRejectedAndKeepsTheFirst) {
  ShapeRegistry registry("shape");
  ASSERT_TRUE(registry.add("polygon", &make_polygon).ok());
  absl::Status status = registry.add("polygon", [](int) -> absl::StatusOr<std::unique_ptr<Shape>> {
    return std::make_unique<Polygon>(99);
  });
  EXPECT_EQ(status.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("shape 'polygon' is already registered (by built-in)"));
  EXPECT_EQ((*registry.create("polygon", 4))->sides(), 4);
}

TEST(RegistryTest, EmptyNameIsRejected) {
  ShapeRegistry registry("shape");
  EXPECT_EQ(registry.add("", &make_polygon).code(), absl::StatusCode::kInvalidArgument);
}

TEST(RegistryTest, UnknownNameListsKnownNamesAndSuggests) {
  ShapeRegistry registry("shape");
  ASSERT_TRUE(registry.add("polygon", &make_polygon).ok());
  ASSERT_TRUE(registry.add("circle", &make_polygon).ok());
  absl::Status status = registry.create("polygn", 3).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(status.message(),
            "unknown shape 'polygn'; known: circle, polygon; did you mean 'polygon'?");
}

TEST(RegistryTest, ThrowingFactoryBecomesInternalError) {
  ShapeRegistry registry("shape");
  ASSERT_TRUE(registry
                  .add("bad",
                       [](int) -> absl::StatusOr<std::unique_ptr<Shape>> {
                         throw std::runtime_error("boom");
                       })
                  .ok());
  absl::Status status = registry.create("bad", 3).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(std::string(status.message()), HasSubstr("boom"));
}

TEST(RegistryTest, NamesAreSorted) {
  ShapeRegistry registry("shape");
  ASSERT_TRUE(registry.add("b", &make_polygon).ok());
  ASSERT_TRUE(registry.add("a", &make_polygon).ok());
  EXPECT_THAT(registry.names(), ElementsAre("a", "b"));
}

TEST(PluginRegistryTest, GetReturnsOneRegistryPerKind) {
  PluginRegistry plugins;
  auto& first = plugins.get<Shape, int>();
  ASSERT_TRUE(first.add("polygon", &make_polygon).ok());
  auto& second = plugins.get<Shape, int>();
  EXPECT_EQ(&first, &second);
  EXPECT_THAT(plugins.kinds(), ElementsAre("shape"));
  EXPECT_THAT(plugins.names("shape"), ElementsAre("polygon"));
  EXPECT_TRUE(plugins.names("nothing").empty());
}

}  // namespace
}  // namespace flywheel::core
