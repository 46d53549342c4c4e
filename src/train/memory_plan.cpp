#include "train/memory_plan.hpp"

#include <algorithm>
#include <cstdio>

#include "core/error.hpp"
#include "core/kokkos_compat.hpp"
#include "core/text.hpp"
#include "model/attention/attention.hpp"
#include "model/family.hpp"
#include "model/parameters.hpp"
#include "model/recompute.hpp"
#include "optim/optimizer.hpp"
#include "features/registry.hpp"
#include "train/step.hpp"

namespace kgpt::train {

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
constexpr double kMiB = 1024.0 * 1024.0;

std::string gib(double bytes) {
  char s[32];
  std::snprintf(s, sizeof(s), "%.2f GiB", bytes / kGiB);
  return s;
}

std::string mib(double bytes) {
  char s[32];
  std::snprintf(s, sizeof(s), "%.1f MiB", bytes / kMiB);
  return s;
}

// ", 8 of 24 blocks rebuilt in the backward" under train.recompute: block, else "".
std::string rebuilt_blocks(const config::ModelConfig& m) {
  const model::RecomputePlan plan(m);
  if (plan.rebuilt_blocks() == 0) return "";
  return ", " + std::to_string(plan.rebuilt_blocks()) + " of " + std::to_string(plan.blocks()) +
         " blocks rebuilt in the backward";
}

// The memory the plan must fit in, and where that figure comes from.
void set_budget(const config::ResolvedDeck& deck, const model::MemoryTarget& target, MemoryPlan& plan) {
  const double gib_set = deck.config.parallel.device_memory_gib;
  if (gib_set > 0) {
    plan.budget = gib_set * kGiB;
    plan.budget_source = "parallel.device_memory_gib = " + text::significant(gib_set) + " (" +
                         deck.origin("parallel.device_memory_gib").describe() + ")";
    return;
  }
  const model::MemoryTarget here = model::this_build();
  if (target.gpu != here.gpu) {
    plan.budget_source = "unknown: this machine is not the planned backend; set parallel.device_memory_gib";
    return;
  }
  plan.budget = compat::device_memory_total_bytes();
  const std::string name = compat::device_name();
  plan.budget_source = here.gpu ? "this machine's GPU" + (name.empty() ? std::string() : " (" + name + ")")
                                : std::string("this machine's physical memory");
  if (plan.budget < 0) plan.budget_source = "unknown: the device's memory could not be read";
}

}  // namespace

MemoryPlan plan_memory(const config::ResolvedDeck& deck, const model::MemoryTarget& target) {
  const config::Config& c = deck.config;
  const config::BatchPlan& batch = deck.plan;
  const int micro_batch = static_cast<int>(batch.local_sequences);
  const model::ModelMemory m = model::model_memory(c.model, micro_batch, c.train.seq_len, target);
  const model::ParameterLayout layout = model::family(c.model.family).layout(c.model, c.train.seq_len);
  const std::string n = text::with_thousands(static_cast<unsigned long long>(layout.buffer_size()));
  MemoryPlan plan;
  plan.backend = target.gpu ? "cuda" : "host";
  plan.attention = config::name_of(m.attention);
  const std::string tokens = std::to_string(micro_batch) + " x " + std::to_string(c.train.seq_len) + " tokens";
  // Under zero stage 1 each rank keeps the state of its shard: the plan is the largest rank's.
  const std::vector<optim::Shard> shards = optimizer_shards(deck, layout);
  std::size_t optimizer_bytes = 0;
  // Sharing Muon (stage 0), each rank's Newton-Schulz workspace holds its own batches.
  const int sharing_ranks = work_sharing(deck, 0).ranks;
  for (const optim::Shard& shard : shards) {
    for (int rank = 0; rank < sharing_ranks; ++rank) {
      optimizer_bytes = std::max(optimizer_bytes, optim::Optimizer<float>::state_bytes(layout, c, shard, {rank, sharing_ranks}));
    }
  }
  const std::string sharded =
      shards.size() > 1 ? " of the largest of " + std::to_string(shards.size()) + " shards (parallel.zero_stage: 1)" : "";
  plan.parts = {
      {"parameters", static_cast<double>(m.parameters), n + " fp32 values"},
      {"gradients", static_cast<double>(m.gradients), n + " fp32 values"},
      {"optimizer state", static_cast<double>(optimizer_bytes),
       optim::state_description(c) + sharded},
      {"bf16 weight shadow", static_cast<double>(m.weight_shadow),
       m.weight_shadow > 0 ? n + " bf16 values" : "none (fp32 activations)"},
      {"activations", static_cast<double>(m.activations),
       "micro-batch of " + tokens + ", attention " + plan.attention + ", logits included" + rebuilt_blocks(c.model)},
      {"step buffers", static_cast<double>(TrainStep<float>::buffer_bytes(batch, target.gpu)),
       "the tokens of the step's " + std::to_string(batch.grad_accum_steps) + " micro-step(s)"},
      {"library workspaces", static_cast<double>(m.library_workspace),
       target.gpu ? std::string("cuBLASLt") + (m.attention == config::Attention::cudnn ? ", cuDNN (estimated)" : "")
                  : "none on the host"},
  };
  if (m.fp8_operands > 0) {
    plan.parts.insert(plan.parts.begin() + 5, {"fp8 operands", static_cast<double>(m.fp8_operands),
                                               std::string("a layer's input, output gradient and weight rounded to FP8 "
                                                           "(model.fp8: ") +
                                                   config::name_of(c.model.fp8) + ")"});
  }
  // The step features' rows, in the registry's order, after the optimizer's state.
  auto at = plan.parts.begin() + 3;
  for (const features::MemoryRow& row : features::step_feature_memory(c, layout)) {
    at = plan.parts.insert(at, {row.name, row.bytes, row.how}) + 1;
  }
  for (const MemoryPart& part : plan.parts) plan.total += part.bytes;
  set_budget(deck, target, plan);
  return plan;
}

std::vector<std::string> describe(const MemoryPlan& plan) {
  std::vector<std::string> lines;
  char line[256];
  for (const MemoryPart& part : plan.parts) {
    std::snprintf(line, sizeof(line), "  %-20s %12s  %s", part.name.c_str(), mib(part.bytes).c_str(), part.how.c_str());
    lines.emplace_back(line);
  }
  std::snprintf(line, sizeof(line), "  %-20s %12s  (%s)", "total", mib(plan.total).c_str(), gib(plan.total).c_str());
  lines.emplace_back(line);
  if (plan.budget >= 0) {
    lines.push_back("  budget: " + gib(plan.budget) + ", " + plan.budget_source + "; " +
                    (plan.fits() ? "fits, " + text::fixed(100.0 * plan.total / plan.budget, 1) + "% used"
                                 : "does NOT fit"));
  } else {
    lines.push_back("  budget: " + plan.budget_source);
  }
  return lines;
}

std::string log_line(const MemoryPlan& plan) {
  std::string line = "memory_plan_mib:" + text::fixed(plan.total / kMiB, 1);
  for (const MemoryPart& part : plan.parts) {
    std::string key = part.name;
    std::replace(key.begin(), key.end(), ' ', '_');
    line += " " + key + ":" + text::fixed(part.bytes / kMiB, 1);
  }
  line += " budget_mib:" + (plan.budget >= 0 ? text::fixed(plan.budget / kMiB, 1) : std::string("unknown"));
  return line;
}

void require_fit(const config::ResolvedDeck& deck, const MemoryPlan& plan, const model::MemoryTarget& target) {
  if (plan.fits()) return;
  std::vector<MemoryPart> largest = plan.parts;
  std::sort(largest.begin(), largest.end(), [](const auto& a, const auto& b) { return a.bytes > b.bytes; });
  const bool key_set = deck.config.parallel.device_memory_gib > 0;
  std::string message = "one rank's memory plan needs " + gib(plan.total) + ", more than " +
                        (key_set ? "its " + gib(plan.budget) : "the " + gib(plan.budget) + " of " + plan.budget_source) +
                        " (" + largest[0].name + " " +
                        gib(largest[0].bytes) + ", " + largest[1].name + " " + gib(largest[1].bytes) + ", " +
                        largest[2].name + " " + gib(largest[2].bytes) + "; kgpt check prints every part)";
  // A smaller micro-batch: more micro-steps for the same global batch.
  config::ResolvedDeck smaller = deck;
  const config::TrainConfig& train = deck.config.train;
  std::string remedy;
  for (long long accum = train.accum_total * 2LL; accum <= train.global_batch_tokens / train.seq_len; ++accum) {
    smaller.config.train.accum_total = static_cast<int>(accum);
    if (!config::plan_batch(smaller.config.train, deck.plan.world_size, smaller.plan).empty()) continue;
    if (!plan_memory(smaller, target).fits()) continue;
    remedy = "train.accum_total = " + std::to_string(accum) + " would fit (" +
             std::to_string(smaller.plan.local_sequences) + " sequences per rank per micro-step instead of " +
             std::to_string(deck.plan.local_sequences) + "; now " + std::to_string(train.accum_total) + ", " +
             deck.origin("train.accum_total").describe() + ")";
    break;
  }
  // Rebuilding blocks in the backward: the fewest that fit (the largest train.recompute_every).
  if (deck.config.model.recompute == config::Recompute::none) {
    config::ResolvedDeck recomputed = deck;
    recomputed.config.model.recompute = config::Recompute::block;
    const int layers = model::run_layers(deck.config.model);
    for (int every = std::max(1, layers - 1); every >= 1; --every) {
      recomputed.config.model.recompute_every = every;
      const MemoryPlan plan_block = plan_memory(recomputed, target);
      if (!plan_block.fits()) continue;
      // A rebuilt block runs its forward twice: about a third more of that block's compute.
      const int rebuilt = model::RecomputePlan(recomputed.config.model).rebuilt_blocks();
      remedy += std::string(remedy.empty() ? "" : "; or ") + "train.recompute = block" +
                (every > 1 ? " with train.recompute_every = " + std::to_string(every) : std::string()) +
                " would fit at this micro-batch (" + gib(plan_block.total) + ", rebuilding " + std::to_string(rebuilt) +
                " of " + std::to_string(layers) + " blocks, for about " +
                text::fixed(100.0 * rebuilt / (3.0 * layers), 0) + "% more compute)";
      break;
    }
  }
  // Sharding the optimizer's state over the ranks.
  if (deck.config.parallel.zero_stage == 0 && deck.plan.world_size > 1) {
    config::ResolvedDeck sharded = deck;
    sharded.config.parallel.zero_stage = 1;
    const MemoryPlan plan_sharded = plan_memory(sharded, target);
    if (plan_sharded.fits()) {
      remedy += std::string(remedy.empty() ? "" : "; or ") + "parallel.zero_stage = 1 would fit (" +
                gib(plan_sharded.total) + ": each of the " + std::to_string(deck.plan.world_size) +
                " ranks keeps the optimizer state of its shard)";
    }
  }
  if (remedy.empty()) {
    const double fixed = plan.parts[0].bytes + plan.parts[1].bytes + plan.parts[2].bytes + plan.parts[3].bytes;
    remedy = "no micro-batch fits, not even one sequence per rank (train.accum_total = " +
             std::to_string(train.accum_total) + ", " + deck.origin("train.accum_total").describe() + ", gives " +
             std::to_string(deck.plan.local_sequences) + "; parameters, gradients, optimizer state and shadow alone need " +
             gib(fixed) + "): a smaller model (model.n_layer, model.d_model) or a device with more memory";
  }
  throw InputError(deck.where("parallel.device_memory_gib") + ": " + message + "; " + remedy);
}

}  // namespace kgpt::train
