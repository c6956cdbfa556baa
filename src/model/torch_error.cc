#include "flywheel/model/torch_error.h"

#include <c10/util/Exception.h>

namespace flywheel::model {

std::string exception_message(const std::exception& e) {
  const auto* torch_error = dynamic_cast<const c10::Error*>(&e);
  return torch_error ? torch_error->what_without_backtrace() : e.what();
}

}  // namespace flywheel::model
