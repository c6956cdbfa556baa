#include "flywheel/model/cpu/decode_rows.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include <ATen/ATen.h>
#include <torch/version.h>

#include "flywheel/model/cpu/bf16_bits.h"
#include "flywheel/model/cpu/poly_exp.h"

// Compiled with -ffp-contract=off (CMakeLists.txt): products and sums are rounded one by one, as
// LibTorch's separate ops round them, so RMSNorm's scaling and RoPE give LibTorch's results bit
// for bit.

namespace flywheel::model {
namespace {

// Rows per thread below which a split between threads costs more than it saves.
constexpr int64_t kMinRowsPerThread = 8;

constexpr float kInfinity = std::numeric_limits<float>::infinity();

// Inlined into each clone below (a call would leave the loops in the baseline instruction set).
#define FLYWHEEL_ROW_INLINE __attribute__((always_inline)) inline

// An element as float32, and a float32 as an element (bfloat16: uint16_t bits, bf16_bits.h).
FLYWHEEL_ROW_INLINE float widen(float x) { return x; }
FLYWHEEL_ROW_INLINE float widen(uint16_t bits) { return bf16_to_float(bits); }

template <typename E>
FLYWHEEL_ROW_INLINE E narrow(float x);
template <>
FLYWHEEL_ROW_INLINE float narrow<float>(float x) {
  return x;
}
template <>
FLYWHEEL_ROW_INLINE uint16_t narrow<uint16_t>(float x) {
  return float_to_bf16(x);
}

// A value as LibTorch leaves it after one op in E: rounded to E.
template <typename E>
FLYWHEEL_ROW_INLINE float round_to(float x) {
  return widen(narrow<E>(x));
}

// LibTorch 1.13's bfloat16 silu rounds after each of its ops (exp(-x), 1 + that, x / that);
// LibTorch 2.x's computes in float32 and rounds once.
constexpr bool kSiluRoundsEachOp = TORCH_VERSION_MAJOR < 2;

// 1 / sqrt(mean(x^2) + eps) of x[0, n), in float32: the squares summed in 16 lanes, then the lanes
// in order.
template <typename E>
FLYWHEEL_ROW_INLINE float inverse_rms(const E* __restrict x, int64_t n, float eps) {
  constexpr int kLanes = 16;
  float lanes[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int j = 0; j < kLanes; ++j) lanes[j] += widen(x[i + j]) * widen(x[i + j]);
  }
  float sum = 0.0f;
  for (int j = 0; j < kLanes; ++j) sum += lanes[j];
  for (; i < n; ++i) sum += widen(x[i]) * widen(x[i]);
  return 1.0f / std::sqrt(sum / static_cast<float>(n) + eps);
}

// out = weight * E(x * scale): LibTorch's rms_norm scales in float32, rounds to E, then
// multiplies by the weight in E.
template <typename E>
FLYWHEEL_ROW_INLINE void scale_row(const E* __restrict x, const E* __restrict weight, float scale,
                                   int64_t n, E* __restrict out) {
  for (int64_t i = 0; i < n; ++i) {
    out[i] = narrow<E>(widen(weight[i]) * round_to<E>(widen(x[i]) * scale));
  }
}

// Rotate-half RoPE of one head, out = x * cos + cat(-x2, x1) * sin, each op rounded to E.
template <typename E>
FLYWHEEL_ROW_INLINE void rope_head(const E* __restrict x, const E* __restrict cos,
                                   const E* __restrict sin, int64_t half, E* __restrict out) {
  for (int64_t i = 0; i < half; ++i) {
    const float a = widen(x[i]), b = widen(x[i + half]);
    out[i] = narrow<E>(round_to<E>(a * widen(cos[i])) - round_to<E>(b * widen(sin[i])));
    out[i + half] =
        narrow<E>(round_to<E>(b * widen(cos[i + half])) + round_to<E>(a * widen(sin[i + half])));
  }
}

// out = E(gate / (1 + exp(-gate))) * up, rounded as LibTorch's silu (kSiluRoundsEachOp) and mul.
template <typename E>
FLYWHEEL_ROW_INLINE void silu_mul(const E* __restrict gate, const E* __restrict up, int64_t n,
                                  E* __restrict out) {
  constexpr bool each_op = kSiluRoundsEachOp && !std::is_same_v<E, float>;
  for (int64_t i = 0; i < n; ++i) {
    const float g = widen(gate[i]), t = -g;
    // exp(t) past its range: 0 below (1 + 0 is 1 all the same), infinite above, where silu is
    // below 1e-36 in magnitude and the result -0 (NaN stays NaN: g / inf).
    float e = poly_exp(t > kPolyExpMin ? (t < kPolyExpMax ? t : kPolyExpMax) : kPolyExpMin);
    if (each_op) e = round_to<E>(e);
    float denominator = t < kPolyExpMax ? 1.0f + e : kInfinity;
    if (each_op) denominator = round_to<E>(denominator);
    out[i] = narrow<E>(round_to<E>(g / denominator) * widen(up[i]));
  }
}

// log(sum exp(x[0, n))) in float32: the maximum subtracted, exp from poly_exp (0 where x - max is
// below its range), the sum in 16 lanes and then the lanes in order. A maximum of +-inf is the
// result (every x -inf, or one +inf); NaN anywhere gives NaN.
FLYWHEEL_ROW_INLINE float logsumexp_row(const float* __restrict x, int64_t n) {
  constexpr int kLanes = 16;
  // The maximum and whether any x is NaN, over 16 lanes of integer keys (a loop GCC vectorises,
  // where it keeps a float maximum scalar): a float's bits with the magnitude bits flipped when
  // negative order as signed integers as the floats do, -0 below +0 (no result below depends on
  // the sign of a zero); NaN is any pattern above infinity's in magnitude.
  constexpr int32_t kMagnitude = 0x7fffffff, kInfinityBits = 0x7f800000;
  constexpr int32_t kMinusInfinityKey = -kInfinityBits - 1;  // -inf's key, 0x807fffff: the least
  int32_t keys[kLanes], nans[kLanes] = {};
  for (int j = 0; j < kLanes; ++j) keys[j] = kMinusInfinityKey;
  auto visit = [&](const float* at, int32_t& key, int32_t& nan) {
    int32_t bits;
    std::memcpy(&bits, at, sizeof(bits));
    const int32_t order = bits ^ ((bits >> 31) & kMagnitude);
    key = order > key ? order : key;
    nan |= (bits & kMagnitude) > kInfinityBits;
  };
  int64_t k = 0;
  for (; k + kLanes <= n; k += kLanes) {
    for (int j = 0; j < kLanes; ++j) visit(x + k + j, keys[j], nans[j]);
  }
  int32_t key = kMinusInfinityKey, nan = 0;
  for (int j = 0; j < kLanes; ++j) {
    key = keys[j] > key ? keys[j] : key;
    nan |= nans[j];
  }
  for (; k < n; ++k) visit(x + k, key, nan);
  const int32_t top_bits = key ^ ((key >> 31) & kMagnitude);
  float top;
  std::memcpy(&top, &top_bits, sizeof(top));
  if (nan != 0) return std::numeric_limits<float>::quiet_NaN();
  if (top == kInfinity || top == -kInfinity) return top;
  float lanes[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int j = 0; j < kLanes; ++j) {
      const float d = x[i + j] - top;
      lanes[j] += d > kPolyExpMin ? poly_exp(d) : 0.0f;
    }
  }
  float sum = 0.0f;
  for (int j = 0; j < kLanes; ++j) sum += lanes[j];
  for (; i < n; ++i) {
    const float d = x[i] - top;
    sum += d > kPolyExpMin ? poly_exp(d) : 0.0f;
  }
  return top + std::log(sum);
}

// The loops above for each dtype, cloned for AVX-512 and AVX2 (chosen at load time by the CPU)
// with SSE2 as the baseline.
#if defined(__x86_64__)
#define FLYWHEEL_ROW_CLONES __attribute__((target_clones("arch=x86-64-v4", "avx2", "default")))
#else
#define FLYWHEEL_ROW_CLONES
#endif

template <typename E>
struct Rows;

#define FLYWHEEL_ROWS_FOR(E)                                                                       \
  template <>                                                                                      \
  struct Rows<E> {                                                                                 \
    FLYWHEEL_ROW_CLONES static void norm(const E* x, const E* w, float eps, int64_t n, E* y) {     \
      scale_row(x, w, inverse_rms(x, n, eps), n, y);                                               \
    }                                                                                              \
    FLYWHEEL_ROW_CLONES static void rope(const E* x, const E* c, const E* s, int64_t half, E* y) { \
      rope_head(x, c, s, half, y);                                                                 \
    }                                                                                              \
    FLYWHEEL_ROW_CLONES static void silu(const E* g, const E* u, int64_t n, E* y) {                \
      silu_mul(g, u, n, y);                                                                        \
    }                                                                                              \
  };
FLYWHEEL_ROWS_FOR(float)
FLYWHEEL_ROWS_FOR(uint16_t)
#undef FLYWHEEL_ROWS_FOR

FLYWHEEL_ROW_CLONES void logsumexp_range(const float* x, int64_t n, int64_t rows, float* out) {
  for (int64_t r = 0; r < rows; ++r) out[r] = logsumexp_row(x + r * n, n);
}

void check_served(const at::Tensor& t, const char* what, const char* caller) {
  TORCH_CHECK(decode_rows_serve(t), caller, ": ", what,
              " must be a contiguous float32 or bfloat16 CPU tensor, got ", t.scalar_type(), " on ",
              t.device(), t.is_contiguous() ? "" : " (not contiguous)");
}

void check_same_dtype(const at::Tensor& a, const at::Tensor& b, const char* caller) {
  TORCH_CHECK(a.scalar_type() == b.scalar_type(), caller, ": tensors of one dtype expected, got ",
              a.scalar_type(), " and ", b.scalar_type());
}

// fn(begin, end) over [0, rows), split between the pool's threads from 2 * kMinRowsPerThread rows.
void for_rows(WorkerPool* pool, int64_t rows, const std::function<void(int64_t, int64_t)>& fn) {
  parallel_rows(rows < 2 * kMinRowsPerThread ? nullptr : pool, rows, kMinRowsPerThread, fn);
}

// fn(E{}) with E the element type of `dtype`: float for float32, uint16_t bits for bfloat16.
template <typename Fn>
void with_element_type(at::ScalarType dtype, Fn&& fn) {
  if (dtype == at::kFloat) {
    fn(float{});
  } else {
    fn(uint16_t{});
  }
}

// t's data as E (float, or uint16_t bfloat16 bits).
template <typename E>
E* data(const at::Tensor& t) {
  return static_cast<E*>(t.data_ptr());
}

template <typename E>
void rms_norm_as(const at::Tensor& x, const at::Tensor& weight, float eps, WorkerPool* pool,
                 const at::Tensor& out) {
  const int64_t n = x.size(-1);
  const E *in = data<E>(x), *w = data<E>(weight);
  E* y = data<E>(out);
  for_rows(pool, x.numel() / n, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) Rows<E>::norm(in + r * n, w, eps, n, y + r * n);
  });
}

template <typename E>
void norm_rope_as(const at::Tensor& t, const NormRopeOptions& options, const at::Tensor& out) {
  const int64_t rows = t.size(0), hd = t.size(-1), heads = t.numel() / rows / hd;
  const E *in = data<E>(t), *cos = data<E>(options.cos), *sin = data<E>(options.sin);
  const E* w = options.norm.defined() ? data<E>(options.norm) : nullptr;
  E* y = data<E>(out);
  const float eps = static_cast<float>(options.eps);
  for_rows(options.pool, rows, [&](int64_t begin, int64_t end) {
    std::vector<E> normed(w != nullptr ? static_cast<size_t>(hd) : 0);
    for (int64_t r = begin; r < end; ++r) {
      for (int64_t h = 0; h < heads; ++h) {
        const E* head = in + (r * heads + h) * hd;
        if (w != nullptr) {
          Rows<E>::norm(head, w, eps, hd, normed.data());
          head = normed.data();
        }
        Rows<E>::rope(head, cos + r * hd, sin + r * hd, hd / 2, y + (r * heads + h) * hd);
      }
    }
  });
}

template <typename E>
void silu_mul_as(const at::Tensor& gate, const at::Tensor& up, WorkerPool* pool,
                 const at::Tensor& out) {
  const int64_t n = gate.size(-1);
  const E *g = data<E>(gate), *u = data<E>(up);
  E* y = data<E>(out);
  for_rows(pool, gate.numel() / n, [&](int64_t begin, int64_t end) {
    Rows<E>::silu(g + begin * n, u + begin * n, (end - begin) * n, y + begin * n);
  });
}

}  // namespace

bool decode_rows_serve(const at::Tensor& t) {
  return t.defined() && t.device().is_cpu() &&
         (t.scalar_type() == at::kFloat || t.scalar_type() == at::kBFloat16) && t.is_contiguous();
}

at::Tensor rms_norm_rows(const at::Tensor& x, const at::Tensor& weight, double eps,
                         WorkerPool* pool) {
  check_served(x, "x", "rms_norm_rows");
  check_served(weight, "weight", "rms_norm_rows");
  check_same_dtype(x, weight, "rms_norm_rows");
  const int64_t n = x.dim() > 0 ? x.size(-1) : 0;
  TORCH_CHECK(weight.dim() == 1 && weight.size(0) == n, "rms_norm_rows: weight [", n,
              "] expected for x ", x.sizes(), ", got ", weight.sizes());
  at::Tensor out = at::empty_like(x);
  if (x.numel() == 0) return out;
  with_element_type(x.scalar_type(), [&](auto e) {
    rms_norm_as<decltype(e)>(x, weight, static_cast<float>(eps), pool, out);
  });
  return out;
}

at::Tensor norm_rope_rows(const at::Tensor& t, const NormRopeOptions& options) {
  check_served(t, "t", "norm_rope_rows");
  TORCH_CHECK(t.dim() >= 2 && t.size(-1) % 2 == 0 && t.size(-1) > 0,
              "norm_rope_rows: t [rows, ..., head_dim] with an even head_dim expected, got ",
              t.sizes());
  const int64_t rows = t.size(0), hd = t.size(-1);
  for (const at::Tensor* table : {&options.cos, &options.sin}) {
    check_served(*table, table == &options.cos ? "cos" : "sin", "norm_rope_rows");
    check_same_dtype(t, *table, "norm_rope_rows");
    TORCH_CHECK(table->numel() == rows * hd, "norm_rope_rows: cos and sin of ", rows, " x ", hd,
                " elements expected, got ", table->sizes());
  }
  if (options.norm.defined()) {
    check_served(options.norm, "norm", "norm_rope_rows");
    check_same_dtype(t, options.norm, "norm_rope_rows");
    TORCH_CHECK(options.norm.dim() == 1 && options.norm.size(0) == hd, "norm_rope_rows: norm [", hd,
                "] expected, got ", options.norm.sizes());
  }
  at::Tensor out = at::empty_like(t);
  if (t.numel() == 0) return out;
  with_element_type(t.scalar_type(), [&](auto e) { norm_rope_as<decltype(e)>(t, options, out); });
  return out;
}

at::Tensor silu_mul_rows(const at::Tensor& gate, const at::Tensor& up, WorkerPool* pool) {
  check_served(gate, "gate", "silu_mul_rows");
  check_served(up, "up", "silu_mul_rows");
  check_same_dtype(gate, up, "silu_mul_rows");
  TORCH_CHECK(gate.sizes() == up.sizes(), "silu_mul_rows: gate and up of one shape expected, got ",
              gate.sizes(), " and ", up.sizes());
  at::Tensor out = at::empty_like(gate);
  if (gate.numel() == 0) return out;
  TORCH_CHECK(gate.dim() > 0, "silu_mul_rows: gate [..., n] expected, got a scalar");
  with_element_type(gate.scalar_type(),
                    [&](auto e) { silu_mul_as<decltype(e)>(gate, up, pool, out); });
  return out;
}

at::Tensor logsumexp_rows(const at::Tensor& x, WorkerPool* pool) {
  TORCH_CHECK(
      x.dim() == 2 && x.scalar_type() == at::kFloat && x.device().is_cpu() && x.is_contiguous(),
      "logsumexp_rows: a contiguous float32 CPU tensor [rows, n] expected, got ", x.scalar_type(),
      " ", x.sizes(), " on ", x.device());
  const int64_t rows = x.size(0), n = x.size(1);
  at::Tensor out = at::empty({rows}, x.options());
  const float* in = x.data_ptr<float>();
  float* y = out.data_ptr<float>();
  // A row is long (a vocabulary): split from 2 rows on.
  parallel_rows(rows < 2 ? nullptr : pool, rows, 1, [&](int64_t begin, int64_t end) {
    logsumexp_range(in + begin * n, n, end - begin, y + begin);
  });
  return out;
}

}  // namespace flywheel::model
