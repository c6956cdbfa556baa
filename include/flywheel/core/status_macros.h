// Status propagation helpers (after Reverb's platform/default/status_macros.h).
#pragma once

#include "absl/status/status.h"
#include "absl/status/statusor.h"

// Returns from the enclosing function when `expr` (an absl::Status) is not OK.
#define FLYWHEEL_RETURN_IF_ERROR(expr)        \
  do {                                        \
    ::absl::Status flywheel_status_ = (expr); \
    if (!flywheel_status_.ok()) {             \
      return flywheel_status_;                \
    }                                         \
  } while (0)

#define FLYWHEEL_STATUS_CONCAT_INNER_(a, b) a##b
#define FLYWHEEL_STATUS_CONCAT_(a, b) FLYWHEEL_STATUS_CONCAT_INNER_(a, b)

// Evaluates `rexpr` (an absl::StatusOr<T>); returns its status when not OK, otherwise moves the
// value into `lhs` (which may be a declaration: `FLYWHEEL_ASSIGN_OR_RETURN(auto x, f());`).
#define FLYWHEEL_ASSIGN_OR_RETURN(lhs, rexpr) \
  FLYWHEEL_ASSIGN_OR_RETURN_IMPL_(FLYWHEEL_STATUS_CONCAT_(flywheel_statusor_, __LINE__), lhs, rexpr)

#define FLYWHEEL_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, rexpr) \
  auto statusor = (rexpr);                                    \
  if (!statusor.ok()) {                                       \
    return statusor.status();                                 \
  }                                                           \
  lhs = std::move(statusor).value()
