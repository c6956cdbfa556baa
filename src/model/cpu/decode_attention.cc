#include "flywheel/model/cpu/decode_attention.h"

#include <algorithm>
#include <vector>

#include <ATen/ATen.h>

#include "small_gemm_kernels.h"

namespace flywheel::model {

at::Tensor decode_attention(const DecodeAttentionInputs& in, const SmallLinearOptions& options) {
  const at::Tensor& q = in.q;
  TORCH_CHECK(q.dim() == 3 && in.keys.dim() == 4 && in.keys.sizes() == in.values.sizes(),
              "decode_attention: q [rows, heads, head_dim] and a cache [slots, kv_heads, "
              "max_len, head_dim] expected");
  const int64_t rows = q.size(0), heads = q.size(1), hd = q.size(2);
  const int64_t kv_heads = in.keys.size(1), max_len = in.keys.size(2);
  TORCH_CHECK(in.keys.size(3) == hd && kv_heads > 0 && heads % kv_heads == 0,
              "decode_attention: head_dim or head counts disagree");
  const at::ScalarType dtype = q.scalar_type();
  for (const at::Tensor* t : {&q, &in.keys, &in.values}) {
    TORCH_CHECK(t->device().is_cpu() && t->scalar_type() == dtype && t->is_contiguous() &&
                    (dtype == at::kFloat || dtype == at::kBFloat16),
                "decode_attention: contiguous CPU tensors, all float32 or all bfloat16, expected");
  }
  TORCH_CHECK(static_cast<int64_t>(in.slots.size()) == rows &&
                  static_cast<int64_t>(in.lengths.size()) == rows,
              "decode_attention: one slot and one length per row expected");
  for (int64_t b = 0; b < rows; ++b) {
    TORCH_CHECK(in.slots[b] >= 0 && in.slots[b] < in.keys.size(0), "decode_attention: row ", b,
                ": slot ", in.slots[b], " outside the cache");
    TORCH_CHECK(in.lengths[b] >= 0 && in.lengths[b] <= max_len, "decode_attention: row ", b,
                ": length ", in.lengths[b], " outside [0, ", max_len, "]");
  }
  const GemmKernel kernel = resolve_gemm_kernel(dtype, options.isa, "decode_attention");
  const auto attend = gemm::kernel_fns(kernel).attend;
  at::Tensor out = at::empty({rows, heads * hd}, q.options());
  gemm::AttentionProblem p;
  p.q = q.data_ptr();
  p.keys = in.keys.data_ptr();
  p.values = in.values.data_ptr();
  p.out = out.data_ptr();
  p.slots = in.slots.data();
  p.lengths = in.lengths.data();
  p.heads = heads;
  p.kv_heads = kv_heads;
  p.head_dim = hd;
  p.max_len = max_len;
  p.scale = static_cast<float>(in.scale);
  // Runs of consecutive rows of one slot (a prefill's tokens), at most kRunRows each: a run reads
  // each block of its slot's keys once for all its rows.
  std::vector<int64_t> run_starts = {0};
  for (int64_t b = 1; b <= rows; ++b) {
    if (b == rows || in.slots[b] != in.slots[b - 1] || b - run_starts.back() == gemm::kRunRows) {
      run_starts.push_back(b);
    }
  }
  p.run_starts = run_starts.data();
  const int64_t runs = static_cast<int64_t>(run_starts.size()) - 1;
  int64_t longest_run = 1;
  for (int64_t i = 0; i < runs; ++i) {
    longest_run = std::max(longest_run, run_starts[i + 1] - run_starts[i]);
  }
  // Each range of tasks has its scratch: the scores and float32 sums of a run's query heads.
  const size_t scratch_floats =
      static_cast<size_t>(longest_run * (heads / kv_heads) * (std::max<int64_t>(max_len, 1) + hd));
  auto run = [&](int64_t begin, int64_t end) {
    std::vector<float> scratch(scratch_floats);
    attend(p, begin, end, scratch.data());
  };
  if (longest_run == 1) {  // a decode step: (row, kv head) tasks of equal cost, split evenly
    parallel_rows(options.pool, runs * kv_heads, /*min_rows=*/1, run);
  } else {  // a prefill's later rows read more keys: chunks taken by whichever thread is free
    const int64_t threads = options.pool != nullptr ? options.pool->threads() : 1;
    parallel_chunks(options.pool, runs * kv_heads,
                    std::max<int64_t>(1, runs * kv_heads / (threads * 8)), run);
  }
  return out;
}

}  // namespace flywheel::model
