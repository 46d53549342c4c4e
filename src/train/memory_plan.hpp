#pragma once
// The memory plan: what one rank of a deck's training holds in device memory, part by part,
// computed from the same sizes the model, the optimizer and the step allocate with (without
// allocating), against the memory it must fit in. `kgpt check` prints it, the run log starts
// with it, and check, train and bench refuse a deck that does not fit, saying what would.
// Measured against `kgpt bench`'s view_peak_mb by tests/train/test_memory_plan.py.

#include <string>
#include <vector>

#include "config/deck.hpp"
#include "model/memory.hpp"

namespace kgpt::train {

struct MemoryPart {
  std::string name;  // "parameters", "gradients", ...
  double bytes = 0;
  std::string how;   // how it is sized, in words
};

struct MemoryPlan {
  std::vector<MemoryPart> parts;
  double total = 0;
  double budget = -1;          // bytes it must fit in; < 0: unknown (no device to read, no key set)
  std::string budget_source;   // "parallel.device_memory_gib = 79 (inputs/x.yaml:40:3)", "this machine's GPU ..."
  std::string backend;         // "host" or "cuda": the build the plan is for
  std::string attention;       // what model.attention resolves to there
  bool fits() const { return budget < 0 || total <= budget; }
};

// The plan of one rank of `deck` (its world size and batch plan) on `target`.
MemoryPlan plan_memory(const config::ResolvedDeck& deck, const model::MemoryTarget& target);

// The plan as lines of text: one per part, then the total against the budget.
std::vector<std::string> describe(const MemoryPlan& plan);
// One line for the run log: "memory_plan:<total MiB> parameters:... budget:<MiB> ..."
std::string log_line(const MemoryPlan& plan);

// Throws InputError (exit code 2) when the plan does not fit: the total against the budget, the
// largest parts, and what would fit (a train.accum_total that makes the micro-batch small enough,
// or that none does).
void require_fit(const config::ResolvedDeck& deck, const MemoryPlan& plan, const model::MemoryTarget& target);

}  // namespace kgpt::train
