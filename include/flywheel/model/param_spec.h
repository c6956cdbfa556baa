// A parameter of a model: Hugging Face name and shape.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace flywheel::model {

struct ParamSpec {
  std::string name;
  std::vector<int64_t> shape;
};

}  // namespace flywheel::model
