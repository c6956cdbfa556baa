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

GemmIsa detect_gemm_isa() {
#if defined(FLYWHEEL_X86_GEMM)
  // GCC's checks include the OS's XSAVE state for the wider registers.
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) return GemmIsa::kAvx512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return GemmIsa::kAvx2;
#endif
  return GemmIsa::kNone;
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
  static const GemmIsa best = detect_gemm_isa();  // constant for the process's life
  const GemmIsa isa = options.isa == GemmIsa::kAuto ? best : options.isa;
  TORCH_CHECK(isa != GemmIsa::kNone && gemm_isa_supported(isa), "small_linear: this CPU lacks ",
              gemm_isa_name(isa));
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
  // Blocks of kTileCols rows of w, split evenly between the parts.
  const int64_t blocks = (N + gemm::kTileCols - 1) / gemm::kTileCols;
  const int64_t parts = options.pool == nullptr || M * N * K < kMinParallelWork
                            ? 1
                            : std::min<int64_t>(options.pool->threads(), blocks);
  if (parts == 1) {
    run(p, 0, N);
    return y;
  }
  options.pool->run([&](int part) {
    if (part >= parts) return;
    const int64_t begin = blocks * part / parts, end = blocks * (part + 1) / parts;
    run(p, begin * gemm::kTileCols, std::min(N, end * gemm::kTileCols));
  });
  return y;
}

}  // namespace flywheel::model
