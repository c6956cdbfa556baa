#include "flywheel/model/cpu/thread_layout.h"

#include <dlfcn.h>

#include <algorithm>

#include <ATen/Parallel.h>

#include "absl/strings/str_cat.h"
#include "flywheel/model/cpu/small_gemm.h"
#include "flywheel/model/hf_checkpoint.h"

namespace flywheel::model {
namespace {

// The BLAS library's thread functions, looked up in the whole process: Debian's LibTorch 1.13
// calls the system BLAS (libblas.so.3 -> OpenBLAS); LibTorch 2.x wheels bundle MKL, often without
// exporting these symbols, and then there is nothing to set.
struct BlasControl {
  const char* name = "";
  void (*set)(int) = nullptr;
  int (*get)() = nullptr;
};

BlasControl find_blas_control() {
  BlasControl c;
  if (void* set = dlsym(RTLD_DEFAULT, "openblas_set_num_threads")) {
    c.name = "OpenBLAS";
    c.set = reinterpret_cast<void (*)(int)>(set);
    c.get = reinterpret_cast<int (*)()>(dlsym(RTLD_DEFAULT, "openblas_get_num_threads"));
  } else if (void* mkl_set = dlsym(RTLD_DEFAULT, "mkl_set_num_threads")) {
    c.name = "MKL";
    c.set = reinterpret_cast<void (*)(int)>(mkl_set);
    c.get = reinterpret_cast<int (*)()>(dlsym(RTLD_DEFAULT, "mkl_get_max_threads"));
  }
  return c;
}

}  // namespace

const char* thread_split_name(ThreadSplit split) { return core::choice_name(split).data(); }

bool parse_thread_split(const std::string& name, ThreadSplit* split) {
  std::optional<ThreadSplit> parsed = core::parse_choice<ThreadSplit>(name);
  if (parsed) *split = *parsed;
  return parsed.has_value();
}

std::string ThreadLayout::to_string() const {
  const std::string blas_part = blas.empty() ? "BLAS threads not settable in this process"
                                             : absl::StrCat(blas, " ", blas_threads);
  return absl::StrCat("threads: ", threads, " (",
                      kernels ? absl::StrCat("flywheel kernels ", threads, ", ") : "",
                      "ATen intra-op ", aten_threads, ", ", blas_part, ") for ", dtype_name(dtype));
}

ThreadLayout plan_thread_layout(int threads, at::ScalarType dtype, ThreadSplit split,
                                const std::string& blas, bool kernels_available) {
  ThreadLayout layout;
  layout.threads = std::max(1, threads);
  layout.dtype = dtype;
  layout.blas = blas;
  // Without the kernels, bfloat16 GEMMs run in oneDNN on ATen's OpenMP pool and float32 ones in
  // BLAS.
  const ThreadSplit libtorch = dtype == at::kBFloat16 ? ThreadSplit::kAten : ThreadSplit::kBlas;
  if (split == ThreadSplit::kAuto) split = kernels_available ? ThreadSplit::kKernels : libtorch;
  if (split == ThreadSplit::kKernels && !kernels_available) split = libtorch;
  layout.kernels = split == ThreadSplit::kKernels;
  if (layout.kernels) {
    layout.aten_threads = 1;
    layout.blas_threads = blas.empty() ? 0 : 1;
    return layout;
  }
  if (blas.empty()) {
    layout.aten_threads = layout.threads;
    return layout;
  }
  layout.aten_threads = split == ThreadSplit::kBlas ? 1 : layout.threads;
  layout.blas_threads = split == ThreadSplit::kBlas ? layout.threads : 1;
  return layout;
}

ThreadLayout apply_thread_layout(const ThreadLayoutOptions& options) {
  const BlasControl blas = find_blas_control();
  const int threads = options.threads > 0 ? options.threads : std::max(1, at::get_num_threads());
  const ThreadLayout layout = plan_thread_layout(threads, options.dtype, options.split, blas.name,
                                                 small_gemm_supports(options.dtype));
  // ATen first: with MKL, at::set_num_threads also sets MKL's count, which the BLAS call then
  // overrides.
  at::set_num_threads(layout.aten_threads);
  if (blas.set) blas.set(layout.blas_threads);
  return layout;
}

int current_blas_threads() {
  const BlasControl blas = find_blas_control();
  return blas.get ? blas.get() : 0;
}

}  // namespace flywheel::model
