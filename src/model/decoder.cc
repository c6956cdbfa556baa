#include "flywheel/model/decoder.h"

#include <cmath>
#include <limits>
#include <tuple>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/record_function.h>
#include <torch/version.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "flywheel/core/status_macros.h"
#include "flywheel/model/cpu/decode_attention.h"
#include "flywheel/model/cpu/decode_rows.h"
#include "flywheel/model/cpu/kernel_linear.h"
#include "flywheel/model/cpu/prefill_attention.h"
#include "flywheel/model/cpu/small_gemm.h"

namespace flywheel::model {

namespace {

// Where reductions (norms, softmax) run: float32, or float64 for float64 inputs (tests).
at::ScalarType reduction_type(at::ScalarType t) { return at::promote_types(t, at::kFloat); }

}  // namespace

at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  RECORD_USER_SCOPE("flywheel::norm");  // profilers' phase (learner_bench --profile)
  at::Tensor h = x.to(reduction_type(x.scalar_type()));
  at::Tensor variance = h.pow(2).mean(-1, /*keepdim=*/true);
  h = h * at::rsqrt(variance + eps);
  return weight * h.to(x.scalar_type());
}

namespace {

// Rotate-half RoPE: dimension i pairs with i + head_dim / 2.
at::Tensor apply_rope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  const int64_t half = x.size(-1) / 2;
  at::Tensor x1 = x.narrow(-1, 0, half);
  at::Tensor x2 = x.narrow(-1, half, half);
  at::Tensor rotated = at::cat({-x2, x1}, -1);
  return x * cos + rotated * sin;
}

// Where project() runs its CPU projections: on the kernels' threads (null: LibTorch), reading
// bfloat16 weights packed by `packs` where the AVX512-BF16 kernel runs (null: packed per call).
struct Kernels {
  WorkerPool* pool = nullptr;
  PackedWeights* packs = nullptr;
};

// x @ w^T + b, in out_dtype (Undefined: x's). With a pool, float32 and bfloat16 CPU projections
// that need no gradient run in flywheel's kernels (small_gemm.h), which read w in place. The
// other bfloat16 CPU projections run in kernel_linear.h where LibTorch has no bfloat16 GEMM
// (bf16_projections_in_kernels). Otherwise a single float32 row takes the matrix-vector kernel:
// GEMM with one row repacks the weight matrix and runs 2-3x slower on CPU
// (../shared/CPU_PERFORMANCE.md).
at::Tensor project(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b = {},
                   const Kernels& kernels = {},
                   at::ScalarType out_dtype = at::ScalarType::Undefined) {
  WorkerPool* pool = kernels.pool;
  std::vector<int64_t> shape(x.sizes().begin(), x.sizes().end());
  shape.back() = w.size(0);
  at::Tensor rows = x.reshape({-1, x.size(-1)});
  const at::ScalarType dtype = x.scalar_type();
  const bool float_cpu = dtype == at::kFloat && x.device().is_cpu();
  const bool needs_grad = at::GradMode::is_enabled() && (x.requires_grad() || w.requires_grad() ||
                                                         (b.defined() && b.requires_grad()));
  const bool one_dtype = x.device().is_cpu() && w.device().is_cpu() && w.scalar_type() == dtype &&
                         (!b.defined() || b.scalar_type() == dtype);
  if (pool != nullptr && one_dtype && !needs_grad && w.is_contiguous() &&
      small_gemm_supports(dtype)) {
    return small_linear(rows.stride(-1) == 1 ? rows : rows.contiguous(), w, b,
                        {GemmIsa::kAuto, pool, out_dtype, kernels.packs})
        .view(shape);
  }
  at::Tensor y;
  if (one_dtype && dtype == at::kBFloat16 && bf16_projections_in_kernels()) {
    y = kernel_linear(x, w, b);
  } else if (rows.size(0) == 1 && float_cpu) {
    at::Tensor v = rows.view({-1});
    y = (b.defined() ? at::addmv(b, w, v) : at::mv(w, v)).view(shape);
  } else {
    y = (b.defined() ? at::addmm(b, rows, w.t()) : at::mm(rows, w.t())).view(shape);
  }
  return out_dtype == at::ScalarType::Undefined ? y : y.to(out_dtype);
}

// Where a projection's LoRA adapter sits, for its dropout mask.
enum class Projection { kQ, kK, kV, kO, kGate, kUp, kDown };

// x scaled by a dropout mask of probability p drawn from `seed` (on the CPU generator, so that
// the same seed gives the same mask wherever the activations live).
at::Tensor seeded_dropout(const at::Tensor& x, double p, uint64_t seed) {
  at::Generator generator = at::detail::createCPUGenerator(seed);
  at::Tensor keep = at::empty(x.sizes(), at::kFloat).bernoulli_(1.0 - p, generator);
  return x * keep.div_(1.0 - p).to(x.device()).to(x.scalar_type());
}

bool is_contiguous_range(const std::vector<int64_t>& slots) {
  for (size_t i = 1; i < slots.size(); ++i) {
    if (slots[i] != slots[0] + static_cast<int64_t>(i)) return false;
  }
  return true;
}

// Cache reads and writes of one forward, shared by all layers.
struct CacheIndex {
  // The CPU kernels write the cache (KvCache::write_rows) and read it in place
  // (decode_attention), with the host vectors below; else LibTorch's indexing, with the tensors.
  bool in_kernels = false;
  at::Tensor rows, steps;                   // (row, step) of each valid token
  at::Tensor write_slots, write_positions;  // where each valid token goes
  at::Tensor slots;                         // slot of each row
  int64_t first_slot = -1;  // >= 0 when the rows' slots are first_slot, first_slot + 1, ...
  bool all_valid = false;   // no padding: every (row, step) is written
  // Per token (b * T + t): its row's slot, and the keys it reads (its position + 1; 0 for
  // padding), for decode_attention.
  std::vector<int64_t> host_slots, decode_lengths;
  // Per valid token: its row of the [B * T] tokens, and where it goes.
  std::vector<int64_t> host_sources, host_write_slots, host_write_positions;
};

// What every layer of one forward shares.
struct LayerContext {
  at::Tensor cos, sin, mask;          // RoPE tables and attention mask
  const CacheIndex* where = nullptr;  // with a cache: where the valid tokens go
  KvCache* cache = nullptr;
  WorkerPool* pool = nullptr;  // projections in small_gemm.h's kernels; null: LibTorch
  // Without gradients, on the pool, with float32 or bfloat16 activations: that work (norms,
  // RoPE, SiLU) runs in decode_rows.h's kernels, by rows over the pool's threads, at any T.
  bool fused_rows = false;
  at::Tensor routes;                // mixture of experts: routes to replay (ForwardBatch::routes)
  bool replay = true;               // false: routes are only compared
  RouteRecord* record = nullptr;    // where mixture-of-experts layers report their routing
  RouterOutputs* router = nullptr;  // where a mixture-of-experts layer puts its router's outputs
  const KeySlots* key_slots = nullptr;  // without a cache: attention in the engine's kernel
  double lora_dropout = 0;              // SequenceContext::lora_dropout and dropout_seed
  uint64_t dropout_seed = 0;
  PackedWeights* packs = nullptr;  // the decoder's packed weights (Kernels::packs)

  Kernels kernels() const { return {pool, packs}; }
};

// project() plus the layer's unmerged LoRA adapter of that projection, if any:
// x W^T + b + scale * (dropout(x) A^T) B^T.
at::Tensor adapted(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b,
                   const DecoderLayerWeights& layer, Projection which,
                   const LayerContext& context) {
  at::Tensor y = project(x, w, b, context.kernels());
  const LoraAdapter* adapters[] = {&layer.q_lora,    &layer.k_lora,  &layer.v_lora,   &layer.o_lora,
                                   &layer.gate_lora, &layer.up_lora, &layer.down_lora};
  const LoraAdapter& lora = *adapters[static_cast<int>(which)];
  if (!lora.a.defined()) return y;
  at::Tensor in = x;
  if (context.lora_dropout > 0) {
    const uint64_t seed = context.dropout_seed * 1000003u +
                          static_cast<uint64_t>(layer.layer) * 8u + static_cast<uint64_t>(which);
    in = seeded_dropout(x, context.lora_dropout, seed);
  }
  return y + project(project(in, lora.a, {}, context.kernels()), lora.b, {}, context.kernels()) *
                 layer.lora_scale;
}

// Self-attention of one layer; with a cache, the valid tokens are written to layer `index` of
// context.cache at context.where and the rows read their slots.
at::Tensor attention(const ModelConfig& config, const DecoderLayerWeights& layer, int64_t index,
                     const at::Tensor& x, const LayerContext& context) {
  RECORD_USER_SCOPE("flywheel::attention");
  const CacheIndex* where = context.where;
  const at::Tensor& mask = context.mask;
  KvCache* cache = context.cache;
  WorkerPool* pool = context.pool;
  const int64_t B = x.size(0), T = x.size(1), hd = config.head_dim;
  const int64_t kvh = config.num_key_value_heads;
  const int64_t groups = config.num_attention_heads / kvh;
  at::Tensor q =
      adapted(x, layer.q, layer.q_bias, layer, Projection::kQ, context).view({B, T, -1, hd});
  at::Tensor k =
      adapted(x, layer.k, layer.k_bias, layer, Projection::kK, context).view({B, T, kvh, hd});
  at::Tensor v =
      adapted(x, layer.v, layer.v_bias, layer, Projection::kV, context).view({B, T, kvh, hd});
  auto norm_and_rope = [&](const at::Tensor& t, const at::Tensor& norm) {
    if (context.fused_rows) {
      NormRopeOptions options;
      if (config.qk_norm) options.norm = norm;
      options.eps = config.rms_norm_eps;
      options.cos = context.cos;
      options.sin = context.sin;
      options.pool = pool;
      // One row per token: the tables are [B, T, 1, hd].
      return norm_rope_rows(t.view({B * T, -1, hd}), options).view(t.sizes());
    }
    return apply_rope(config.qk_norm ? rms_norm(t, norm, config.rms_norm_eps) : t, context.cos,
                      context.sin);
  };
  q = norm_and_rope(q, layer.q_norm);
  k = norm_and_rope(k, layer.k_norm);

  if (cache != nullptr && where->in_kernels) {  // the CPU kernels (CacheIndex::in_kernels)
    cache->write_rows(index, k, v, where->host_sources, where->host_write_slots,
                      where->host_write_positions);
    DecodeAttentionInputs inputs;
    inputs.q = q.reshape({B * T, -1, hd}).contiguous();
    inputs.keys = cache->keys(index);
    inputs.values = cache->values(index);
    inputs.slots = where->host_slots;
    inputs.lengths = where->decode_lengths;
    inputs.scale = 1.0 / std::sqrt(double(hd));
    at::Tensor out = decode_attention(inputs, {GemmIsa::kAuto, pool}).view({B, T, -1});
    return adapted(out, layer.o, layer.o_bias, layer, Projection::kO, context);
  }
  // keys / values: [B, kvh, L, hd].
  at::Tensor keys = k.permute({0, 2, 1, 3}), values = v.permute({0, 2, 1, 3});
  if (cache != nullptr) {
    // Write the valid tokens into their slots, then read each row's slot up to L positions.
    using at::indexing::Slice;
    const int64_t L = mask.size(-1);
    at::Tensor& cache_k = cache->keys(index);
    at::Tensor& cache_v = cache->values(index);
    at::Tensor new_k =
        where->all_valid ? k.reshape({B * T, kvh, hd}) : k.index({where->rows, where->steps});
    at::Tensor new_v =
        where->all_valid ? v.reshape({B * T, kvh, hd}) : v.index({where->rows, where->steps});
    cache_k.index_put_({where->write_slots, Slice(), where->write_positions},
                       new_k.to(cache_k.scalar_type()));
    cache_v.index_put_({where->write_slots, Slice(), where->write_positions},
                       new_v.to(cache_v.scalar_type()));
    if (where->first_slot >= 0) {  // a view: [B, kvh, L, hd] with batch dims that fold
      keys = cache_k.narrow(0, where->first_slot, B).narrow(2, 0, L);
      values = cache_v.narrow(0, where->first_slot, B).narrow(2, 0, L);
    } else {
      keys = cache_k.index_select(0, where->slots).narrow(2, 0, L);
      values = cache_v.index_select(0, where->slots).narrow(2, 0, L);
    }
  }
  if (cache == nullptr && context.key_slots != nullptr && q.device().is_cpu() &&
      small_gemm_supports(q.scalar_type())) {
    // The engine's kernel: each sequence's keys and values gathered into a slot, in order.
    TORCH_CHECK(!at::GradMode::is_enabled(), "key_slots attention has no gradient");
    const KeySlots& plan = *context.key_slots;
    auto slots_of = [&](const at::Tensor& t) {
      return t.reshape({B * T, kvh, hd})
          .index_select(0, plan.gather)
          .view({plan.slots, plan.max_len, kvh, hd})
          .permute({0, 2, 1, 3})
          .contiguous();
    };
    DecodeAttentionInputs inputs;
    inputs.q = q.reshape({B * T, -1, hd}).contiguous();
    inputs.keys = slots_of(k);
    inputs.values = slots_of(v);
    inputs.slots = plan.token_slot;
    inputs.lengths = plan.token_length;
    inputs.scale = 1.0 / std::sqrt(double(hd));
    at::Tensor out = decode_attention(inputs, {GemmIsa::kAuto, pool}).view({B, T, -1});
    return adapted(out, layer.o, layer.o_bias, layer, Projection::kO, context);
  }
  const int64_t L = keys.size(2);
  // Grouped-query attention without repeating K/V: the `groups` query heads that share kv head
  // h (query head j reads kv head j / groups) are stacked as rows of one matrix.
#if TORCH_VERSION_MAJOR >= 2
  if (x.is_cuda()) {
    // LibTorch's fused attention (2.x): the same stacking, the mask repeated for every group.
    at::Tensor qs =
        q.view({B, T, kvh, groups, hd}).permute({0, 2, 3, 1, 4}).reshape({B, kvh, groups * T, hd});
    at::Tensor allowed =
        mask.view({B, 1, 1, T, L}).expand({B, 1, groups, T, L}).reshape({B, 1, groups * T, L});
    at::Tensor fused = at::scaled_dot_product_attention(qs, keys.to(qs.scalar_type()),
                                                        values.to(qs.scalar_type()), allowed);
    fused = fused.view({B, kvh, groups, T, hd}).permute({0, 3, 1, 2, 4}).reshape({B, T, -1});
    return adapted(fused, layer.o, layer.o_bias, layer, Projection::kO, context);
  }
#endif
  if (!at::GradMode::is_enabled() && x.device().is_cpu()) {
    // Without gradients: by chunks of query tokens, on the pool's threads (prefill_attention.h).
    PrefillAttentionInputs inputs;
    inputs.q = q;
    inputs.keys = keys;
    inputs.values = values;
    inputs.mask = mask.view({B, T, L});
    inputs.scale = 1.0 / std::sqrt(double(hd));
    PrefillAttentionOptions options;
    options.pool = pool;
    return adapted(prefill_attention(inputs, options), layer.o, layer.o_bias, layer, Projection::kO,
                   context);
  }
  at::Tensor qg = q.view({B, T, kvh, groups, hd})
                      .permute({0, 2, 3, 1, 4})
                      .reshape({B, kvh, groups * T, hd})
                      .to(reduction_type(x.scalar_type()));
  at::Tensor scores = at::matmul(qg, keys.to(qg.scalar_type()).transpose(-1, -2));  // [B,kvh,g*T,L]
  scores = (scores * (1.0 / std::sqrt(double(hd)))).view({B, kvh, groups, T, L});
  scores = scores.masked_fill(mask.logical_not().view({B, 1, 1, T, L}),
                              -std::numeric_limits<float>::infinity());
  at::Tensor probs = at::softmax(scores, -1).view({B, kvh, groups * T, L});
  at::Tensor out;  // [B, kvh, g*T, hd]
  if (x.scalar_type() == at::kBFloat16 && x.device().is_cpu() && bf16_projections_in_kernels()) {
    // LibTorch's bfloat16 GEMM is emulated on this CPU: the float32 one, rounded once.
    out = at::matmul(probs, values.to(probs.scalar_type())).to(x.scalar_type());
  } else {
    out = at::matmul(probs.to(x.scalar_type()), values);
  }
  out = out.view({B, kvh, groups, T, hd}).permute({0, 3, 1, 2, 4}).reshape({B, T, -1});
  return adapted(out, layer.o, layer.o_bias, layer, Projection::kO, context);
}

// Whether a forward's row-wise work runs in decode_rows.h's kernels (LayerContext::fused_rows): no
// gradients, a pool, and activations and RoPE tables they serve (the weights' dtype and device
// are the activations').
bool fused_rows_serve(const at::Tensor& x, const at::Tensor& cos, WorkerPool* pool) {
  return pool != nullptr && !at::GradMode::is_enabled() && decode_rows_serve(x) &&
         decode_rows_serve(cos);
}

// RMSNorm of t: in decode_rows.h's kernels where the forward's row-wise work runs there.
at::Tensor row_norm(const at::Tensor& t, const at::Tensor& weight, double eps,
                    const LayerContext& context) {
  return context.fused_rows ? rms_norm_rows(t, weight, eps, context.pool)
                            : rms_norm(t, weight, eps);
}

// The SwiGLU MLP down(silu(gate(m)) * up(m)), of a dense layer (with its LoRA adapters) or an
// expert.
at::Tensor swiglu(const at::Tensor& m, const at::Tensor& gate_w, const at::Tensor& up_w,
                  const at::Tensor& down_w, const LayerContext& context) {
  const Kernels kernels = context.kernels();
  const at::Tensor gate = project(m, gate_w, {}, kernels), up = project(m, up_w, {}, kernels);
  const at::Tensor act =
      context.fused_rows ? silu_mul_rows(gate, up, context.pool) : at::silu(gate) * up;
  return project(act, down_w, {}, kernels);
}
at::Tensor swiglu(const at::Tensor& m, const DecoderLayerWeights& layer,
                  const LayerContext& context) {
  const at::Tensor gate = adapted(m, layer.gate, {}, layer, Projection::kGate, context);
  const at::Tensor up = adapted(m, layer.up, {}, layer, Projection::kUp, context);
  const at::Tensor act =
      context.fused_rows ? silu_mul_rows(gate, up, context.pool) : at::silu(gate) * up;
  return adapted(act, layer.down, {}, layer, Projection::kDown, context);
}

// A mixture-of-experts MLP (Qwen3-MoE's sparse block): the router's softmax picks each token's
// num_experts_per_tok experts of highest probability; their outputs are summed with those
// probabilities (renormalised over the chosen ones with norm_topk_prob). Each expert runs once,
// on the rows routed to it (grouped on the host), never on the others.
// With routes to replay, a replayed token uses its given experts, weighted by the router's
// probabilities of them.
at::Tensor moe_mlp(const ModelConfig& config, const DecoderLayerWeights& layer, const at::Tensor& m,
                   const LayerContext& context) {
  const int64_t k = config.num_experts_per_tok;
  const int64_t E = static_cast<int64_t>(layer.experts.size());
  const at::Tensor rows = m.reshape({-1, m.size(-1)});
  const int64_t N = rows.size(0);
  const at::Tensor probs = at::softmax(
      project(rows, layer.router, {}, context.kernels()).to(reduction_type(m.scalar_type())),
      -1);  // [N, E]
  at::Tensor weights, chosen;
  std::tie(weights, chosen) = probs.topk(k, -1);
  if (context.router != nullptr) *context.router = {probs, chosen};
  RouteRecord* record = nullptr;
  if (context.routes.defined() || context.record != nullptr) {
    int64_t moe = 0;  // this layer's place among the mixture-of-experts layers
    for (int64_t i = 0; i < layer.layer; ++i) moe += config.is_moe_layer(i) ? 1 : 0;
    // A layer run again (checkpointing's recompute) has reported already.
    if (context.record != nullptr && static_cast<int64_t>(context.record->layers.size()) == moe) {
      record = context.record;
    }
    if (context.routes.defined()) {
      const at::Tensor& routes = context.routes;
      TORCH_CHECK(routes.dim() == 4 && routes.size(0) * routes.size(1) == N &&
                      routes.size(2) > moe && routes.size(3) == k,
                  "routes to replay must be [B, T, moe_layers, ", k, "], got ", routes.sizes());
      const at::Tensor given =
          routes.select(2, moe).reshape({N, k}).to(chosen.device()).to(at::kLong);
      const at::Tensor has = given.select(1, 0).ge(0);  // [N]
      if (record != nullptr) {
        const at::Tensor differs =
            std::get<0>(given.sort(1)).ne(std::get<0>(chosen.sort(1))).any(1).logical_and(has);
        const at::Tensor counts = at::stack({has.sum(), differs.sum()}).to(at::kCPU);
        record->replayed += counts[0].item<int64_t>();
        record->disagreements += counts[1].item<int64_t>();
      }
      if (context.replay) {
        chosen = at::where(has.unsqueeze(1), given, chosen);
        weights = probs.gather(1, chosen);
      }
    }
  }
  if (config.norm_topk_prob) weights = weights / weights.sum(-1, /*keepdim=*/true);
  weights = weights.to(m.scalar_type());

  // (token, slot) pairs grouped by expert, in token order within each expert; the host copy of
  // the choices is also what a record keeps.
  const at::Tensor host = chosen.to(at::kCPU).to(at::kLong).contiguous();
  if (record != nullptr) record->layers.push_back(host.view({m.size(0), m.size(1), k}));
  const int64_t* ids = host.data_ptr<int64_t>();
  std::vector<std::vector<int64_t>> pairs(E);
  for (int64_t i = 0; i < N * k; ++i) {
    TORCH_CHECK(ids[i] >= 0 && ids[i] < E, "expert id ", ids[i], " outside [0, ", E, ")");
    pairs[ids[i]].push_back(i);
  }
  const at::Tensor flat_weights = weights.reshape({-1});
  at::Tensor out = at::zeros_like(rows);
  for (int64_t e = 0; e < E; ++e) {
    if (pairs[e].empty()) continue;
    const at::Tensor pair = at::tensor(pairs[e], at::kLong).to(rows.device());
    const at::Tensor token = at::floor_divide(pair, k);
    const ExpertWeights& expert = layer.experts[e];
    const at::Tensor y =
        swiglu(rows.index_select(0, token), expert.gate, expert.up, expert.down, context);
    out = out.index_add(0, token, y * flat_weights.index_select(0, pair).unsqueeze(1));
  }
  return out.view(m.sizes());
}

// Attention then MLP, each with its pre-norm and residual.
at::Tensor layer_forward(const ModelConfig& config, const DecoderLayerWeights& layer, int64_t index,
                         const at::Tensor& x, const LayerContext& context) {
  const double eps = config.rms_norm_eps;
  const at::Tensor normed = row_norm(x, layer.input_norm, eps, context);
  const at::Tensor h = x + attention(config, layer, index, normed, context);
  const at::Tensor m = row_norm(h, layer.post_norm, eps, context);
  if (layer.router.defined()) return h + moe_mlp(config, layer, m, context);
  return h + swiglu(m, layer, context);
}

// mask[b, t, j]: query (b, t) may read key j, without a cache.
at::Tensor training_mask(const ForwardBatch& batch, at::Device device) {
  const int64_t B = batch.tokens.size(0), T = batch.tokens.size(1);
  at::Tensor causal = at::ones({T, T}, at::TensorOptions().dtype(at::kBool).device(device)).tril();
  if (!batch.segment_ids.defined()) return causal.unsqueeze(0).expand({B, T, T});
  at::Tensor seg = batch.segment_ids.to(device);
  at::Tensor same = seg.unsqueeze(2).eq(seg.unsqueeze(1)) & seg.unsqueeze(1).ne(0);
  if (batch.prefix_ids.defined()) {  // and the shared prefix each token reads
    at::Tensor prefix = batch.prefix_ids.to(device).unsqueeze(2);
    same = same | (prefix.eq(seg.unsqueeze(1)) & prefix.ne(0));
  }
  at::Tensor self = at::eye(T, at::TensorOptions().dtype(at::kBool).device(device));
  return (same & causal) | self;
}

}  // namespace

SequenceContext sequence_context(const ModelConfig& config, const ForwardBatch& batch,
                                 at::ScalarType dtype, at::Device device) {
  TORCH_CHECK(batch.tokens.dim() == 2 && batch.positions.sizes() == batch.tokens.sizes(),
              "forward needs tokens and positions of shape [B, T]");
  SequenceContext context;
  std::tie(context.cos, context.sin) =
      rope_tables(batch.positions.to(device), rope_inverse_frequencies(config).to(device), dtype);
  context.mask = training_mask(batch, device);
  context.routes = batch.routes;
  context.replay = batch.replay;
  return context;
}

at::Tensor decoder_layer(const ModelConfig& config, const DecoderLayerWeights& weights,
                         const at::Tensor& x, const SequenceContext& context,
                         RouterOutputs* router) {
  LayerContext layer_context{context.cos, context.sin, context.mask};
  layer_context.routes = context.routes;
  layer_context.replay = context.replay;
  layer_context.record = context.record;
  layer_context.router = router;
  layer_context.lora_dropout = context.lora_dropout;
  layer_context.dropout_seed = context.dropout_seed;
  layer_context.pool = context.pool;
  layer_context.fused_rows = fused_rows_serve(x, context.cos, context.pool);
  layer_context.key_slots = context.key_slots.get();
  return layer_forward(config, weights, 0, x, layer_context);
}

at::Tensor DecoderModel::forward(const ForwardBatch& batch, KvCache* cache,
                                 RouteRecord* record) const {
  if (cache != nullptr) return forward_with_cache(batch, cache, record);
  const SequenceContext sequence =
      sequence_context(config_, batch, options_.dtype, options_.device);
  LayerContext context{sequence.cos, sequence.sin, sequence.mask};
  context.pool = pool_.get();
  context.packs = packs_.get();
  context.routes = batch.routes;
  context.replay = batch.replay;
  context.record = record;
  at::Tensor x = at::embedding(embed_, batch.tokens.to(options_.device));
  context.fused_rows = fused_rows_serve(x, context.cos, context.pool);
  for (size_t i = 0; i < layers_.size(); ++i) {
    x = layer_forward(config_, layers_[i], static_cast<int64_t>(i), x, context);
  }
  return row_norm(x, final_norm_, config_.rms_norm_eps, context);
}

at::Tensor DecoderModel::forward_with_cache(const ForwardBatch& batch, KvCache* cache,
                                            RouteRecord* record) const {
  const at::Tensor& tokens = batch.tokens;
  TORCH_CHECK(tokens.dim() == 2 && batch.positions.sizes() == tokens.sizes(),
              "forward needs tokens and positions of shape [B, T]");
  const int64_t B = tokens.size(0), T = tokens.size(1);
  const at::Device device = options_.device;
  at::Tensor positions = batch.positions.to(device);
  const auto [cos, sin] = rope_tables(positions, inv_freq_, options_.dtype);

  TORCH_CHECK(static_cast<int64_t>(batch.slots.size()) == B &&
                  static_cast<int64_t>(batch.lengths.size()) == B,
              "forward with a cache needs one slot and one length per row");
  int64_t context = 0;  // L: the longest slot extent this step reads
  at::Tensor cpu_positions = batch.positions.to(at::kCPU).to(at::kLong).contiguous();
  const int64_t* pos = cpu_positions.data_ptr<int64_t>();
  for (int64_t b = 0; b < B; ++b) {
    TORCH_CHECK(batch.lengths[b] >= 0 && batch.lengths[b] <= T, "row ", b, ": length ",
                batch.lengths[b], " outside [0, ", T, "]");
    TORCH_CHECK(batch.slots[b] >= 0 && batch.slots[b] < cache->slots(), "row ", b, ": slot ",
                batch.slots[b], " outside the cache's ", cache->slots(), " slots");
    for (int64_t t = 0; t < batch.lengths[b]; ++t) {
      TORCH_CHECK(pos[b * T + t] >= 0 && pos[b * T + t] < cache->max_len(), "row ", b,
                  ": position ", pos[b * T + t], " outside the cache length ", cache->max_len());
      context = std::max(context, pos[b * T + t] + 1);
    }
  }
  context = std::max<int64_t>(context, 1);
  // mask[b, t, j]: query (b, t) may read key j of its slot.
  at::Tensor key_pos = at::arange(context, at::TensorOptions().dtype(at::kLong).device(device));
  at::Tensor mask = key_pos.view({1, 1, context}).le(positions.unsqueeze(-1));

  at::Tensor x = at::embedding(embed_, tokens.to(device));
  // Where the valid tokens go, computed once for all layers. On the CPU kernels every token, of a
  // prefill or a decode step, reads its slot where it is in decode_attention: a token's attention
  // then depends on its own keys alone, not on the tokens beside it (the learner's proximal pass
  // computes it the same way: SequenceContext::key_slots).
  CacheIndex index;
  const at::Tensor& cache_keys = cache->keys(0);
  index.in_kernels = pool_ != nullptr && x.device().is_cpu() &&
                     small_gemm_supports(x.scalar_type()) && cache_keys.is_contiguous() &&
                     cache_keys.scalar_type() == x.scalar_type();
  std::vector<int64_t> rows, steps;
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = 0; t < batch.lengths[b]; ++t) {
      rows.push_back(b);
      steps.push_back(t);
      index.host_sources.push_back(b * T + t);
      index.host_write_slots.push_back(batch.slots[b]);
      index.host_write_positions.push_back(pos[b * T + t]);
    }
  }
  index.all_valid = static_cast<int64_t>(rows.size()) == B * T;
  if (index.in_kernels) {
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t t = 0; t < T; ++t) {
        index.host_slots.push_back(batch.slots[b]);
        index.decode_lengths.push_back(t < batch.lengths[b] ? pos[b * T + t] + 1 : 0);
      }
    }
  } else {
    auto on_device = [&](const std::vector<int64_t>& v) {
      return at::tensor(v, at::kLong).to(device);
    };
    index.rows = on_device(rows);
    index.steps = on_device(steps);
    index.write_slots = on_device(index.host_write_slots);
    index.write_positions = on_device(index.host_write_positions);
    index.slots = on_device(batch.slots);
    index.first_slot = is_contiguous_range(batch.slots) ? batch.slots[0] : -1;
  }

  LayerContext layer_context{cos, sin, mask, &index, cache, pool_.get()};
  layer_context.packs = packs_.get();
  layer_context.routes = batch.routes;
  layer_context.replay = batch.replay;
  layer_context.record = record;
  // The weights' dtype and device are the activations'.
  layer_context.fused_rows = fused_rows_serve(x, cos, pool_.get());
  for (size_t i = 0; i < layers_.size(); ++i) {
    x = layer_forward(config_, layers_[i], static_cast<int64_t>(i), x, layer_context);
  }
  return row_norm(x, final_norm_, config_.rms_norm_eps, layer_context);
}

at::Tensor DecoderModel::logits(const at::Tensor& hidden) const {
  return project(hidden, lm_head_, {}, {pool_.get(), packs_.get()}, at::kFloat);
}

}  // namespace flywheel::model
