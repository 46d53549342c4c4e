// The training step as train and bench run it: after its first call it allocates nothing, and the
// profile of `kgpt bench --profile` puts its time under the phase and op that spent it.
#include <catch2/catch.hpp>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "config/deck.hpp"
#include "core/backend.hpp"
#include "core/profile.hpp"
#include "core/random.hpp"
#include "model/family.hpp"
#include "model/language_model.hpp"
#include "model/recompute.hpp"
#include "optim/optimizer.hpp"
#include "parallel/world.hpp"
#include "train/step.hpp"

using namespace kgpt;

namespace {

// The step reduces its loss over MPI_COMM_WORLD: a one-rank world, started once.
void start_mpi() {
  static parallel::MpiSession session(nullptr, nullptr);
}

// Every registered family, today's and any added later.
std::vector<std::string> registered_families() {
  std::vector<std::string> names;
  for (const model::Family* f : model::families()) names.push_back(f->name);
  return names;
}

// A tiny deck of the family, with grouped-query attention where the family has it (its default
// is not one key/value head per query head).
config::ResolvedDeck tiny_deck(const std::string& family, const std::string& precision, double clip) {
  const bool grouped = model::family(family).defaults.n_kv_head != 0;
  const std::string text =
      "model:\n  family: " + family + "\n  vocab_size: 67\n  n_layer: 2\n  d_model: 32\n  n_head: 4\n  mlp_mult: 3\n" +
      (grouped ? "  n_kv_head: 2\n" : "  n_kv_head: 4\n") +
      "data:\n  train_files: none_*.bin\n" +
      "train:\n  precision: " + precision + "\n  seq_len: 16\n  global_batch_tokens: 128\n  accum_total: 2\n  grad_clip_norm: " + std::to_string(clip) + "\n";
  return config::parse_deck(text, "step.yaml", {});
}

class RandomTokens final : public train::BatchSource {
 public:
  explicit RandomTokens(int vocab) : vocab_(vocab) {}
  void next(int* inputs, int* targets) override {
    for (int i = 0; i < 4 * 16; ++i) {
      inputs[i] = static_cast<int>(random::bits(5, 0, count_ + i) % vocab_);
      targets[i] = static_cast<int>(random::bits(5, 1, count_ + i) % vocab_);
    }
    count_ += 64;
  }

 private:
  int vocab_;
  std::uint64_t count_ = 0;
};

struct Setup {
  explicit Setup(const config::ResolvedDeck& d)
      : deck(d),
        model(model::make_model<float>(deck.config.model, static_cast<int>(deck.plan.local_sequences), deck.plan.seq_len)),
        optimizer((model::initialize(model->parameters(), 3), model->parameters()), deck.config),
        step(*model, optimizer, deck, 1, features),
        batches(deck.config.model.vocab_size) {}
  config::ResolvedDeck deck;
  std::unique_ptr<model::LanguageModel<float>> model;
  optim::Optimizer<float> optimizer;
  features::StepFeatures features;  // none: these decks ask for none
  train::TrainStep<float> step;
  RandomTokens batches;
};

}  // namespace

TEST_CASE("a training step allocates no View after its first", "[train][step]") {
  start_mpi();
  const std::string family = GENERATE(from_range(registered_families()));
  const std::string precision = GENERATE(as<std::string>{}, "fp32", "bf16");
  const double clip = GENERATE(0.0, 1.0);
  INFO(family << " " << precision << " grad_clip_norm " << clip);
  Setup s(tiny_deck(family, precision, clip));
  REQUIRE(s.deck.plan.grad_accum_steps == 2);
  const ExecSpace exec;
  s.step.run(exec, 0, 0.0, s.batches, false);
  REQUIRE(profile::track_memory(true));
  const train::StepMetrics m = s.step.run(exec, 1, 0.0, s.batches, false);
  s.step.run(exec, 2, 0.0, s.batches, true);
  const long long allocations = profile::allocation_count();
  std::string made_by;
  for (const auto& [label, count] : profile::allocations_by_label()) made_by += label + " x" + std::to_string(count) + "; ";
  profile::track_memory(false);
  INFO("allocated: " << made_by);
  CHECK(allocations == 0);
  CHECK(std::isfinite(m.loss));
  CHECK(m.grad_norm > 0);

  // The counter does see allocations: one View made while tracking is one allocation.
  REQUIRE(profile::track_memory(true));
  { const Vector<float> made("kgpt::test::made", 100); }
  CHECK(profile::allocation_count() == 1);
  const auto labels = profile::allocations_by_label();
  REQUIRE(labels.size() == 1);
  CHECK(labels.front().first == std::string(MemSpace::name()) + ": kgpt::test::made");
  CHECK(labels.front().second == 1);
  profile::track_memory(false);
}

TEST_CASE("the profile puts a step's time under its phases and ops", "[train][step][profile]") {
  start_mpi();
  Setup s(tiny_deck("golf", "fp32", 0.0));
  const ExecSpace exec;
  s.step.run(exec, 0, 0.0, s.batches, false);
  profile::enable(true);
  const train::StepMetrics m = s.step.run(exec, 1, 0.0, s.batches, true);
  const std::vector<profile::Entry> entries = profile::entries();
  profile::enable(false);

  double total = 0;
  std::vector<std::string> phases;
  for (const auto& e : entries) {
    total += e.seconds;
    if (std::find(phases.begin(), phases.end(), e.phase) == phases.end()) phases.push_back(e.phase);
  }
  // Phases appear in the order the step runs them. The step's start is a phase of its own where its
  // copies and zeroing are kernels (the host); a GPU does them with copies and memsets, no kernel.
  std::vector<std::string> expected = {"forward", "backward", "averaging", "optimizer"};
  if (!phases.empty() && phases.front() == "step start") expected.insert(expected.begin(), "step start");
  CHECK(phases == expected);
  if (!backend::on_gpu) CHECK(phases.front() == "step start");
  CHECK(total > 0);
  CHECK(total <= m.seconds);
  const auto find = [&](const std::string& phase, const std::string& name) -> const profile::Entry* {
    for (const auto& e : entries) {
      if (e.phase == phase && e.name == name) return &e;
    }
    return nullptr;
  };
  // 2 layers x 2 micro-steps; the GEMM attention's own products count towards its Region.
  const profile::Entry* attention = find("forward", "attention (gemm) forward");
  REQUIRE(attention != nullptr);
  CHECK(attention->calls == 4);
  CHECK(find("backward", "attention (gemm) backward") != nullptr);
  // The loss's softmax: in one pass over 16-byte packs of each row where the backend reads packs.
  const profile::Entry* softmax = find("forward", backend::Traits::packed_logits ? "kgpt::cross_entropy::forward_one_pass"
                                                                                  : "kgpt::cross_entropy::forward");
  REQUIRE(softmax != nullptr);
  CHECK(softmax->calls == 2);
  // The fused QKV product of each layer: 4 calls of (4 x 16 rows, 32) by (32 + 2 x 2 x 8, 32)^T. (The
  // vocabulary of 67 keeps the head's products, 128 wide on a GPU, from sharing its label.)
  const profile::Entry* qkv = find("forward", "gemm 64x64x32 NT fp32->fp32");
  REQUIRE(qkv != nullptr);
  CHECK(qkv->calls == 4);
  // Products and attention count their arithmetic (the table's TFLOP/s); kernels do not. Attention
  // of 4 sequences of 16 tokens, 4 heads of 8: the causal half, 2 B H T^2 D, and 2.5 times that back.
  CHECK(qkv->flops == 4 * 2.0 * 64 * 64 * 32);
  CHECK(attention->flops == 4 * 2.0 * 4 * 4 * 16 * 16 * 8);
  CHECK(find("backward", "attention (gemm) backward")->flops == 4 * 2.5 * 2.0 * 4 * 4 * 16 * 16 * 8);
  CHECK(softmax->flops == 0);
  bool optimizer_gemm = false;
  for (const auto& e : entries) optimizer_gemm |= e.phase == "optimizer" && e.name.rfind("gemm", 0) == 0;
  CHECK(optimizer_gemm);  // Newton-Schulz

  // Off again: nothing more is recorded.
  s.step.run(exec, 2, 0.0, s.batches, false);
  CHECK(profile::entries().empty());
}

namespace {

// The tiny deck of `family` with these overrides, and train.recompute set as asked (every: the
// rebuilt blocks' spacing, train.recompute_every).
config::ResolvedDeck recompute_deck(const std::string& family, const std::string& precision,
                                    std::vector<std::string> overrides, const std::string& recompute, int every) {
  overrides.push_back("train.recompute=" + recompute);
  overrides.push_back("train.recompute_every=" + std::to_string(recompute == "none" ? 1 : every));
  config::DeckOptions options;
  options.overrides = overrides;
  return config::parse_deck(tiny_deck(family, precision, 1.0).text, "step.yaml", options);
}

// Three steps of each run give the same losses and gradient norms, and end with the same gradients
// and weights, bit for bit.
void check_same_steps(Setup& kept, Setup& recomputed) {
  const ExecSpace exec;
  for (int step = 0; step < 3; ++step) {
    const train::StepMetrics a = kept.step.run(exec, step, 0.0, kept.batches, false);
    const train::StepMetrics b = recomputed.step.run(exec, step, 0.0, recomputed.batches, false);
    INFO("step " << step);
    CHECK(a.loss == b.loss);
    CHECK(a.grad_norm == b.grad_norm);
    CHECK(a.loss > 0);
  }
  const auto same = [](const Vector<float>& x, const Vector<float>& y) {
    const auto hx = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), x);
    const auto hy = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), y);
    return hx.extent(0) == hy.extent(0) && std::equal(hx.data(), hx.data() + hx.extent(0), hy.data());
  };
  CHECK(same(kept.model->parameters().grads(), recomputed.model->parameters().grads()));
  CHECK(same(kept.model->parameters().values(), recomputed.model->parameters().values()));
}

}  // namespace

TEST_CASE("train.recompute: block under depth recurrence gives the losses, gradients and weights of none, bit for bit",
          "[train][step][recompute]") {
  start_mpi();
  const std::string precision = GENERATE(as<std::string>{}, "fp32", "bf16");
  const int every = GENERATE(1, 2, 4);
  INFO(precision << " recompute_every " << every);
  // Blocks 1 and 2 of 4 run twice: 6 layers, and a rebuilt layer's block also runs in a kept one.
  const std::vector<std::string> recurrence = {"model.n_layer=4", "model.recur_start=1", "model.recur_count=2"};
  Setup kept(recompute_deck("golf", precision, recurrence, "none", every));
  Setup recomputed(recompute_deck("golf", precision, recurrence, "block", every));
  REQUIRE(model::RecomputePlan(recomputed.deck.config.model).blocks() == 6);
  REQUIRE(model::RecomputePlan(recomputed.deck.config.model).rebuilt_blocks() == (every == 1 ? 6 : every == 2 ? 3 : 2));
  check_same_steps(kept, recomputed);
}

TEST_CASE("train.recompute: block gives the losses, gradients and weights of none, bit for bit", "[train][step][recompute]") {
  start_mpi();
  const std::string family = GENERATE(from_range(registered_families()));
  const std::string precision = GENERATE(as<std::string>{}, "fp32", "bf16");
  const std::string attention = GENERATE(as<std::string>{}, "gemm", "fused");
  // Every block rebuilt; blocks 0 and 2 (each rebuilt block between two that keep theirs); blocks 0
  // and 3 (two kept blocks in a row).
  const int every = GENERATE(1, 2, 3);
  INFO(family << " " << precision << " attention " << attention << " recompute_every " << every);
  // Four layers: golf's U-Net then has two decoder blocks that add a skip.
  const std::vector<std::string> four = {"model.n_layer=4", "model.attention=" + attention};
  Setup kept(recompute_deck(family, precision, four, "none", every));
  Setup recomputed(recompute_deck(family, precision, four, "block", every));
  REQUIRE(recomputed.deck.config.model.recompute == config::Recompute::block);
  REQUIRE(model::RecomputePlan(recomputed.deck.config.model).rebuilt_blocks() == (every == 1 ? 4 : 2));
  check_same_steps(kept, recomputed);
  // And it keeps less: one working set for the rebuilt blocks instead of one each, and the fewer
  // blocks rebuilt, the more it keeps.
  const model::Family& f = model::family(family);
  const std::size_t partial = f.activation_bytes(recomputed.deck.config.model, 4, 16);
  CHECK(partial < f.activation_bytes(kept.deck.config.model, 4, 16));
  if (every > 1) {
    config::ModelConfig all = recomputed.deck.config.model;
    all.recompute_every = 1;
    CHECK(f.activation_bytes(all, 4, 16) < partial);
  }
}
