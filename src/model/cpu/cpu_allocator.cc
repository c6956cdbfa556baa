#include "flywheel/model/cpu/cpu_allocator.h"

#include <malloc.h>
#include <sys/mman.h>

#include <climits>
#include <cstdlib>
#include <mutex>

#include <c10/core/CPUAllocator.h>
#include <torch/version.h>

namespace flywheel::model {
namespace {

constexpr size_t kHugePage = size_t{2} << 20;
constexpr size_t kThreshold = size_t{4} << 20;

// Both LibTorch's default allocator and this one hand out memory that free() releases, so one raw
// deleter serves every pointer (LibTorch's raw_allocate/raw_deallocate need one).
void release(void* p) { std::free(p); }

class HugePageAllocator final : public c10::Allocator {
 public:
  explicit HugePageAllocator(c10::Allocator* base) : base_(base) {}

#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 3)
  c10::DataPtr allocate(size_t n) override { return allocate_impl(n); }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
#else
  c10::DataPtr allocate(size_t n) const override { return allocate_impl(n); }
#endif
  c10::DeleterFnPtr raw_deleter() const override { return &release; }

 private:
  c10::DataPtr allocate_impl(size_t n) const {
    if (n < kThreshold) return base_->allocate(n);
    const size_t size = (n + kHugePage - 1) / kHugePage * kHugePage;
    void* p = std::aligned_alloc(kHugePage, size);
    TORCH_CHECK(p != nullptr, "cannot allocate ", n, " bytes of CPU memory");
    madvise(p, size, MADV_HUGEPAGE);  // advisory: without huge pages it is still memory
    return {p, p, &release, c10::Device(c10::DeviceType::CPU)};
  }

  c10::Allocator* base_;
};

}  // namespace

void use_huge_pages_for_large_cpu_tensors() {
  static std::once_flag once;
  std::call_once(once, [] {
    // Lives for the process: tensors may be released at exit, after statics are destroyed.
    static auto* allocator = new HugePageAllocator(c10::GetCPUAllocator());
    c10::SetCPUAllocator(allocator, /*priority=*/1);
  });
}

void keep_freed_cpu_memory_for_reuse(FreedMemoryReuse use) {
  // glibc's malloc keeps freed blocks below the mmap threshold for reuse instead of unmapping
  // them, and returns free memory at the top of its heap only beyond the trim threshold.
  const bool learner = use == FreedMemoryReuse::kLearner;
  mallopt(M_MMAP_THRESHOLD, learner ? 1 << 30 : 64 << 20);
  mallopt(M_TRIM_THRESHOLD, learner ? INT_MAX : 256 << 20);
}

}  // namespace flywheel::model
