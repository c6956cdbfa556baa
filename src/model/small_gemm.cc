#include "flywheel/model/small_gemm.h"

#include <algorithm>

#include <ATen/ATen.h>

#include "small_gemm_kernels.h"

namespace flywheel::model {
namespace {

// Multiply-adds below which a split between threads costs more than it saves.
constexpr int64_t kMinParallelWork = int64_t{1} << 16;

}  // namespace

const char* gemm_isa_name(GemmIsa isa) {
  switch (isa) {
    case GemmIsa::kAvx512:
      return "avx512";
    case GemmIsa::kAvx2:
      return "avx2";
    case GemmIsa::kNone:
      return "none";
    default:
      return "auto";
  }
}

namespace {

GemmIsa detect() {
#if defined(FLYWHEEL_X86_GEMM)
  // GCC's checks include the OS's XSAVE state for the wider registers.
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) return GemmIsa::kAvx512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return GemmIsa::kAvx2;
#endif
  return GemmIsa::kNone;
}

}  // namespace

GemmIsa detect_gemm_isa() {
  static const GemmIsa best = detect();  // constant for the process's life
  return best;
}

bool gemm_isa_supported(GemmIsa isa) {
  const GemmIsa best = detect_gemm_isa();
  switch (isa) {
    case GemmIsa::kAuto:
      return best != GemmIsa::kNone;
    case GemmIsa::kAvx512:
      return best == GemmIsa::kAvx512;
    case GemmIsa::kAvx2:
      return best == GemmIsa::kAvx512 || best == GemmIsa::kAvx2;
    default:
      return false;
  }
}

GemmIsa resolve_gemm_isa(GemmIsa isa, const char* caller) {
  const GemmIsa resolved = isa == GemmIsa::kAuto ? detect_gemm_isa() : isa;
  TORCH_CHECK(resolved != GemmIsa::kNone && gemm_isa_supported(resolved), caller,
              ": this CPU lacks ", gemm_isa_name(resolved));
  return resolved;
}

at::Tensor small_linear(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b,
                        const SmallLinearOptions& options) {
  TORCH_CHECK(x.dim() == 2 && w.dim() == 2 && x.size(1) == w.size(1),
              "small_linear: x [M, K] and w [N, K] expected, got ", x.sizes(), " and ", w.sizes());
  TORCH_CHECK(x.device().is_cpu() && w.device().is_cpu() && x.scalar_type() == at::kFloat &&
                  w.scalar_type() == at::kFloat,
              "small_linear: float32 CPU tensors expected");
  TORCH_CHECK(w.is_contiguous() && x.stride(1) == 1,
              "small_linear: w contiguous and x with "
              "contiguous rows expected");
  TORCH_CHECK(!b.defined() || (b.dim() == 1 && b.size(0) == w.size(0) && b.is_contiguous() &&
                               b.scalar_type() == at::kFloat),
              "small_linear: b [N] float32 contiguous expected");
  const GemmIsa isa = resolve_gemm_isa(options.isa, "small_linear");
  const int64_t M = x.size(0), N = w.size(0), K = x.size(1);
  at::Tensor y = at::empty({M, N}, x.options());
  if (M == 0 || N == 0) return y;
  gemm::Problem p;
  p.x = x.data_ptr<float>();
  p.w = w.data_ptr<float>();
  p.bias = b.defined() ? b.data_ptr<float>() : nullptr;
  p.y = y.data_ptr<float>();
  p.M = M;
  p.K = K;
  p.ldx = M > 1 ? x.stride(0) : K;
  p.ldw = K;
  p.ldy = N;
#if defined(FLYWHEEL_X86_GEMM)
  auto* run = isa == GemmIsa::kAvx512 ? gemm::run_avx512 : gemm::run_avx2;
#else
  void (*run)(const gemm::Problem&, int64_t, int64_t) = nullptr;
#endif
  // Blocks of kTileCols rows of w, split evenly between the pool's threads.
  const int64_t blocks = (N + gemm::kTileCols - 1) / gemm::kTileCols;
  parallel_rows(M * N * K < kMinParallelWork ? nullptr : options.pool, blocks, /*min_rows=*/1,
                [&](int64_t begin, int64_t end) {
                  run(p, begin * gemm::kTileCols, std::min(N, end * gemm::kTileCols));
                });
  return y;
}

}  // namespace flywheel::model
