// One FSDP unit: the parameters of one part of the model (the embedding, one transformer block,
// the head) flattened into one buffer, padded to a multiple of the world size and split evenly:
// rank r owns elements [r * shard_numel, (r + 1) * shard_numel). The shard is the float32
// master copy and the optimizer's parameter; its gradient accumulates in shard().grad().
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "flywheel/model/decoder.h"

namespace flywheel::trainer {

struct FlatParam {
  std::string name;  // Hugging Face name
  std::vector<int64_t> shape;
  int64_t offset = 0;  // in the unit's flat buffer
  int64_t numel = 0;
  bool decay = true;  // weight decay applies
};

// Which parameters take weight decay: not norms, biases and embeddings, unless asked.
bool takes_weight_decay(const std::string& name, bool decay_all);

class FlatUnit {
 public:
  FlatUnit(std::string name, const std::vector<model::ParamSpec>& specs, int rank, int world,
           bool decay_all, at::Device device);

  const std::string& name() const { return name_; }
  const std::vector<FlatParam>& params() const { return params_; }
  int64_t numel() const { return numel_; }  // without padding
  int64_t padded_numel() const { return shard_numel_ * world_; }
  int64_t shard_numel() const { return shard_numel_; }
  int64_t shard_begin() const { return shard_numel_ * rank_; }  // first element this rank owns

  at::Tensor& shard() { return shard_; }  // float32 [shard_numel], requires grad
  const at::Tensor& shard() const { return shard_; }
  // 1 where weight decay applies, 0 elsewhere (padding included), [shard_numel] float32.
  const at::Tensor& decay_mask() const { return decay_mask_; }

  // The unit's parameters as views of `full` ([padded_numel], any dtype), by name.
  std::map<std::string, at::Tensor> views(const at::Tensor& full) const;
  // Frozen: the shard needs no gradient (LoRA's base weights).
  void freeze() { shard_.requires_grad_(false); }
  bool trainable() const { return shard_.requires_grad(); }

  // Copies this rank's part of parameter `param`'s values (its full shape) into the shard.
  void set_param(const FlatParam& param, const at::Tensor& values);

 private:
  std::string name_;
  std::vector<FlatParam> params_;
  int rank_ = 0, world_ = 1;
  int64_t numel_ = 0, shard_numel_ = 0;
  at::Tensor shard_, decay_mask_;
};

}  // namespace flywheel::trainer
