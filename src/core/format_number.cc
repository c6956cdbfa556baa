#include "format_number.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace flywheel::core {

std::string format_number(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[40];
  if (v == std::trunc(v) && std::fabs(v) < 1e15) {  // integral: "10", not "1e+01"
    std::snprintf(buf, sizeof(buf), "%.0f", v);
    return buf;
  }
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof(buf), "%.*g", precision, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  return buf;
}

}  // namespace flywheel::core
