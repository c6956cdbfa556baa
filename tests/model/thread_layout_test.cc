#include "flywheel/model/cpu/thread_layout.h"

#include <ATen/Parallel.h>

#include "gtest/gtest.h"

namespace flywheel::model {
namespace {

TEST(ThreadLayoutTest, Float32GivesTheBudgetToFlywheelsKernels) {
  const ThreadLayout l = plan_thread_layout(/*threads=*/4, at::kFloat, ThreadSplit::kAuto,
                                            /*blas=*/"OpenBLAS", /*kernels_available=*/true);
  EXPECT_TRUE(l.kernels);
  EXPECT_EQ(l.aten_threads, 1);
  EXPECT_EQ(l.blas_threads, 1);
  EXPECT_EQ(l.to_string(),
            "threads: 4 (flywheel kernels 4, ATen intra-op 1, OpenBLAS 1) for float32");
}

TEST(ThreadLayoutTest, Float32WithoutTheKernelsGivesTheBudgetToBlas) {
  for (ThreadSplit split : {ThreadSplit::kAuto, ThreadSplit::kKernels}) {
    const ThreadLayout l = plan_thread_layout(/*threads=*/4, at::kFloat, split,
                                              /*blas=*/"OpenBLAS", /*kernels_available=*/false);
    EXPECT_FALSE(l.kernels);
    EXPECT_EQ(l.aten_threads, 1);
    EXPECT_EQ(l.blas_threads, 4);
    EXPECT_EQ(l.to_string(), "threads: 4 (ATen intra-op 1, OpenBLAS 4) for float32");
  }
}

TEST(ThreadLayoutTest, Bfloat16GivesTheBudgetToTheKernelsWhereTheyRunElseToAten) {
  ThreadLayout l =
      plan_thread_layout(/*threads=*/4, at::kBFloat16, ThreadSplit::kAuto, /*blas=*/"OpenBLAS",
                         /*kernels_available=*/true);
  EXPECT_TRUE(l.kernels);
  EXPECT_EQ(l.aten_threads, 1);
  EXPECT_EQ(l.blas_threads, 1);
  EXPECT_EQ(l.to_string(),
            "threads: 4 (flywheel kernels 4, ATen intra-op 1, OpenBLAS 1) for bfloat16");
  // Without AVX512-BF16, oneDNN's GEMMs run on ATen's OpenMP pool.
  for (ThreadSplit split : {ThreadSplit::kAuto, ThreadSplit::kKernels}) {
    l = plan_thread_layout(/*threads=*/4, at::kBFloat16, split, /*blas=*/"OpenBLAS",
                           /*kernels_available=*/false);
    EXPECT_FALSE(l.kernels);
    EXPECT_EQ(l.aten_threads, 4);
    EXPECT_EQ(l.blas_threads, 1);
  }
}

TEST(ThreadLayoutTest, ForcedSplitOverridesTheDtypeRule) {
  ThreadLayout l =
      plan_thread_layout(/*threads=*/2, at::kFloat, ThreadSplit::kAten, /*blas=*/"OpenBLAS",
                         /*kernels_available=*/true);
  EXPECT_EQ(l.aten_threads, 2);
  EXPECT_EQ(l.blas_threads, 1);
  l = plan_thread_layout(/*threads=*/2, at::kBFloat16, ThreadSplit::kBlas, /*blas=*/"MKL",
                         /*kernels_available=*/true);
  EXPECT_EQ(l.aten_threads, 1);
  EXPECT_EQ(l.blas_threads, 2);
}

TEST(ThreadLayoutTest, OneThreadIsOneEverywhere) {
  const ThreadLayout l =
      plan_thread_layout(/*threads=*/1, at::kFloat, ThreadSplit::kAuto, /*blas=*/"OpenBLAS",
                         /*kernels_available=*/true);
  EXPECT_EQ(l.aten_threads, 1);
  EXPECT_EQ(l.blas_threads, 1);
}

TEST(ThreadLayoutTest, WithoutBlasControlAtenTakesTheBudgetAndTheLineSaysSo) {
  const ThreadLayout l =
      plan_thread_layout(/*threads=*/2, at::kFloat, ThreadSplit::kBlas, /*blas=*/"",
                         /*kernels_available=*/true);
  EXPECT_EQ(l.aten_threads, 2);
  EXPECT_EQ(l.blas_threads, 0);
  EXPECT_EQ(l.to_string(),
            "threads: 2 (ATen intra-op 2, BLAS threads not settable in this process) for float32");
}

TEST(ThreadLayoutTest, SplitNamesRoundTrip) {
  for (ThreadSplit s :
       {ThreadSplit::kAuto, ThreadSplit::kKernels, ThreadSplit::kBlas, ThreadSplit::kAten}) {
    ThreadSplit parsed = ThreadSplit::kAuto;
    ASSERT_TRUE(parse_thread_split(thread_split_name(s), &parsed));
    EXPECT_EQ(parsed, s);
  }
  ThreadSplit unused;
  EXPECT_FALSE(parse_thread_split("both", &unused));
}

TEST(ThreadLayoutTest, ApplySetsAtenAndBlasThreads) {
  const ThreadLayout l = apply_thread_layout({/*threads=*/2, at::kFloat, ThreadSplit::kAuto});
  EXPECT_EQ(at::get_num_threads(), l.aten_threads);
  EXPECT_EQ(current_blas_threads(), l.blas_threads);
  const ThreadLayout one = apply_thread_layout({/*threads=*/1, at::kBFloat16, ThreadSplit::kAuto});
  EXPECT_EQ(at::get_num_threads(), 1);
  EXPECT_EQ(current_blas_threads(), one.blas_threads);
}

}  // namespace
}  // namespace flywheel::model
