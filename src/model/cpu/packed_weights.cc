#include "flywheel/model/cpu/packed_weights.h"

#include <ATen/ATen.h>

#include "flywheel/model/cpu/small_gemm.h"
#include "small_gemm_kernels.h"

namespace flywheel::model {

bool PackedWeights::used_for(at::ScalarType dtype) {
  return dtype == at::kBFloat16 && avx512_bf16_supported();
}

at::Tensor PackedWeights::panels(const at::Tensor& w) {
  TORCH_CHECK(
      w.dim() == 2 && w.is_contiguous() && w.device().is_cpu() && w.scalar_type() == at::kBFloat16,
      "PackedWeights: a contiguous bfloat16 CPU matrix expected, got ", w.sizes(), " ",
      w.scalar_type());
  // Inference tensors count no versions: an in-place write could not be told apart.
  if (w.is_inference()) return {};
  const uint32_t version = static_cast<uint32_t>(w._version());
  const std::vector<int64_t> sizes(w.sizes().begin(), w.sizes().end());
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(w.unsafeGetTensorImpl());
  if (it != entries_.end() && it->second.data == w.data_ptr() && it->second.sizes == sizes &&
      it->second.version == version && !it->second.stale) {
    return it->second.packed;
  }
  // A miss: drop the copies of freed weights, then pack w.
  for (auto e = entries_.begin(); e != entries_.end();) {
    e = e->second.owner.expired() ? entries_.erase(e) : std::next(e);
  }
  const int64_t N = w.size(0), K = w.size(1);
  const int64_t elements = gemm::bf16_panels_elements(N, K);
  // w changed in place: its copy is rewritten where no caller still holds it (no fresh pages).
  at::Tensor packed;
  if (it != entries_.end() && it->second.packed.numel() == elements &&
      it->second.packed.use_count() == 1) {
    packed = it->second.packed;
  } else {
    if (held_bytes(w.unsafeGetTensorImpl()) + elements * 2 > max_bytes_) return {};
    try {
      packed = allocate(elements, w.options());
    } catch (const std::exception&) {  // out of memory (c10::Error or std::bad_alloc)
      return {};                       // packed per call instead
    }
  }
  const auto pack = gemm::kernel_fns(GemmKernel::kAvx512Bf16).pack;
  TORCH_CHECK(pack != nullptr && used_for(at::kBFloat16),
              "PackedWeights: this CPU lacks AVX512-BF16, whose kernel reads packed weights");
  pack(static_cast<const uint16_t*>(w.data_ptr()), K, N, K, 0,
       (N + gemm::kPanelRows - 1) / gemm::kPanelRows, static_cast<uint16_t*>(packed.data_ptr()));
  Entry entry(w.getIntrusivePtr());
  entry.data = w.data_ptr();
  entry.sizes = sizes;
  entry.version = version;
  entry.packed = packed;
  entries_.insert_or_assign(w.unsafeGetTensorImpl(), std::move(entry));
  return packed;
}

at::Tensor PackedWeights::allocate(int64_t elements, const at::TensorOptions& options) {
  constexpr int64_t kSlabElements = int64_t{32} << 20;  // 64 MiB of bfloat16
  constexpr int64_t kAlign = 32;                        // elements: 64-byte aligned copies
  if (elements > kSlabElements) return at::empty({elements}, options);
  if (!slab_.defined() || slab_used_ + elements > slab_.numel()) {
    slab_ = at::empty({kSlabElements}, options);
    slab_used_ = 0;
  }
  at::Tensor view = slab_.narrow(0, slab_used_, elements);
  slab_used_ += (elements + kAlign - 1) / kAlign * kAlign;
  return view;
}

void PackedWeights::clear() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [impl, entry] : entries_) entry.stale = true;
}

int64_t PackedWeights::bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return held_bytes(nullptr);
}

int64_t PackedWeights::held_bytes(const c10::TensorImpl* except) const {
  int64_t total = 0;
  for (const auto& [impl, entry] : entries_) total += impl == except ? 0 : entry.packed.nbytes();
  return total;
}

}  // namespace flywheel::model
