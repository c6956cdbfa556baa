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

// Tells glibc's malloc to keep freed blocks below 64 MiB for reuse instead of returning them to
// the kernel (M_MMAP_THRESHOLD), and up to 256 MiB of free heap (M_TRIM_THRESHOLD). For processes
// that generate: a decode step frees and reallocates the same activation sizes every step, and
// page faults on fresh ones took ~10% of a float32 batch-64 step. Not for servers whose memory
// must shrink back (the buffer). Process-wide; call it at startup.
void keep_freed_cpu_memory_for_reuse();

}  // namespace flywheel::model
