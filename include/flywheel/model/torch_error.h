// The message of an exception thrown through LibTorch (c10::Error without its C++ backtrace, or
// any std::exception's what()), for errors that name what failed.
#pragma once

#include <exception>
#include <string>

namespace flywheel::model {

std::string exception_message(const std::exception& e);

}  // namespace flywheel::model
