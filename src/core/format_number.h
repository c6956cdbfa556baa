// Shortest text that reads back as the same double ("1e-06", "0.2", "3").
#pragma once

#include <string>

namespace flywheel::core {

std::string format_number(double v);

}  // namespace flywheel::core
