// LibTorch's CPU allocator with transparent huge pages for large tensors.
//
// Every large CPU tensor LibTorch allocates is fresh memory from the kernel, touched page by page:
// on the VMs flywheel is measured on a first touch costs ~11 us per 4 KiB page (1.2 s per 400
// MB), which made page faults a quarter of a training step. Tensors of 4 MiB or more are instead
// allocated 2 MiB-aligned and advised MADV_HUGEPAGE (0.025 s per 400 MB once the kernel has huge
// pages to give); smaller ones keep LibTorch's allocator.
#pragma once

namespace flywheel::model {

// Installs the allocator for the rest of the process (once; later calls do nothing). Call it at
// startup, before tensors exist. A process-wide setting by nature: LibTorch has one CPU
// allocator.
void use_huge_pages_for_large_cpu_tensors();

// What a process keeps of the CPU memory it frees (keep_freed_cpu_memory_for_reuse).
enum class FreedMemoryReuse {
  // Processes that generate: a decode step frees and reallocates the same activation sizes every
  // step, and page faults on fresh ones took ~10% of a float32 batch-64 step. glibc keeps freed
  // blocks below 64 MiB for reuse (M_MMAP_THRESHOLD) and up to 256 MiB of free heap
  // (M_TRIM_THRESHOLD).
  kGenerator,
  // Learners: a step frees and reallocates the same gradients, gathered weights and log-prob
  // chunks (131 MB of float32 logits per 1024 positions of a 32k vocabulary) every step. Blocks
  // below 1 GiB are kept, and up to 2 GiB of free heap, so that the process holds about its
  // step's peak, as LibTorch's CUDA caching allocator does (rank 0's controller, which shares
  // the process, bounds its buffer by capacity). Zeroing fresh pages had cost a bf16 learner
  // 18-29% of its step (docs/benchmarks.md, learner_bench).
  kLearner,
};

// Tells glibc's malloc to keep freed memory for reuse instead of returning it to the kernel, as
// `use` says. Not for servers whose memory must shrink back (the buffer). Process-wide; call it
// at startup.
void keep_freed_cpu_memory_for_reuse(FreedMemoryReuse use = FreedMemoryReuse::kGenerator);

}  // namespace flywheel::model
