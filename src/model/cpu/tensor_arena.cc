#include "flywheel/model/cpu/tensor_arena.h"

#include <algorithm>

#include <c10/util/accumulate.h>

namespace flywheel::model {
namespace {

constexpr int64_t kAlignment = 64;

std::vector<at::Tensor> in_one_block(const std::vector<std::vector<int64_t>>& shapes,
                                     const at::TensorOptions& options, bool zeroed) {
  TORCH_CHECK(options.device().is_cpu(), "tensors in one block: CPU tensors only, not ",
              options.device());
  const int64_t element = static_cast<int64_t>(c10::elementSize(options.dtype().toScalarType()));
  std::vector<int64_t> offsets;
  int64_t bytes = 0;
  for (const std::vector<int64_t>& shape : shapes) {
    offsets.push_back(bytes);
    bytes += (c10::multiply_integers(shape) * element + kAlignment - 1) / kAlignment * kAlignment;
  }
  // The block is a byte tensor, so that it comes from LibTorch's CPU allocator (huge pages when
  // cpu_allocator.h's is installed); every tensor's deleter holds a reference to it.
  at::Tensor block = at::empty({std::max<int64_t>(bytes, 1)}, at::TensorOptions(at::kByte));
  if (zeroed) block.zero_();
  uint8_t* base = block.data_ptr<uint8_t>();
  std::vector<at::Tensor> tensors;
  tensors.reserve(shapes.size());
  for (size_t i = 0; i < shapes.size(); ++i) {
    tensors.push_back(at::from_blob(
        base + offsets[i], shapes[i], [block](void*) {}, options));
  }
  return tensors;
}

}  // namespace

std::vector<at::Tensor> empty_in_one_block(const std::vector<std::vector<int64_t>>& shapes,
                                           const at::TensorOptions& options) {
  return in_one_block(shapes, options, /*zeroed=*/false);
}

std::vector<at::Tensor> zeros_in_one_block(const std::vector<std::vector<int64_t>>& shapes,
                                           const at::TensorOptions& options) {
  return in_one_block(shapes, options, /*zeroed=*/true);
}

}  // namespace flywheel::model
