// The row-wise work of a forward without gradients (decode steps, one token per row, and
// prefills) on float32 and bfloat16 CPU tensors, in flywheel's own loops: RMSNorm, per-head norm
// plus RoPE, and SiLU-gated products, one call each where LibTorch takes 3 to 14 ops. In a decode
// step their dispatch and temporaries (a few microseconds per op, ~45 ops per layer) cost ~0.1 ms
// per layer and step, most of a small model's batch-1 step; in a prefill, LibTorch's ops make
// several passes over large tensors on one thread. From 16 rows up, rows are split between a
// WorkerPool's threads. Each row's result depends on that row alone and is computed in one fixed
// order, whatever the thread count. Every op is rounded to the tensors' dtype where LibTorch's
// ops round (bfloat16 SiLU: after each of its ops with LibTorch 1.x, once with 2.x): RoPE and the
// norm's scaling give LibTorch's results bit for bit; the norm's sum of squares (another order)
// and SiLU's exp (poly_exp.h) are within float32 rounding of them.
#pragma once

#include <ATen/core/Tensor.h>

#include "flywheel/model/cpu/worker_pool.h"

namespace flywheel::model {

// Whether the kernels here serve t: a contiguous float32 or bfloat16 CPU tensor. All tensors of
// one call share a dtype.
bool decode_rows_serve(const at::Tensor& t);

// weight * x / sqrt(mean(x^2) + eps) over x's last dimension (weight [H], x [..., H]).
at::Tensor rms_norm_rows(const at::Tensor& x, const at::Tensor& weight, double eps,
                         WorkerPool* pool = nullptr);

// What norm_rope_rows applies to each head.
struct NormRopeOptions {
  at::Tensor norm;    // [head_dim]: an RMSNorm per head first (Qwen3's q/k norms); undefined: none
  double eps = 1e-6;  // the norm's epsilon
  at::Tensor cos, sin;  // [rows, head_dim] (any shape of rows * head_dim elements): RoPE tables
  WorkerPool* pool = nullptr;
};

// Rotate-half RoPE (dimension i pairs with i + head_dim / 2) of every head of t [rows, heads,
// head_dim] (any shape whose last dimension is head_dim and first is rows), after the optional
// per-head norm; a new tensor of t's shape.
at::Tensor norm_rope_rows(const at::Tensor& t, const NormRopeOptions& options);

// silu(gate) * up, elementwise (gate and up of one shape).
at::Tensor silu_mul_rows(const at::Tensor& gate, const at::Tensor& up, WorkerPool* pool = nullptr);

// log(sum(exp(x))) of each row of x [rows, n] (float32, contiguous) -> [rows] float32, each row in
// one fixed order whatever the thread count or the other rows (the engine's behaviour log-probs
// and the learner's proximal ones share it, rollout.md "Equal log-probs"). Within 2 float32 ulps
// of LibTorch's logsumexp (exp from poly_exp.h); a row of -inf gives -inf, +inf gives +inf, NaN
// gives NaN.
at::Tensor logsumexp_rows(const at::Tensor& x, WorkerPool* pool = nullptr);

}  // namespace flywheel::model
