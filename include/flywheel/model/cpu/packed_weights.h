// Weights kept in the layout of the AVX512-BF16 projection kernel (small_gemm.h), so that decode
// steps read them as they are instead of packing them on every call.
//
// small_linear reads a bfloat16 w in panels of 16 rows with each pair of k side by side
// (small_gemm_kernels.h). Without PackedWeights it packs the panels as it goes, one more pass
// over w per call, which costs little when many rows of x share it (a prefill, the learner's
// log-prob pass) and up to half a decode step's time at one row. The packed copies hold as many
// bytes as the weights. Either way small_linear returns the same bits.
#pragma once

#include <cstdint>
#include <limits>
#include <mutex>
#include <unordered_map>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/core/TensorImpl.h>
#include <c10/core/UndefinedTensorImpl.h>
#include <c10/util/intrusive_ptr.h>

namespace flywheel::model {

class PackedWeights {
 public:
  // Packs weights while the copies held stay within max_bytes; past it (or when memory runs out)
  // panels() returns an undefined tensor and small_linear packs per call.
  explicit PackedWeights(int64_t max_bytes = std::numeric_limits<int64_t>::max())
      : max_bytes_(max_bytes) {}

  // Whether small_linear reads packed weights on this CPU: bfloat16 with AVX512-BF16.
  static bool used_for(at::ScalarType dtype);

  // w [N, K] (bfloat16, contiguous, on the CPU) in the kernel's layout: packed on first use and
  // again whenever w has changed since (its data pointer, shape or version counter: in-place
  // writes such as copy_ bump it). Thread-safe. The result stays valid while the caller holds it.
  // Undefined where w is not kept packed: an inference tensor (it counts no versions), or past
  // max_bytes.
  at::Tensor panels(const at::Tensor& w);

  // Marks every packed copy stale: the next use of a weight packs it again, into the memory its
  // copy already holds (no fresh pages). For writes that bypass the version counter (through
  // data_ptr); writes through LibTorch (copy_) need none.
  void clear();

  // Bytes of the packed copies held.
  int64_t bytes() const;

 private:
  struct Entry {
    // Keeps w's TensorImpl from being freed (and its address reused by another) while listed.
    c10::weak_intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl> owner;
    Entry(const c10::intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl>& impl)
        : owner(impl) {}
    const void* data = nullptr;
    std::vector<int64_t> sizes;
    uint32_t version = 0;
    bool stale = false;  // clear() was called since it was packed
    at::Tensor packed;
  };

  // Room for a packed copy: a view of the current 64 MiB slab (a new one when it is full), or a
  // tensor of its own past that size. Slabs are large enough for LibTorch's allocator to give
  // them transparent huge pages (cpu_allocator.h), where a copy of its own (most weights: 0.4-3 MB
  // in a 125M model) would be faulted in 4 KiB pages, ~0.7 s for 250 MB on the VMs measured, on
  // the first request; the decode steps that read them every step then miss the TLB less.
  at::Tensor allocate(int64_t elements, const at::TensorOptions& options);
  // Bytes of the copies held, but `except`'s (the caller holds mu_).
  int64_t held_bytes(const c10::TensorImpl* except) const;

  const int64_t max_bytes_;
  mutable std::mutex mu_;
  std::unordered_map<const c10::TensorImpl*, Entry> entries_;
  at::Tensor slab_;  // bfloat16 [kSlabElements]; entries hold views of it (and of earlier ones)
  int64_t slab_used_ = 0;
};

}  // namespace flywheel::model
