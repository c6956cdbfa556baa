#include "flywheel/buffer/weight_delta.h"

#include <zstd.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <thread>
#include <type_traits>

#include "absl/strings/str_cat.h"

namespace flywheel::buffer {
namespace {

// Calls `piece(offset, size, element_bytes)` for every byte range of a payload of `total` bytes:
// each tensor's with its element size, and the gaps between tensors (and after the last) as
// single bytes.
template <typename Piece>
void for_each_piece(const std::vector<core::WeightTensor>& tensors, uint64_t total, Piece&& piece) {
  uint64_t at = 0;
  for (const core::WeightTensor& t : tensors) {
    if (t.offset > at) piece(at, t.offset - at, 1);
    piece(t.offset, t.size, std::max(core::dtype_bytes(t.dtype), 1));
    at = t.offset + t.size;
  }
  if (total > at) piece(at, total - at, 1);
}

// Element i's byte j of a XOR b goes to out[j * n + i], for n elements of W bytes (little-endian
// words: one load from each input per element).
template <int W>
void split_planes(const unsigned char* a, const unsigned char* b, uint64_t n, unsigned char* out) {
  using Word = std::conditional_t<W == 4, uint32_t, std::conditional_t<W == 2, uint16_t, uint8_t>>;
  for (uint64_t i = 0; i < n; ++i) {
    Word x, y;
    std::memcpy(&x, a + i * W, W);
    std::memcpy(&y, b + i * W, W);
    x ^= y;
    for (int j = 0; j < W; ++j) out[j * n + i] = static_cast<unsigned char>(x >> (8 * j));
  }
}

// The inverse of split_planes: XORs the planes' bytes into the n elements of `bytes`.
template <int W>
void merge_planes(const unsigned char* planes, uint64_t n, unsigned char* bytes) {
  using Word = std::conditional_t<W == 4, uint32_t, std::conditional_t<W == 2, uint16_t, uint8_t>>;
  for (uint64_t i = 0; i < n; ++i) {
    Word x = 0, y;
    for (int j = 0; j < W; ++j)
      x |= static_cast<Word>(static_cast<Word>(planes[j * n + i]) << (8 * j));
    std::memcpy(&y, bytes + i * W, W);
    y ^= x;
    std::memcpy(bytes + i * W, &y, W);
  }
}

}  // namespace

bool same_layout(const std::vector<core::WeightTensor>& a,
                 const std::vector<core::WeightTensor>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].name != b[i].name || a[i].dtype != b[i].dtype || a[i].shape != b[i].shape ||
        a[i].offset != b[i].offset || a[i].size != b[i].size) {
      return false;
    }
  }
  return true;
}

absl::StatusOr<std::string> encode_weight_delta(const core::PublishedWeights& base,
                                                const core::PublishedWeights& next,
                                                const DeltaCodecOptions& options,
                                                DeltaBuffers* buffers) {
  if (!same_layout(base.tensors, next.tensors) || base.payload.size() != next.payload.size()) {
    return absl::InvalidArgumentError(absl::StrCat("version ", next.version,
                                                   " has another layout than version ",
                                                   base.version, ": no delta between them"));
  }
  // XOR, byte planes: element i's byte j goes to offset + j * elements + i.
  std::string& planes = buffers->planes;
  planes.resize(next.payload.size());
  const auto* a = reinterpret_cast<const unsigned char*>(base.payload.data());
  const auto* b = reinterpret_cast<const unsigned char*>(next.payload.data());
  auto* out = reinterpret_cast<unsigned char*>(planes.data());
  struct Piece {
    uint64_t at, size;
    int width;
  };
  std::vector<Piece> pieces;
  for_each_piece(next.tensors, next.payload.size(), [&](uint64_t at, uint64_t size, int width) {
    pieces.push_back({at, size, width});
  });
  const auto split = [&](size_t from, size_t to) {
    for (size_t k = from; k < to; ++k) {
      const Piece& p = pieces[k];
      switch (p.width) {
        case 4:
          split_planes<4>(a + p.at, b + p.at, p.size / 4, out + p.at);
          break;
        case 2:
          split_planes<2>(a + p.at, b + p.at, p.size / 2, out + p.at);
          break;
        default:
          split_planes<1>(a + p.at, b + p.at, p.size, out + p.at);
      }
    }
  };
  // Threads take runs of pieces of about equal bytes.
  const int threads = std::max(1, std::min<int>(options.threads, static_cast<int>(pieces.size())));
  std::vector<std::thread> workers;
  size_t from = 0;
  for (int t = 1; t < threads; ++t) {
    const uint64_t until = next.payload.size() * t / threads;
    size_t to = from;
    while (to < pieces.size() && pieces[to].at < until) ++to;
    workers.emplace_back(split, from, to);
    from = to;
  }
  split(from, pieces.size());
  for (std::thread& w : workers) w.join();
  std::string& compressed = buffers->compressed;
  compressed.resize(ZSTD_compressBound(planes.size()));
  std::unique_ptr<ZSTD_CCtx, size_t (*)(ZSTD_CCtx*)> context(ZSTD_createCCtx(), ZSTD_freeCCtx);
  ZSTD_CCtx_setParameter(context.get(), ZSTD_c_compressionLevel,
                         std::clamp(options.level, 1, ZSTD_maxCLevel()));
  if (options.threads > 1) {  // an error (a libzstd built without threads) leaves it at 1
    ZSTD_CCtx_setParameter(context.get(), ZSTD_c_nbWorkers, options.threads);
  }
  const size_t n = ZSTD_compress2(context.get(), compressed.data(), compressed.size(),
                                  planes.data(), planes.size());
  if (ZSTD_isError(n)) {
    return absl::InternalError(absl::StrCat("zstd: ", ZSTD_getErrorName(n)));
  }
  return std::string(compressed.data(), n);
}

absl::Status apply_weight_delta(std::string_view delta,
                                const std::vector<core::WeightTensor>& tensors,
                                std::string* payload, DeltaBuffers* buffers) {
  std::string* scratch = &buffers->planes;
  const unsigned long long size = ZSTD_getFrameContentSize(delta.data(), delta.size());
  if (size == ZSTD_CONTENTSIZE_ERROR || size == ZSTD_CONTENTSIZE_UNKNOWN ||
      size != payload->size()) {
    return absl::DataLossError(absl::StrCat("weight delta: not a zstd frame of the payload's ",
                                            payload->size(), " bytes"));
  }
  scratch->resize(payload->size());
  const size_t n = ZSTD_decompress(scratch->data(), scratch->size(), delta.data(), delta.size());
  if (ZSTD_isError(n) || n != payload->size()) {
    return absl::DataLossError(
        absl::StrCat("weight delta: ", ZSTD_isError(n) ? ZSTD_getErrorName(n) : "short frame"));
  }
  const auto* planes = reinterpret_cast<const unsigned char*>(scratch->data());
  auto* bytes = reinterpret_cast<unsigned char*>(payload->data());
  for_each_piece(tensors, payload->size(), [&](uint64_t at, uint64_t size, int width) {
    switch (width) {
      case 4:
        return merge_planes<4>(planes + at, size / 4, bytes + at);
      case 2:
        return merge_planes<2>(planes + at, size / 2, bytes + at);
      default:
        return merge_planes<1>(planes + at, size, bytes + at);
    }
  });
  return absl::OkStatus();
}

}  // namespace flywheel::buffer
