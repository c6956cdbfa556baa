// Shared-prefix packing (micro_batch.h) under mpirun (1 and 2 ranks): the layout of a tree, groups
// split to fit, what never shares, and a sharded decoder's log-probs, entropies, values and
// gradients equal to the unshared packing's (float32, <= 1e-5), with and without gradients.
#include "flywheel/trainer/micro_batch.h"

#include <ATen/ATen.h>

#include <cstdio>
#include <random>

#include "../model/test_models.h"
#include "gtest/gtest.h"
#include "mpi_test_main.h"

namespace flywheel::trainer {
namespace {

std::vector<int64_t> values_of(const at::Tensor& t) {
  at::Tensor flat = t.reshape({-1}).to(at::kLong).contiguous();
  return std::vector<int64_t>(flat.data_ptr<int64_t>(), flat.data_ptr<int64_t>() + flat.numel());
}

// Sequences that own their tokens.
struct Sequences {
  std::vector<std::vector<int32_t>> prompts, responses;

  void add(std::vector<int32_t> prompt, std::vector<int32_t> response) {
    prompts.push_back(std::move(prompt));
    responses.push_back(std::move(response));
  }
  std::vector<SequenceTokens> tokens() const {
    std::vector<SequenceTokens> out;
    for (size_t i = 0; i < prompts.size(); ++i) out.push_back({&prompts[i], &responses[i]});
    return out;
  }
};

PackOptions shared_options(int64_t max_tokens, int64_t max_response) {
  PackOptions o;
  o.max_tokens = max_tokens;
  o.max_response = max_response;
  o.shared_prefix = true;
  return o;
}

TEST(SharedPrefixTest, EqualPromptsArePackedAsOneTreeOfBranches) {
  Sequences s;
  const std::vector<int32_t> a = {10, 11, 12, 13};
  s.add(a, {1, 2});
  s.add({20, 21}, {3});
  s.add(a, {4, 5, 6});
  s.add(a, {7});
  auto mbs = pack_micro_batches(s.tokens(), shared_options(64, 3));
  ASSERT_TRUE(mbs.ok()) << mbs.status();
  ASSERT_EQ(mbs->size(), 1u);
  const MicroBatch& mb = (*mbs)[0];
  // The tree (prefix 10 11 12 once; branches 13 1 | 13 4 5 | 13), then the lone sequence.
  EXPECT_EQ(mb.tokens, 11);
  EXPECT_EQ(mb.unshared_tokens, 5 + 6 + 4 + 2);
  EXPECT_EQ(mb.sequences, (std::vector<int64_t>{0, 2, 3, 1}));
  EXPECT_EQ(values_of(mb.batch.tokens),
            (std::vector<int64_t>{10, 11, 12, 13, 1, 13, 4, 5, 13, 20, 21}));
  EXPECT_EQ(values_of(mb.batch.targets),
            (std::vector<int64_t>{11, 12, 13, 1, 2, 4, 5, 6, 7, 21, 3}));
  EXPECT_EQ(values_of(mb.batch.positions), (std::vector<int64_t>{0, 1, 2, 3, 4, 3, 4, 5, 3, 0, 1}));
  EXPECT_EQ(values_of(mb.batch.segment_ids),
            (std::vector<int64_t>{1, 1, 1, 2, 2, 3, 3, 3, 4, 5, 5}));
  ASSERT_TRUE(mb.batch.prefix_ids.defined());
  EXPECT_EQ(values_of(mb.batch.prefix_ids),
            (std::vector<int64_t>{0, 0, 0, 1, 1, 1, 1, 1, 1, 0, 0}));
  EXPECT_EQ(values_of(mb.index), (std::vector<int64_t>{3, 4, 0, 5, 6, 7, 8, 0, 0, 10, 0, 0}));
  EXPECT_EQ(values_of(mb.valid), (std::vector<int64_t>{1, 1, 0, 1, 1, 1, 1, 0, 0, 1, 0, 0}));
}

TEST(SharedPrefixTest, AGroupThatDoesNotFitIsSplitIntoTreesThatDo) {
  Sequences s;
  for (int32_t i = 0; i < 4; ++i) s.add({1, 2, 3, 4}, {i, i, i});
  auto mbs = pack_micro_batches(s.tokens(), shared_options(10, 3));
  ASSERT_TRUE(mbs.ok()) << mbs.status();
  ASSERT_EQ(mbs->size(), 2u);  // 3 + 3 + 3 positions per tree of two branches
  std::vector<int64_t> seen;
  for (const MicroBatch& mb : *mbs) {
    EXPECT_EQ(mb.tokens, 9);
    EXPECT_TRUE(mb.batch.prefix_ids.defined());
    seen.insert(seen.end(), mb.sequences.begin(), mb.sequences.end());
  }
  EXPECT_EQ(seen, (std::vector<int64_t>{0, 1, 2, 3}));
  // A sequence alone still needs its P + R - 1 positions.
  auto tight = pack_micro_batches(s.tokens(), shared_options(6, 3));
  ASSERT_TRUE(tight.ok()) << tight.status();
  EXPECT_EQ(tight->size(), 4u);
  for (const MicroBatch& mb : *tight) EXPECT_FALSE(mb.batch.prefix_ids.defined());
}

TEST(SharedPrefixTest, NothingIsSharedWhenOffForOneTokenPromptsOrWithRoutes) {
  Sequences s;
  s.add({5, 6, 7}, {1});
  s.add({5, 6, 7}, {2, 3});
  s.add({9}, {1});
  s.add({9}, {2});
  PackOptions off = shared_options(64, 2);
  off.shared_prefix = false;
  auto plain = pack_micro_batches(s.tokens(), off);
  ASSERT_TRUE(plain.ok());
  ASSERT_EQ(plain->size(), 1u);
  EXPECT_FALSE((*plain)[0].batch.prefix_ids.defined());
  EXPECT_EQ((*plain)[0].tokens, 3 + 4 + 1 + 1);
  EXPECT_EQ((*plain)[0].unshared_tokens, (*plain)[0].tokens);

  auto on = pack_micro_batches(s.tokens(), shared_options(64, 2));
  ASSERT_TRUE(on.ok());
  EXPECT_EQ((*on)[0].tokens, 2 + 1 + 2 + 1 + 1);  // the 1-token prompts stay apart

  buffer::Trajectory routed;
  routed.route_layers = 1;
  routed.route_k = 1;
  routed.route_bytes = 1;
  routed.routes = {0, 0, 0, 0};
  std::vector<SequenceTokens> with_routes = s.tokens();
  with_routes[0].routes = &routed;
  auto none = pack_micro_batches(with_routes, shared_options(64, 2));
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE((*none)[0].batch.prefix_ids.defined());
  EXPECT_EQ((*none)[0].tokens, 9);
}

// Groups of one prompt and several responses, and a lone sequence, of `vocab` tokens.
Sequences grouped_sequences(int64_t vocab) {
  std::mt19937 rng(7);
  auto token = [&] { return static_cast<int32_t>(rng() % vocab); };
  auto tokens = [&](int64_t n) {
    std::vector<int32_t> t;
    for (int64_t k = 0; k < n; ++k) t.push_back(token());
    return t;
  };
  Sequences s;
  const std::vector<int32_t> a = tokens(9), b = tokens(5);
  for (int64_t r : {3, 6, 1, 4}) s.add(a, tokens(r));
  s.add(tokens(4), tokens(5));
  for (int64_t r : {2, 6, 5}) s.add(b, tokens(r));
  return s;
}

struct Outputs {
  at::Tensor logprobs, entropy, values;     // [sequences, max_response], in input order
  std::map<std::string, at::Tensor> grads;  // by unit name, this rank's shard
};

// One forward (and with gradients a backward of a weighted sum) over the micro-batches of
// `sequences` packed with or without shared prefixes.
Outputs run(const model::ModelConfig& config, bool value_head, bool shared, bool grad,
            comm::Communicator& comm) {
  ShardingOptions options;
  options.value_head = value_head;
  auto model = ShardedDecoder::create(config, &comm, options);
  EXPECT_TRUE(model.ok()) << model.status();
  (*model)->init_random(11);
  const Sequences s = grouped_sequences(config.vocab_size);
  const int64_t R = 6, N = static_cast<int64_t>(s.prompts.size());
  PackOptions pack = shared_options(40, R);
  pack.shared_prefix = shared;
  auto mbs = pack_micro_batches(s.tokens(), pack);
  EXPECT_TRUE(mbs.ok()) << mbs.status();
  if (shared) {
    EXPECT_TRUE(std::any_of(mbs->begin(), mbs->end(),
                            [](const MicroBatch& mb) { return mb.batch.prefix_ids.defined(); }));
  }
  std::unique_ptr<at::NoGradGuard> no_grad;
  if (!grad) no_grad = std::make_unique<at::NoGradGuard>();
  const at::Tensor weights = at::linspace(-1, 1, N * R).view({N, R});
  Outputs out;
  out.logprobs = at::zeros({N, R});
  out.entropy = at::zeros({N, R});
  out.values = at::zeros({N, R});
  HeadOptions head;
  head.with_entropy = !value_head;
  for (const MicroBatch& mb : *mbs) {
    TokenOutputs t = (*model)->forward(mb.batch, head);
    at::Tensor rows = at::tensor(mb.sequences, at::kLong);
    at::Tensor per_token = unpack(mb, value_head ? t.values : t.logprobs);
    if (grad) (per_token * weights.index_select(0, rows)).sum().backward();
    at::NoGradGuard detached;
    (value_head ? out.values : out.logprobs).index_copy_(0, rows, per_token.detach());
    if (!value_head) out.entropy.index_copy_(0, rows, unpack(mb, t.entropy).detach());
  }
  if (grad) {
    for (FlatUnit& unit : (*model)->units()) out.grads[unit.name()] = unit.shard().grad().clone();
  }
  return out;
}

double max_diff(const at::Tensor& a, const at::Tensor& b) {
  return (a - b).abs().max().item<double>();
}

TEST(SharedPrefixTest, SharedAndUnsharedPackingsGiveEqualOutputsAndGradients) {
  auto world = flywheel::testing::world_communicator();
  for (const std::string family : {"qwen2", "qwen3"}) {
    const model::ModelConfig config = model::testing::tiny_config(family);
    for (bool value_head : {false, true}) {
      for (bool grad : {true, false}) {
        SCOPED_TRACE(family + (value_head ? " critic" : " policy") + (grad ? " grad" : " no grad"));
        const Outputs plain = run(config, value_head, false, grad, *world);
        const Outputs shared = run(config, value_head, true, grad, *world);
        const double outputs = std::max({max_diff(plain.logprobs, shared.logprobs),
                                         max_diff(plain.entropy, shared.entropy),
                                         max_diff(plain.values, shared.values)});
        EXPECT_LE(outputs, 1e-5);
        // Not trivially equal: the outputs are there.
        EXPECT_GT((value_head ? plain.values : plain.logprobs).abs().sum().item<double>(), 0);
        // Gradients relative to the largest of their unit (sums over every position: a critic's
        // reach 10 and more).
        double grads = 0;
        for (const auto& [name, g] : plain.grads) {
          ASSERT_TRUE(g.defined()) << name;
          const double scale = g.abs().max().item<double>();
          EXPECT_GT(scale, 0) << name;
          grads = std::max(grads, max_diff(g, shared.grads.at(name)) / std::max(scale, 1.0));
        }
        EXPECT_LE(grads, 1e-5);
        if (world->rank() == 0) {
          std::printf("  %s %s %s: max |output diff| %.3g, max |grad diff| / max(1, |grad|) %.3g\n",
                      family.c_str(), value_head ? "critic" : "policy", grad ? "grad" : "no grad",
                      outputs, grads);
        }
      }
    }
  }
}

}  // namespace
}  // namespace flywheel::trainer

int main(int argc, char** argv) { return flywheel::testing::run_mpi_tests(argc, argv); }
