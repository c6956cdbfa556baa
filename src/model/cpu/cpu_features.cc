#include "flywheel/model/cpu/cpu_features.h"

#include <fstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "flywheel/model/hf_checkpoint.h"

#if defined(__x86_64__)
#include <cpuid.h>
#endif

namespace flywheel::model {
namespace {

struct Bf16Support {
  bool avx512_bf16 = false;
  bool amx_bf16 = false;
};

#if defined(__x86_64__)
uint64_t xcr0() {
  uint32_t eax = 0, edx = 0;
  __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
  return (static_cast<uint64_t>(edx) << 32) | eax;
}

Bf16Support detect_bf16() {
  Bf16Support s;
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx) || !(ecx & bit_OSXSAVE)) return s;
  const uint64_t xcr = xcr0();
  const bool os_avx512 = (xcr & 0xE6) == 0xE6;           // SSE, AVX, opmask, ZMM state
  const bool os_amx = (xcr & (3u << 17)) == (3u << 17);  // XTILECFG, XTILEDATA state
  if (__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) {
    s.amx_bf16 = os_amx && (edx & (1u << 22));
  }
  if (__get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx)) {
    s.avx512_bf16 = os_avx512 && (eax & (1u << 5));
  }
  return s;
}
#else
Bf16Support detect_bf16() { return {}; }
#endif

std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (!absl::StartsWith(line, "model name")) continue;
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    return std::string(absl::StripAsciiWhitespace(line.substr(colon + 1)));
  }
  return "unknown";
}

}  // namespace

CpuFeatures detect_cpu_features() {
  const Bf16Support bf16 = detect_bf16();
  return {cpu_model_name(), bf16.avx512_bf16 || bf16.amx_bf16};
}

std::string describe(const CpuFeatures& features) {
  return absl::StrCat(features.model_name, ", native bf16: ", features.native_bf16 ? "yes" : "no");
}

absl::StatusOr<at::ScalarType> resolve_dtype(const std::string& name, bool on_cuda,
                                             bool native_bf16) {
  if (name == "auto") return on_cuda || native_bf16 ? at::kBFloat16 : at::kFloat;
  return parse_dtype(name);
}

absl::StatusOr<at::ScalarType> resolve_dtype(const std::string& name, bool on_cuda) {
  return resolve_dtype(name, on_cuda, name == "auto" && detect_cpu_features().native_bf16);
}

}  // namespace flywheel::model
