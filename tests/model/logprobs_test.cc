#include "flywheel/model/logprobs.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <c10/core/CPUAllocator.h>
#include <torch/version.h>

#include <atomic>

#include "flywheel/model/cpu/kernel_linear.h"
#include "gtest/gtest.h"

namespace flywheel::model {
namespace {

struct Inputs {
  at::Tensor hidden, weight, targets;
};

Inputs make_inputs(int64_t B, int64_t T, int64_t H, int64_t V, uint64_t seed) {
  at::Generator gen = at::detail::createCPUGenerator(seed);
  Inputs in;
  in.hidden = at::empty({B, T, H}).normal_(0, 1, gen).requires_grad_(true);
  in.weight = at::empty({V, H}).normal_(0, 0.5, gen).requires_grad_(true);
  in.targets = at::empty({B, T}, at::kLong).random_(0, V, gen);
  return in;
}

TEST(TokenLogprobsTest, ChunkedValuesAndGradientsEqualNaiveLogSoftmax) {
  for (double temperature : {1.0, 0.7}) {
    for (int64_t chunk : {1, 3, 5, 1000}) {
      Inputs a = make_inputs(2, 5, 8, 31, 42);
      Inputs b = make_inputs(2, 5, 8, 31, 42);
      TokenLogprobOptions options;
      options.temperature = temperature;
      options.chunk_size = chunk;
      options.with_entropy = true;
      TokenLogprobs chunked = token_logprobs(a.hidden, a.weight, a.targets, options);

      at::Tensor logp = at::log_softmax(at::matmul(b.hidden, b.weight.t()) / temperature, -1);
      at::Tensor naive = logp.gather(-1, b.targets.unsqueeze(-1)).squeeze(-1);
      at::Tensor naive_entropy = -(logp.exp() * logp).sum(-1);
      ASSERT_TRUE(at::allclose(chunked.logprobs, naive, 1e-5, 1e-5));
      ASSERT_TRUE(at::allclose(chunked.entropy, naive_entropy, 1e-5, 1e-5));

      // A loss mixing both outputs with distinct per-position weights.
      at::Tensor w1 = at::linspace(-1, 2, 10).view({2, 5});
      at::Tensor w2 = at::linspace(0.5, -0.5, 10).view({2, 5});
      (chunked.logprobs * w1 + chunked.entropy * w2).sum().backward();
      (naive * w1 + naive_entropy * w2).sum().backward();
      EXPECT_TRUE(at::allclose(a.hidden.grad(), b.hidden.grad(), 1e-4, 1e-5))
          << "T=" << temperature << " chunk=" << chunk;
      EXPECT_TRUE(at::allclose(a.weight.grad(), b.weight.grad(), 1e-4, 1e-5))
          << "T=" << temperature << " chunk=" << chunk;
    }
  }
}

TEST(TokenLogprobsTest, GradientOfLogprobsAloneMatches) {
  Inputs a = make_inputs(3, 4, 6, 17, 7);
  Inputs b = make_inputs(3, 4, 6, 17, 7);
  TokenLogprobOptions options;
  options.chunk_size = 5;
  token_logprobs(a.hidden, a.weight, a.targets, options).logprobs.sum().backward();
  at::log_softmax(at::matmul(b.hidden, b.weight.t()), -1)
      .gather(-1, b.targets.unsqueeze(-1))
      .sum()
      .backward();
  EXPECT_TRUE(at::allclose(a.hidden.grad(), b.hidden.grad(), 1e-4, 1e-5));
  EXPECT_TRUE(at::allclose(a.weight.grad(), b.weight.grad(), 1e-4, 1e-5));
}

TEST(TokenLogprobsTest, Bfloat16HiddenIsAccumulatedInFloat32) {
  Inputs a = make_inputs(1, 6, 8, 29, 9);
  at::Tensor h = a.hidden.detach().to(at::kBFloat16), w = a.weight.detach().to(at::kBFloat16);
  TokenLogprobs lp = token_logprobs(h, w, a.targets);
  // LibTorch's bfloat16 GEMM rounds the logits to bfloat16; flywheel's kernels, which take the
  // head's products where LibTorch has no native bfloat16 (kernel_linear.h), keep their float32
  // sums.
  const at::Tensor logits = bf16_projections_in_kernels()
                                ? at::matmul(h.to(at::kDouble), w.to(at::kDouble).t())
                                : at::matmul(h, w.t()).to(at::kDouble);
  at::Tensor ref =
      at::log_softmax(logits, -1).gather(-1, a.targets.unsqueeze(-1)).squeeze(-1).to(at::kFloat);
  EXPECT_EQ(lp.logprobs.scalar_type(), at::kFloat);
  EXPECT_TRUE(at::allclose(lp.logprobs, ref, 1e-4, 1e-4))
      << (lp.logprobs - ref).abs().max().item<float>();
}

// Counts CPU allocations of at least `threshold` bytes while installed.
class CountingAllocator final : public c10::Allocator {
 public:
  explicit CountingAllocator(size_t threshold)
      : base_(c10::GetCPUAllocator()), threshold_(threshold) {
    c10::SetCPUAllocator(this);
  }
  ~CountingAllocator() override { c10::SetCPUAllocator(base_); }
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 3)
  c10::DataPtr allocate(size_t n) override {
    if (n >= threshold_) ++large_;
    return base_->allocate(n);
  }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
#else
  c10::DataPtr allocate(size_t n) const override {
    if (n >= threshold_) ++large_;
    return base_->allocate(n);
  }
#endif
  c10::DeleterFnPtr raw_deleter() const override { return base_->raw_deleter(); }
  int64_t large() const { return large_; }

 private:
  c10::Allocator* base_;
  size_t threshold_;
  mutable std::atomic<int64_t> large_{0};
};

// The backward of a bfloat16 head converts it to float32 in blocks: the only float32 buffer of
// the head's full size is its gradient (once), not a copy of the head per chunk. Chunks of 8
// positions make blocks of 512 vocabulary rows; chunks of 48, where flywheel's kernels take the
// products (kernel_linear.h), blocks of 2048 (their cap) and 1024 instead of 3072.
TEST(TokenLogprobsTest, Bfloat16HeadIsNotCopiedToFloat32PerChunk) {
  const int64_t V = 4096, H = 64;
  Inputs a = make_inputs(1, 64, H, V, 3);
  for (int64_t chunk_size : {8, 48}) {
    at::Tensor h = a.hidden.detach().to(at::kBFloat16).requires_grad_(true);
    // Small logits, so that bfloat16 rounding of the forward leaves the gradients comparable.
    at::Tensor w = (a.weight.detach() * 0.1).to(at::kBFloat16).requires_grad_(true);
    TokenLogprobOptions options;
    options.chunk_size = chunk_size;
    TokenLogprobs lp = token_logprobs(h, w, a.targets, options);
    int64_t large = 0;
    {
      CountingAllocator counting(/*threshold=*/V * H * sizeof(float));
      lp.logprobs.sum().backward();
      large = counting.large();
    }
    EXPECT_LE(large, 1) << "float32 buffers of the head's size allocated in backward, chunks of "
                        << chunk_size;
    // And the gradients still equal float32 arithmetic on the bfloat16 values.
    at::Tensor hf = h.detach().to(at::kFloat).requires_grad_(true);
    at::Tensor wf = w.detach().to(at::kFloat).requires_grad_(true);
    at::log_softmax(at::matmul(hf, wf.t()), -1)
        .gather(-1, a.targets.unsqueeze(-1))
        .sum()
        .backward();
    EXPECT_TRUE(at::allclose(w.grad().to(at::kFloat), wf.grad(), 1e-2, 1e-2)) << chunk_size;
    EXPECT_TRUE(at::allclose(h.grad().to(at::kFloat), hf.grad(), 1e-2, 1e-2)) << chunk_size;
  }
}

// One chunk of every position, of at least H positions so that LibTorch multiplies the bfloat16
// head whole (CPUs with native bf16, and CUDA; head_backward's blocks): the head's gradient is the
// bfloat16 product itself, with no float32 buffer of the head's size (the float32 sum of one
// product, rounded back, had the same bits).
TEST(TokenLogprobsTest, Bfloat16HeadOfOneChunkHasNoFloat32Gradient) {
  const int64_t V = 4096, H = 128, n = 32;  // logits [n, V] stay below the head's size
  Inputs a = make_inputs(1, n, H, V, 5);
  at::Tensor h = a.hidden.detach().to(at::kBFloat16).requires_grad_(true);
  at::Tensor w = (a.weight.detach() * 0.1).to(at::kBFloat16).requires_grad_(true);
  TokenLogprobOptions options;
  options.chunk_size = 2 * H;
  TokenLogprobs lp = token_logprobs(h, w, a.targets, options);
  int64_t large = 0;
  {
    CountingAllocator counting(/*threshold=*/V * H * sizeof(float));
    lp.logprobs.sum().backward();
    large = counting.large();
  }
  // Flywheel's kernels (CPUs without native bf16) sum the head's blocks into one float32 buffer.
  EXPECT_EQ(large, bf16_projections_in_kernels() ? 1 : 0);
  EXPECT_EQ(w.grad().scalar_type(), at::kBFloat16);
  at::Tensor hf = h.detach().to(at::kFloat).requires_grad_(true);
  at::Tensor wf = w.detach().to(at::kFloat).requires_grad_(true);
  at::log_softmax(at::matmul(hf, wf.t()), -1).gather(-1, a.targets.unsqueeze(-1)).sum().backward();
  EXPECT_TRUE(at::allclose(w.grad().to(at::kFloat), wf.grad(), 1e-2, 1e-2));
  EXPECT_TRUE(at::allclose(h.grad().to(at::kFloat), hf.grad(), 1e-2, 1e-2));
}

}  // namespace
}  // namespace flywheel::model
