// How a process splits its thread budget between ATen's intra-op pool (OpenMP), the BLAS
// library's own pool and flywheel's kernels (small_gemm.h, on a WorkerPool).
//
// Debian's LibTorch runs float32 GEMMs in the system OpenBLAS, whose pthread pool is separate
// from ATen's OpenMP pool: with both at N threads on N cores, ATen's threads spin while OpenBLAS
// runs, and float32 decode on 2 threads ran at 120 instead of 192 tokens/s. Each pool's threads
// wait for more work for a while after a call, so only one pool should hold the budget at a time.
// Inference projections run in flywheel's kernels where the CPU has them (float32: AVX2 or
// AVX-512, faster than OpenBLAS at every batch size measured; bfloat16: AVX512-BF16, faster than
// oneDNN below batch 64, or AVX2 widening it to float32, where oneDNN has no bfloat16 kernel;
// docs/benchmarks.md), so they get the budget and ATen and BLAS one thread each; elsewhere (and
// in training) bfloat16 GEMMs run in oneDNN inside the OpenMP pool. The
// layout is set at start through the BLAS library's own functions, found at run time, so no
// environment variable is needed and a LibTorch without them still links.
#pragma once

#include <string>

#include <c10/core/ScalarType.h>

#include "flywheel/core/options/cluster_options.h"

namespace flywheel::model {

// cluster.thread_split:
//   kAuto:    kKernels where flywheel's kernels run the dtype; else kBlas for float32 and kAten
//             for bfloat16
//   kKernels: ATen intra-op 1 thread, BLAS 1, flywheel's kernels the whole budget
//   kBlas:    ATen intra-op 1 thread, BLAS the whole budget
//   kAten:    ATen intra-op the whole budget, BLAS 1 thread
using ThreadSplit = core::ThreadSplit;

// "auto" | "kernels" | "blas" | "aten" (the spellings of cluster.thread_split and
// --thread-split; core's choice table).
const char* thread_split_name(ThreadSplit split);
bool parse_thread_split(const std::string& name, ThreadSplit* split);

struct ThreadLayoutOptions {
  static constexpr int kDefaultThreads = 0;
  int threads = kDefaultThreads;      // budget; kDefaultThreads = at::get_num_threads() at the time
                                      // (OMP_NUM_THREADS if set, else the cores)
  at::ScalarType dtype = at::kFloat;  // the compute dtype of the process's model
  ThreadSplit split = ThreadSplit::kAuto;
};

struct ThreadLayout {
  int threads = 1;       // the budget; flywheel's kernels always run on all of it
  int aten_threads = 1;  // ATen intra-op threads
  int blas_threads = 0;  // BLAS threads; 0 = not settable (no BLAS control in this process)
  std::string blas;      // "OpenBLAS" | "MKL" | "" (none found)
  at::ScalarType dtype = at::kFloat;
  bool kernels = false;  // flywheel's kernels hold the budget (split kKernels)

  // One log line, e.g. "threads: 2 (flywheel kernels 2, ATen intra-op 1, OpenBLAS 1) for float32".
  std::string to_string() const;
};

// The layout for `threads` (>= 1) in `dtype` under `split`, given the name of the BLAS library
// whose threads can be set ("" = none: ATen takes the whole budget and BLAS is left alone) and
// whether flywheel's kernels run `dtype` on this CPU (small_gemm_supports). Pure.
ThreadLayout plan_thread_layout(int threads, at::ScalarType dtype, ThreadSplit split,
                                const std::string& blas, bool kernels_available);

// Plans the layout for `options` with the BLAS control this process has (openblas_set_num_threads
// or mkl_set_num_threads, looked up with dlsym) and applies it: at::set_num_threads, then the
// BLAS thread count. Process-wide by nature: call it once at start, before the model runs.
ThreadLayout apply_thread_layout(const ThreadLayoutOptions& options);

// The BLAS threads this process runs now (openblas_get_num_threads / mkl_get_max_threads); 0 when
// there is no BLAS control.
int current_blas_threads();

}  // namespace flywheel::model
