#include "optim/optimizer.hpp"

#include <algorithm>
#include <cmath>

#include "core/error.hpp"
#include "core/host_copy.hpp"
#include "core/kernel.hpp"
#include "core/kokkos_compat.hpp"
#include "optim/passes.hpp"
#include "optim/rules/registry.hpp"

namespace kgpt::optim {

namespace {

constexpr model::ParamGroup kGroups[] = {model::ParamGroup::matrix, model::ParamGroup::scalar,
                                         model::ParamGroup::embedding, model::ParamGroup::head};

// The registered rules some group of `config` uses, in registry order.
std::vector<const RuleEntry*> rules_in_use(const config::Config& config) {
  std::vector<const RuleEntry*> used;
  for (const RuleEntry& entry : registered_rules()) {
    for (const model::ParamGroup group : kGroups) {
      if (rule_of(group, config) == entry.name) {
        used.push_back(&entry);
        break;
      }
    }
  }
  for (const model::ParamGroup group : kGroups) rule_entry(rule_of(group, config));  // an unknown name throws
  return used;
}

// Each rule's setup over the shard: the shard's tensors whose group it updates.
RuleSetup setup_of(const RuleEntry& entry, const model::ParameterLayout& layout, const config::Config& config,
                   const Shard& shard, const Sharing& sharing) {
  RuleSetup setup;
  setup.layout = &layout;
  setup.config = &config;
  setup.shard = shard;
  setup.sharing = sharing;
  for (std::size_t i = shard.first_tensor; i < shard.end_tensor; ++i) {
    if (rule_of(layout.entries()[i].spec.group(), config) == entry.name) setup.tensors.push_back(i);
  }
  return setup;
}

std::size_t norm_slots(const std::vector<const RuleEntry*>& rules) {
  std::size_t slots = 0;
  for (const RuleEntry* entry : rules) slots += entry->norm_slots;
  return slots;
}

}  // namespace

std::string rule_of(model::ParamGroup group, const config::Config& config) {
  return group == model::ParamGroup::matrix ? config.optim.matrix_optimizer : "adamw";
}

std::vector<std::string> state_names(const config::Config& config) {
  std::vector<std::string> names;
  for (const RuleEntry* entry : rules_in_use(config)) names.insert(names.end(), entry->state.begin(), entry->state.end());
  return names;
}

bool shares_work(const config::Config& config) {
  for (const RuleEntry* entry : rules_in_use(config)) {
    if (entry->loads != nullptr) return true;
  }
  return false;
}

std::vector<double> shared_loads(const model::ParameterLayout& layout, const config::Config& config,
                                 const Shard& shard, int ranks) {
  std::vector<double> loads(static_cast<std::size_t>(std::max(ranks, 1)), 0.0);
  for (const RuleEntry* entry : rules_in_use(config)) {
    if (entry->loads == nullptr) continue;
    const std::vector<double> own = entry->loads(setup_of(*entry, layout, config, shard, Sharing{0, ranks}));
    for (std::size_t r = 0; r < loads.size() && r < own.size(); ++r) loads[r] += own[r];
  }
  return loads;
}

std::string state_description(const config::Config& config) {
  std::string text;
  for (const RuleEntry* entry : rules_in_use(config)) text += (text.empty() ? "" : ", ") + entry->memory;
  return text;
}

Shard whole_layout(const model::ParameterLayout& layout) {
  return Shard{0, layout.entries().size(), 0, layout.buffer_size()};
}

std::vector<Shard> shard_layout(const model::ParameterLayout& layout, int ranks) {
  const auto& entries = layout.entries();
  std::size_t total = 0;
  for (const auto& e : entries) total += e.size;
  std::vector<Shard> shards(static_cast<std::size_t>(ranks));
  std::size_t tensor = 0, taken = 0;
  for (int r = 0; r < ranks; ++r) {
    Shard& s = shards[static_cast<std::size_t>(r)];
    s.first_tensor = tensor;
    s.begin = r == 0 ? 0 : shards[static_cast<std::size_t>(r - 1)].end;
    // Take tensors while that brings the running total nearer to this rank's share.
    const double target = static_cast<double>(total) * (r + 1) / ranks;
    while (tensor < entries.size() &&
           (r == ranks - 1 || std::abs(static_cast<double>(taken + entries[tensor].size) - target) <=
                                  std::abs(static_cast<double>(taken) - target))) {
      taken += entries[tensor].size;
      ++tensor;
    }
    s.end_tensor = tensor;
    s.end = r == ranks - 1 ? layout.buffer_size() : (tensor < entries.size() ? entries[tensor].offset : layout.buffer_size());
  }
  return shards;
}

template <class T>
struct Optimizer<T>::InUse {
  const RuleEntry* entry = nullptr;
  std::unique_ptr<Rule<T>> rule;
  std::size_t first_slot = 0;  // its own norm parts in norm_parts_
};

template <class T>
std::size_t Optimizer<T>::state_bytes(const model::ParameterLayout& layout, const config::Config& config) {
  return state_bytes(layout, config, whole_layout(layout));
}

template <class T>
std::size_t Optimizer<T>::state_bytes(const model::ParameterLayout& layout, const config::Config& config,
                                      const Shard& shard, const Sharing& sharing) {
  const std::vector<const RuleEntry*> rules = rules_in_use(config);
  std::size_t bytes = (layout.entries().size() + norm_slots(rules)) * sizeof(double);
  for (const RuleEntry* entry : rules) {
    bytes += entry->maker<T>().bytes(setup_of(*entry, layout, config, shard, sharing));
  }
  return bytes;
}

template <class T>
Optimizer<T>::Optimizer(const model::Parameters<T>& params, const config::Config& config)
    : Optimizer(params, config, whole_layout(params.layout())) {}

template <class T>
Optimizer<T>::Optimizer(const model::Parameters<T>& params, const config::Config& config, const Shard& shard,
                        const Sharing& sharing)
    : params_(params), shard_(shard), sharing_(sharing), config_(config), state_names_(optim::state_names(config)) {
  if (sharing_.ranks < 1 || sharing_.rank < 0 || sharing_.rank >= sharing_.ranks) {
    throw Error(ExitCode::failure, "optimizer: rank " + std::to_string(sharing_.rank) + " of " +
                                       std::to_string(sharing_.ranks) + " sharing its work");
  }
  const std::vector<const RuleEntry*> used = rules_in_use(config_);
  std::size_t slot = params.layout().entries().size();
  for (const RuleEntry* entry : used) {
    InUse in_use;
    in_use.entry = entry;
    in_use.rule = entry->maker<T>().make(params, setup_of(*entry, params.layout(), config_, shard, sharing));
    in_use.first_slot = slot;
    slot += entry->norm_slots;
    rules_.push_back(std::move(in_use));
  }
  norm_parts_ = Kokkos::View<double*, MemSpace>("kgpt::optim::norm_parts", slot);
}

template <class T>
Optimizer<T>::~Optimizer() = default;

template <class T>
double Optimizer<T>::shared_work_share() const {
  double own = 0, all = 0;
  for (const InUse& r : rules_) {
    const auto [mine, whole] = r.rule->shared_work();
    own += mine;
    all += whole;
  }
  return all > 0 ? own / all : 0.0;
}

template <class T>
void Optimizer<T>::arrange(bool one_launch, bool packs) {
  for (InUse& r : rules_) r.rule->arrange(one_launch, packs);
  Kokkos::deep_copy(norm_parts_, 0.0);  // the norm's parts of one arrangement only
}

template <class T>
const typename Optimizer<T>::InUse& Optimizer<T>::owner_of(const std::string& state) const {
  for (const InUse& r : rules_) {
    for (const std::string& name : r.entry->state) {
      if (name == state) return r;
    }
  }
  throw Error(ExitCode::failure, "optimizer: no state '" + state + "' under this optimizer");
}

template <class T>
std::vector<T> Optimizer<T>::state_to_host(const std::string& name) const {
  const InUse& owner = owner_of(name);
  const std::vector<T> packed = to_host(owner.rule->state(name));
  std::vector<T> span(shard_.size(), T(0));
  for (const Placement& p : owner.rule->placements(name)) {
    std::copy(packed.begin() + p.packed, packed.begin() + p.packed + p.size, span.begin() + p.span);
  }
  return span;
}

template <class T>
void Optimizer<T>::state_from_host(const std::string& name, const std::vector<T>& span) {
  const InUse& owner = owner_of(name);
  const Vector<T>& buffer = owner.rule->state(name);
  if (span.size() != shard_.size()) {
    throw Error(ExitCode::failure, "optimizer: " + std::to_string(span.size()) + " values of '" + name +
                                       "' for a shard of " + std::to_string(shard_.size()));
  }
  std::vector<T> packed(buffer.extent(0), T(0));
  for (const Placement& p : owner.rule->placements(name)) {
    std::copy(span.begin() + p.span, span.begin() + p.span + p.size, packed.begin() + p.packed);
  }
  from_host(packed, buffer);
}

template <class T>
double Optimizer<T>::group_lr(model::ParamGroup group) const {
  switch (group) {
    case model::ParamGroup::matrix: return config_.optim.matrix_lr;
    case model::ParamGroup::embedding: return config_.optim.embed_lr;
    case model::ParamGroup::head: return config_.optim.head_lr;
    case model::ParamGroup::scalar: return config_.optim.scalar_lr;
  }
  return 0.0;
}

template <class T>
double Optimizer<T>::group_weight_decay(model::ParamGroup group) const {
  switch (group) {
    case model::ParamGroup::matrix: return config_.optim.matrix_weight_decay;
    case model::ParamGroup::embedding: return config_.optim.embed_weight_decay;
    case model::ParamGroup::head: return config_.optim.head_weight_decay;
    case model::ParamGroup::scalar: return config_.optim.scalar_weight_decay;
  }
  return 0.0;
}

template <class T>
void Optimizer<T>::step(const ExecSpace& exec, int step, double lr_multiplier, const double* grad_factor,
                        double* norm_sq) {
  RuleStep s;
  s.exec = exec;
  s.step = step;
  for (int g = 0; g < 4; ++g) {
    s.rates.lr[g] = group_lr(static_cast<model::ParamGroup>(g)) * lr_multiplier;
    s.rates.weight_decay[g] = group_weight_decay(static_cast<model::ParamGroup>(g));
  }
  s.grad_factor = grad_factor;
  s.exchange = exchange_ ? &exchange_ : nullptr;
  for (InUse& r : rules_) {
    s.tensor_norms = norm_sq != nullptr ? norm_parts_.data() : nullptr;
    s.own_norms = norm_sq != nullptr ? norm_parts_.data() + r.first_slot : nullptr;
    r.rule->step(s);
  }
  if (norm_sq == nullptr) return;
  const auto parts = norm_parts_;
  const std::size_t count = parts.extent(0);
  kgpt::parallel_for(
      "kgpt::optim::norm_sum", Kokkos::RangePolicy<ExecSpace>(exec, 0, 1), KOKKOS_LAMBDA(const int) {
        double sum = 0;
        for (std::size_t i = 0; i < count; ++i) sum += parts(i);
        *norm_sq = sum;
      });
}

template <class T>
void gradient_norm_squared(const ExecSpace& exec, const Vector<T>& grads, std::size_t begin, std::size_t end,
                           const Kokkos::View<double, MemSpace>& norm_sq) {
  const ConstVector<T> part(grads.data() + begin, end - begin);
  update_pass<T>(exec, "kgpt::optim::grad_norm", end - begin, part, norm_sq.data(), KOKKOS_LAMBDA(const std::size_t) {});
}

template <class T>
void clip_factor(const ExecSpace& exec, double max_norm, const Kokkos::View<double, MemSpace>& norm_sq,
                 const Kokkos::View<double, MemSpace>& factor) {
  kgpt::parallel_for(
      "kgpt::optim::clip_factor", Kokkos::RangePolicy<ExecSpace>(exec, 0, 1), KOKKOS_LAMBDA(const int) {
        const double norm = compat::sqrt(norm_sq());
        // As the gradients would be scaled in T.
        factor() = max_norm > 0 && norm > max_norm ? static_cast<double>(static_cast<T>(max_norm / (norm + 1e-6))) : 1.0;
      });
}

template class Optimizer<float>;
template class Optimizer<double>;
template void gradient_norm_squared(const ExecSpace&, const Vector<float>&, std::size_t, std::size_t,
                                    const Kokkos::View<double, MemSpace>&);
template void gradient_norm_squared(const ExecSpace&, const Vector<double>&, std::size_t, std::size_t,
                                    const Kokkos::View<double, MemSpace>&);
template void clip_factor<float>(const ExecSpace&, double, const Kokkos::View<double, MemSpace>&,
                                 const Kokkos::View<double, MemSpace>&);
template void clip_factor<double>(const ExecSpace&, double, const Kokkos::View<double, MemSpace>&,
                                  const Kokkos::View<double, MemSpace>&);

}  // namespace kgpt::optim
