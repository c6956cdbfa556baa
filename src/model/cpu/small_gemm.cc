#include "flywheel/model/cpu/small_gemm.h"

#include <algorithm>

#include <ATen/ATen.h>
#include <ATen/record_function.h>

#include "flywheel/model/cpu/packed_weights.h"
#include "small_gemm_kernels.h"

namespace flywheel::model {
namespace {

// Multiply-adds below which a split between threads costs more than it saves.
constexpr int64_t kMinParallelWork = int64_t{1} << 16;

// Chunks of w's rows per thread: enough that the threads finish within a chunk of each other when
// one is slowed, few enough that taking one (an atomic shared by the threads) costs nothing.
constexpr int64_t kChunksPerThread = 8;

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

bool detect_bf16() {
#if defined(FLYWHEEL_X86_GEMM)
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512bf16");
#else
  return false;
#endif
}

}  // namespace

GemmIsa detect_gemm_isa() {
  static const GemmIsa best = detect();  // constant for the process's life
  return best;
}

bool avx512_bf16_supported() {
  static const bool supported = detect_bf16();
  return supported;
}

bool bf16_gemm_supported() { return avx512_bf16_supported() || gemm_isa_supported(GemmIsa::kAvx2); }

bool small_gemm_supports(at::ScalarType dtype) {
  if (dtype == at::kFloat) return gemm_isa_supported(GemmIsa::kAuto);
  return dtype == at::kBFloat16 && bf16_gemm_supported();
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

GemmKernel resolve_gemm_kernel(at::ScalarType dtype, GemmIsa isa, const char* caller) {
  if (dtype == at::kBFloat16) {
    if (isa == GemmIsa::kAuto && avx512_bf16_supported()) return GemmKernel::kAvx512Bf16;
    if (isa == GemmIsa::kAvx512) {
      TORCH_CHECK(avx512_bf16_supported(), caller,
                  ": bfloat16 with avx512 needs AVX512-BF16, which this CPU lacks");
      return GemmKernel::kAvx512Bf16;
    }
    TORCH_CHECK(isa != GemmIsa::kNone && gemm_isa_supported(GemmIsa::kAvx2), caller,
                ": bfloat16 needs AVX512-BF16 or AVX2 + FMA, which this CPU lacks");
    return GemmKernel::kAvx2Bf16;
  }
  return resolve_gemm_isa(isa, caller) == GemmIsa::kAvx512 ? GemmKernel::kAvx512
                                                           : GemmKernel::kAvx2;
}

namespace gemm {

KernelFns kernel_fns(GemmKernel kernel) {
#if defined(FLYWHEEL_X86_GEMM)
  switch (kernel) {
    case GemmKernel::kAvx512Bf16:
      return {run_avx512_bf16, attend_avx512_bf16, kPanelsPerTile * kPanelRows, pack_bf16_panels};
    case GemmKernel::kAvx2Bf16:
      return {run_avx2_bf16, attend_avx2_bf16};
    case GemmKernel::kAvx512:
      return {run_avx512, attend_avx512};
    case GemmKernel::kAvx2:
      return {run_avx2, attend_avx2};
  }
#endif
  (void)kernel;
  return {};
}

}  // namespace gemm

at::Tensor small_linear(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b,
                        const SmallLinearOptions& options) {
  RECORD_USER_SCOPE("flywheel::matmul");  // profilers' matmuls (learner_bench --profile)
  TORCH_CHECK(x.dim() == 2 && w.dim() == 2 && x.size(1) == w.size(1),
              "small_linear: x [M, K] and w [N, K] expected, got ", x.sizes(), " and ", w.sizes());
  const at::ScalarType dtype = x.scalar_type();
  TORCH_CHECK(x.device().is_cpu() && w.device().is_cpu() &&
                  (dtype == at::kFloat || dtype == at::kBFloat16) && w.scalar_type() == dtype,
              "small_linear: float32 or bfloat16 CPU tensors of one dtype expected, got ",
              x.scalar_type(), " and ", w.scalar_type());
  // A column of size 1 may have any stride (a contiguous tensor's size-1 dimensions do).
  TORCH_CHECK(w.is_contiguous() && (x.stride(1) == 1 || x.size(1) <= 1),
              "small_linear: w contiguous and x with contiguous rows expected");
  TORCH_CHECK(!b.defined() || (b.dim() == 1 && b.size(0) == w.size(0) && b.is_contiguous() &&
                               b.scalar_type() == dtype),
              "small_linear: b [N] contiguous of x's dtype expected");
  const at::ScalarType out_dtype =
      options.out_dtype == at::ScalarType::Undefined ? dtype : options.out_dtype;
  TORCH_CHECK(out_dtype == dtype || out_dtype == at::kFloat,
              "small_linear: the output is x's dtype or float32, not ", out_dtype);
  const GemmKernel kernel = resolve_gemm_kernel(dtype, options.isa, "small_linear");
  const gemm::KernelFns fns = gemm::kernel_fns(kernel);
  const int64_t M = x.size(0), N = w.size(0), K = x.size(1);
  at::Tensor y = at::empty({M, N}, x.options().dtype(out_dtype));
  if (M == 0 || N == 0) return y;
  gemm::Problem p;
  p.x = x.data_ptr();
  p.w = w.data_ptr();
  p.bias = b.defined() ? b.data_ptr() : nullptr;
  if (out_dtype == at::kFloat) {
    p.y = y.data_ptr<float>();
  } else {
    p.y_bf16 = static_cast<uint16_t*>(y.data_ptr());
  }
  p.M = M;
  p.K = K;
  p.ldx = M > 1 ? x.stride(0) : K;
  p.ldw = K;
  p.ldy = N;
  p.N = N;
  at::Tensor panels;  // held until the kernel is done with it
  if (kernel == GemmKernel::kAvx512Bf16 && options.packs != nullptr) {
    panels = options.packs->panels(w);
    if (panels.defined()) p.w_panels = static_cast<const uint16_t*>(panels.data_ptr());
  }
  // Blocks of the kernel's block_cols rows of w, in kChunksPerThread chunks per thread taken by
  // whichever thread is free. Each output is one tile's, whichever thread runs it.
  const int64_t cols = fns.block_cols;
  const int64_t blocks = (N + cols - 1) / cols;
  WorkerPool* pool = M * N * K < kMinParallelWork ? nullptr : options.pool;
  const int64_t threads = pool != nullptr ? pool->threads() : 1;
  parallel_chunks(
      pool, blocks, (blocks + threads * kChunksPerThread - 1) / (threads * kChunksPerThread),
      [&](int64_t begin, int64_t end) { fns.run(p, begin * cols, std::min(N, end * cols)); });
  return y;
}

}  // namespace flywheel::model
