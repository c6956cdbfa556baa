#include "flywheel/model/cpu/prefill_attention.h"

#include <algorithm>
#include <limits>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/ThreadLocalState.h>

#include "flywheel/model/cpu/kernel_linear.h"

namespace flywheel::model {
namespace {

// One past the last key that any query in mask [Tc, L] may read (at least 1, so that a chunk
// that may read nothing still yields the batched form's NaN).
int64_t keys_read(const at::Tensor& mask) {
  const at::Tensor any = mask.any(0).contiguous();
  const bool* allowed = any.data_ptr<bool>();
  for (int64_t j = any.size(0); j > 0; --j) {
    if (allowed[j - 1]) return j;
  }
  return 1;
}

}  // namespace

at::Tensor prefill_attention(const PrefillAttentionInputs& in,
                             const PrefillAttentionOptions& options) {
  const at::Tensor& q = in.q;
  TORCH_CHECK(q.dim() == 4 && in.keys.dim() == 4 && in.keys.sizes() == in.values.sizes(),
              "prefill_attention: q [B, T, heads, head_dim] and keys, values [B, kv_heads, L, "
              "head_dim] expected, got ",
              q.sizes(), ", ", in.keys.sizes(), " and ", in.values.sizes());
  const int64_t B = q.size(0), T = q.size(1), heads = q.size(2), hd = q.size(3);
  const int64_t kvh = in.keys.size(1), L = in.keys.size(2);
  TORCH_CHECK(in.keys.size(0) == B && in.keys.size(3) == hd && kvh > 0 && heads % kvh == 0,
              "prefill_attention: keys ", in.keys.sizes(), " do not fit q ", q.sizes());
  TORCH_CHECK(in.mask.dim() == 3 && in.mask.size(0) == B && in.mask.size(1) == T &&
                  in.mask.size(2) == L && in.mask.scalar_type() == at::kBool,
              "prefill_attention: a bool mask [", B, ", ", T, ", ", L, "] expected, got ",
              in.mask.sizes(), " of ", in.mask.scalar_type());
  TORCH_CHECK(options.chunk_scores >= 1, "prefill_attention: chunk_scores must be >= 1");
  const int64_t groups = heads / kvh;
  at::Tensor out = at::empty({B, T, heads * hd}, q.options());
  if (B == 0 || T == 0) return out;
  const at::Tensor mask = in.mask.to(at::kCPU);
  // Query tokens per chunk: groups * kvh * chunk * L scores within the budget.
  const int64_t chunk =
      std::clamp<int64_t>(options.chunk_scores / (heads * std::max<int64_t>(L, 1)), 1, T);
  const int64_t chunks = (T + chunk - 1) / chunk;
  const float inf = std::numeric_limits<float>::infinity();
  // The tasks' LibTorch ops run on the pool's threads with the caller's thread-local state (grad
  // mode, inference mode), and only where ATen runs each op on one thread: otherwise every
  // thread's matmul would start a team of its own on the same cores.
  WorkerPool* pool = at::get_num_threads() == 1 ? options.pool : nullptr;
  const bool float_values = q.scalar_type() == at::kBFloat16 && bf16_projections_in_kernels();
  const at::ThreadLocalState caller;
  parallel_chunks(pool, B * chunks, /*chunk=*/1, [&](int64_t begin, int64_t end) {
    const at::ThreadLocalStateGuard same_state(caller);
    for (int64_t task = begin; task < end; ++task) {
      const int64_t b = task / chunks, t0 = (task % chunks) * chunk;
      const int64_t tc = std::min(chunk, T - t0);
      const at::Tensor allowed = mask[b].narrow(0, t0, tc);  // [tc, L]
      const int64_t lc = keys_read(allowed);
      // The chunk's query heads stacked by kv head: [kvh, groups * tc, hd].
      const at::Tensor qg = q[b].narrow(0, t0, tc)
                                .view({tc, kvh, groups, hd})
                                .permute({1, 2, 0, 3})
                                .reshape({kvh, groups * tc, hd})
                                .to(at::kFloat);
      const at::Tensor keys = in.keys[b].narrow(1, 0, lc).to(at::kFloat);  // [kvh, lc, hd]
      at::Tensor scores = at::matmul(qg, keys.transpose(-1, -2)) * in.scale;
      scores = scores.view({kvh, groups, tc, lc})
                   .masked_fill(allowed.narrow(1, 0, lc).logical_not().view({1, 1, tc, lc}), -inf);
      const at::Tensor probs = at::softmax(scores, -1).view({kvh, groups * tc, lc});
      const at::Tensor values = in.values[b].narrow(1, 0, lc);  // [kvh, lc, hd]
      // As the decoder's attention with gradients: bfloat16 probabilities times values, or where
      // LibTorch only emulates bfloat16 GEMM, float32 ones rounded once.
      const at::Tensor product =
          float_values ? at::matmul(probs, values.to(at::kFloat)).to(q.scalar_type())
                       : at::matmul(probs.to(q.scalar_type()), values.to(q.scalar_type()));
      const at::Tensor part =
          product.view({kvh, groups, tc, hd}).permute({2, 0, 1, 3}).reshape({tc, heads * hd});
      out[b].narrow(0, t0, tc).copy_(part);
    }
  });
  return out;
}

}  // namespace flywheel::model
