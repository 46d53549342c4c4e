#pragma once
// An optimizer rule: one way of updating tensors (Adam(W), Muon), the state it keeps for them and
// the work it may split among ranks (docs/design.md, "Optimizers"). Each rule is a folder of
// optim/rules/ and one line of optim/rules/registry.cpp. The optimizer core (optim/optimizer.hpp)
// gives each parameter group to a rule, builds the rules over this rank's shard, hands them the
// group's rates and the step's clipping factor, sums the gradient norm from their parts and carries
// their state to and from checkpoints by the names they declare.

#include <cstddef>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "config/config.hpp"
#include "core/backend.hpp"
#include "core/views.hpp"
#include "model/parameters.hpp"

namespace kgpt::optim {

// The part of the parameter buffer one rank updates under parallel.zero_stage: 1: whole tensors
// [first_tensor, end_tensor) in layout order, and the buffer elements [begin, end) that hold them
// (with the alignment gaps after them), so that the shards of all ranks tile the buffer.
struct Shard {
  std::size_t first_tensor = 0, end_tensor = 0;
  std::size_t begin = 0, end = 0;
  std::size_t size() const { return end - begin; }
};

// The ranks that split a rule's work on the same shard (parallel.share_muon at zero_stage 0): this
// rank and how many. One rank (the default) does all of it.
struct Sharing {
  int rank = 0, ranks = 1;
};

// Every rank's `bytes` at `data` (memory of exec's space, written by exec's earlier work) are
// combined before exec's later work reads them: where one rank wrote a value and the others zeros,
// every rank holds the value, bit for bit, whatever its type (GradientAverager::exchange_bytes).
using ExchangeBytes = std::function<void(const ExecSpace& exec, void* data, std::size_t bytes)>;

// Each parameter group's learning rate for the step (the group's rate times the schedule's
// multiplier) and decoupled weight decay, by ParamGroup's value.
struct GroupRates {
  double lr[4] = {}, weight_decay[4] = {};
};

// What a rule is built over: the layout, the run's settings, this rank's shard, the ranks it shares
// work with, and the shard's tensors it updates (layout indices, in layout order). The layout and
// the settings outlive the rule (the parameters' and the optimizer's own copy).
struct RuleSetup {
  const model::ParameterLayout* layout = nullptr;
  const config::Config* config = nullptr;
  Shard shard;
  Sharing sharing;
  std::vector<std::size_t> tensors;
};

// One step of a rule. `grad_factor` is a device scalar (the clipping factor) or null for 1. With
// `tensor_norms` (device memory, one slot per layout index), the rule writes the squared norm of
// each of its tensors' raw gradients into that tensor's slot, or, for tensors it updates together,
// into its own slots at `own_norms` (as many as its registry entry's norm_slots); slots it does not
// write stay as they were.
struct RuleStep {
  ExecSpace exec;
  int step = 0;  // from 0
  GroupRates rates;
  const double* grad_factor = nullptr;
  double* tensor_norms = nullptr;
  double* own_norms = nullptr;
  const ExchangeBytes* exchange = nullptr;  // set when the rule's sharing spans several ranks
};

// Where one tensor keeps one of a rule's states: at `packed` in the rule's buffer, at `span` in the
// checkpoint's span of the shard, `size` elements.
struct Placement {
  std::ptrdiff_t packed = 0, span = 0, size = 0;
};

// Where each of setup.tensors keeps a state: at at[k] in the packed buffer, from the tensor's start
// in the shard's span, sizes[k] elements (the whole tensor without `sizes`).
inline std::vector<Placement> placements_of(const RuleSetup& setup, const std::vector<std::size_t>& at,
                                            const std::vector<std::size_t>* sizes = nullptr) {
  std::vector<Placement> found;
  for (std::size_t k = 0; k < setup.tensors.size(); ++k) {
    const model::TensorEntry& e = setup.layout->entries()[setup.tensors[k]];
    found.push_back({static_cast<std::ptrdiff_t>(at[k]), static_cast<std::ptrdiff_t>(e.offset - setup.shard.begin),
                     static_cast<std::ptrdiff_t>(sizes != nullptr ? (*sizes)[k] : e.size)});
  }
  return found;
}

// A rule's elements are packed one tensor after another, each starting on the parameter buffer's
// alignment.
inline std::size_t aligned_elements(std::size_t n) {
  constexpr std::size_t a = model::ParameterLayout::kAlignment;
  return (n + a - 1) / a * a;
}

// A buffer of n elements, or no allocation at all for none (Kokkos records one for an empty View,
// which the memory plan would not count).
template <class View>
View buffer_of(const std::string& label, std::size_t n) {
  return n > 0 ? View(label, n) : View();
}

// A device copy of a host table the rules' kernels look up (segments, offsets), or no allocation
// for an empty one.
template <class E>
Kokkos::View<E*, MemSpace> table_of(const std::string& label, const std::vector<E>& host) {
  auto table = buffer_of<Kokkos::View<E*, MemSpace>>(label, host.size());
  if (!host.empty()) {
    Kokkos::deep_copy(table, Kokkos::View<const E*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>(
                                 host.data(), host.size()));
  }
  return table;
}

template <class T>
class Rule {
 public:
  virtual ~Rule() = default;
  // Updates its tensors in the parameter buffer from the gradient buffer. Waits for nothing.
  virtual void step(const RuleStep& s) = 0;
  // One of the states its registry entry names: its packed buffer, and where each tensor has it.
  virtual const Vector<T>& state(const std::string& name) const = 0;
  virtual std::vector<Placement> placements(const std::string& name) const = 0;
  // Whether its element-wise updates of many tensors go in one launch, as on a GPU, or one launch
  // a tensor, as on the host; and whether a thread of that launch reads 16 bytes of each array.
  virtual void arrange(bool one_launch, bool packs) {
    (void)one_launch;
    (void)packs;
  }
  // Of the work it splits among the sharing ranks (arithmetic, in its own unit): this rank's part
  // and the whole; {0, 0} for a rule that splits none.
  virtual std::pair<double, double> shared_work() const { return {0.0, 0.0}; }
};

}  // namespace kgpt::optim
