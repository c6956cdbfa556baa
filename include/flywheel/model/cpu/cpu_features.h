// What the CPU this process runs on offers, and the compute dtype `auto` picks from it.
//
// bfloat16 GEMMs run natively (oneDNN with AVX512-BF16 or AMX-BF16) several times faster than
// float32 on CPUs that have those instructions, and are emulated, slower than float32 at batch
// >= 32, on CPUs that do not. `dtype: auto` therefore depends on the running CPU.
#pragma once

#include <string>

#include <c10/core/ScalarType.h>

#include "absl/status/statusor.h"

namespace flywheel::model {

struct CpuFeatures {
  std::string model_name;    // /proc/cpuinfo "model name"; "unknown" where there is none
  bool native_bf16 = false;  // AVX512-BF16 or AMX-BF16, with the OS saving their registers
};

// Detects the features of this CPU (cpuid and /proc/cpuinfo; no caching, cheap). On other
// architectures than x86-64, native_bf16 is false.
CpuFeatures detect_cpu_features();

// The line printed at start, e.g. "AMD EPYC, native bf16: yes".
std::string describe(const CpuFeatures& features);

// The compute dtype for `name`: "auto" is bfloat16 when `on_cuda` or `native_bf16`, float32
// otherwise; any other name as parse_dtype (InvalidArgument for an unknown one). Pure: callers
// pass detect_cpu_features().native_bf16, tests pass either.
absl::StatusOr<at::ScalarType> resolve_dtype(const std::string& name, bool on_cuda,
                                             bool native_bf16);

// resolve_dtype on this machine's CPU.
absl::StatusOr<at::ScalarType> resolve_dtype(const std::string& name, bool on_cuda);

}  // namespace flywheel::model
