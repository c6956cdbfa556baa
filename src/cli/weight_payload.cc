#include "weight_payload.h"

#include <cstring>
#include <map>

#include <ATen/ATen.h>

#include "absl/strings/str_cat.h"

namespace flywheel::cli {

absl::StatusOr<std::string> wire_dtype(at::ScalarType dtype) {
  switch (dtype) {
    case at::kFloat:
      return std::string("F32");
    case at::kBFloat16:
      return std::string("BF16");
    case at::kHalf:
      return std::string("F16");
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("weights cannot be published as ", at::toString(dtype)));
  }
}

absl::StatusOr<at::ScalarType> parse_wire_dtype(const std::string& name) {
  if (name == "F32") return at::kFloat;
  if (name == "BF16") return at::kBFloat16;
  if (name == "F16") return at::kHalf;
  return absl::InvalidArgumentError(absl::StrCat("unknown weight dtype '", name, "'"));
}

absl::StatusOr<buffer::PublishedWeights> gather_payload(trainer::ShardedDecoder& model,
                                                        at::ScalarType dtype, int64_t version,
                                                        int64_t bucket_bytes) {
  absl::StatusOr<std::string> name = wire_dtype(dtype);
  if (!name.ok()) return name.status();
  buffer::PublishedWeights out;
  out.version = version;
  out.bucket_bytes = static_cast<uint64_t>(bucket_bytes);
  const bool keep = model.comm().rank() == 0;
  model.for_each_full_bucket(
      bucket_bytes, dtype, [&](const std::vector<std::pair<std::string, at::Tensor>>& bucket) {
        if (!keep) return;
        for (const auto& [tensor_name, t] : bucket) {
          at::Tensor host = t.to(at::kCPU).contiguous();
          buffer::WeightTensor entry;
          entry.name = tensor_name;
          entry.dtype = *name;
          entry.shape = host.sizes().vec();
          entry.offset = out.payload.size();
          entry.size = static_cast<uint64_t>(host.numel() * host.element_size());
          out.payload.append(static_cast<const char*>(host.data_ptr()), entry.size);
          out.tensors.push_back(std::move(entry));
        }
      });
  return out;
}

absl::StatusOr<std::vector<std::pair<std::string, at::Tensor>>> payload_tensors(
    const buffer::PublishedWeights& weights) {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (const buffer::WeightTensor& entry : weights.tensors) {
    absl::StatusOr<at::ScalarType> dtype = parse_wire_dtype(entry.dtype);
    if (!dtype.ok()) return dtype.status();
    int64_t numel = 1;
    for (int64_t d : entry.shape) numel *= d;
    if (entry.offset + entry.size > weights.payload.size() ||
        static_cast<uint64_t>(numel) * at::elementSize(*dtype) != entry.size) {
      return absl::InvalidArgumentError(
          absl::StrCat("weights v", weights.version, ": tensor '", entry.name,
                       "' does not match its byte range in the payload"));
    }
    // from_blob does not take ownership; the engine copies what it stages.
    void* data = const_cast<char*>(weights.payload.data() + entry.offset);
    out.emplace_back(entry.name, at::from_blob(data, entry.shape, at::TensorOptions(*dtype)));
  }
  return out;
}

absl::StatusOr<uint32_t> parameters_crc32c(const model::DecoderModel& model,
                                           const std::vector<buffer::WeightTensor>& manifest) {
  std::map<std::string, at::Tensor> params;
  for (const auto& [name, p] : model.named_parameters()) params[name] = p;
  uint32_t crc = 0;
  for (const buffer::WeightTensor& entry : manifest) {
    auto it = params.find(entry.name);
    if (it == params.end()) {
      return absl::NotFoundError(absl::StrCat("the model has no parameter '", entry.name, "'"));
    }
    absl::StatusOr<at::ScalarType> dtype = parse_wire_dtype(entry.dtype);
    if (!dtype.ok()) return dtype.status();
    at::Tensor host = it->second.detach().to(at::kCPU, *dtype).contiguous();
    crc = buffer::crc32c_extend(crc, host.data_ptr(), host.numel() * host.element_size());
  }
  return crc;
}

}  // namespace flywheel::cli
