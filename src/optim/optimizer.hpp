#pragma once
// One optimizer step over every parameter tensor, by the group its declaration gives it
// (docs/design.md, "Optimizers"). Each group has a rule (optim/rule.hpp, one folder each under
// optim/rules/): the matrices the one optim.matrix_optimizer names (muon for golf, adamw for gpt2),
// every other group adamw. Each group has its learning rate (matrix_lr, embed_lr, head_lr,
// scalar_lr, times the schedule's multiplier for the step) and its decoupled weight decay
// (optim.matrix_weight_decay, embed_weight_decay and head_weight_decay, each optim.weight_decay
// unless set, and scalar_weight_decay, 0 unless set), whatever its rule. Each rule keeps its state
// for its own tensors only, packed at the parameter buffer's alignment, so no tensor holds state
// its rule never reads.

#include <cstddef>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "config/config.hpp"
#include "core/backend.hpp"
#include "core/views.hpp"
#include "model/parameters.hpp"
#include "optim/rule.hpp"

namespace kgpt::optim {

// The whole buffer: stage 0, or one rank.
Shard whole_layout(const model::ParameterLayout& layout);
// One shard per rank: contiguous runs of whole tensors, each as close to 1/ranks of the elements as
// whole tensors allow (a rank may get none when there are fewer tensors than ranks).
std::vector<Shard> shard_layout(const model::ParameterLayout& layout, int ranks);

// The name of the rule that updates a group's tensors under `config`.
std::string rule_of(model::ParamGroup group, const config::Config& config);
// The state buffers the optimizer of this config keeps, by name, in the order checkpoints store
// them: each rule's in use, in registry order.
std::vector<std::string> state_names(const config::Config& config);
// Whether a rule of this config splits work among ranks that share it (parallel.share_muon).
bool shares_work(const config::Config& config);
// Each of `ranks` ranks sharing the shard's work: its arithmetic, over every rule that splits some.
std::vector<double> shared_loads(const model::ParameterLayout& layout, const config::Config& config,
                                 const Shard& shard, int ranks);
// What the optimizer's state is, in the memory plan's words: "Adam moments, Muon momentum and ...".
std::string state_description(const config::Config& config);

template <class T>
class Optimizer {
 public:
  // Updates and keeps state for `shard` of the parameters (the whole buffer by default). With
  // `sharing` over several ranks, the rules that split work do this rank's share of the shard's and
  // take the others' results through the exchange (exchange_with); every rule's state is kept for
  // the whole shard on every rank.
  Optimizer(const model::Parameters<T>& params, const config::Config& config);
  Optimizer(const model::Parameters<T>& params, const config::Config& config, const Shard& shard,
            const Sharing& sharing = {});
  ~Optimizer();
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;
  // How the sharing ranks exchange their results (see ExchangeBytes); a step under sharing over
  // several ranks throws without one.
  void exchange_with(ExchangeBytes exchange) { exchange_ = std::move(exchange); }
  // This rank's part of the work its rules split among the sharing ranks (1 without sharing; 0 when
  // no rule in use splits work).
  double shared_work_share() const;
  // `step` counts from 0. Every gradient is read times *grad_factor (a device scalar: the step's
  // clipping factor), or as it is when grad_factor is null. With norm_sq (a device scalar), the
  // squared global norm of the raw gradients is written there by the same passes. Waits for nothing.
  void step(const ExecSpace& exec, int step, double lr_multiplier, const double* grad_factor = nullptr,
            double* norm_sq = nullptr);
  double group_lr(model::ParamGroup group) const;
  double group_weight_decay(model::ParamGroup group) const;
  // Whether the rules update many tensors in one launch, as on a GPU, or one launch each, as on the
  // host (where each is one vectorised loop); and whether that launch reads 16 bytes per thread (a
  // GPU's way). Tests run every arrangement.
  void arrange(bool one_launch, bool packs = backend::Traits::packed_elementwise);
  // Bytes of device memory the constructor allocates for parameters of this layout (every rule's
  // state and workspaces, and the norm's parts), allocating nothing: for the memory plan.
  static std::size_t state_bytes(const model::ParameterLayout& layout, const config::Config& config);
  static std::size_t state_bytes(const model::ParameterLayout& layout, const config::Config& config, const Shard& shard,
                                 const Sharing& sharing = {});
  // The state a checkpoint must hold, by name (state_names(config)).
  std::vector<std::string> state_names() const { return state_names_; }
  // One of them as the elements [shard().begin, shard().end) of a buffer with the parameter buffer's
  // layout, zero for the tensors that keep no such state (the checkpoint's form). Throws Error on an
  // unknown name or a span of the wrong size.
  std::vector<T> state_to_host(const std::string& name) const;
  void state_from_host(const std::string& name, const std::vector<T>& span);
  const Shard& shard() const { return shard_; }

 private:
  struct InUse;
  const InUse& owner_of(const std::string& state) const;  // throws Error on an unknown name

  const model::Parameters<T>& params_;
  Shard shard_;
  Sharing sharing_;
  config::Config config_;  // the rules' (RuleSetup::config points here: the optimizer does not move)
  std::vector<InUse> rules_;
  std::vector<std::string> state_names_;
  ExchangeBytes exchange_;
  // One per tensor, then the rules' own (RuleStep::own_norms), added in that order.
  Kokkos::View<double*, MemSpace> norm_parts_;
};

// The squared L2 norm of grads[begin, end) into norm_sq (a device scalar; nothing waits for it).
template <class T>
void gradient_norm_squared(const ExecSpace& exec, const Vector<T>& grads, std::size_t begin, std::size_t end,
                           const Kokkos::View<double, MemSpace>& norm_sq);

// The clipping factor from the global squared norm: max_norm / (norm + 1e-6) when max_norm > 0 and
// the norm exceeds it, else 1 (device scalars; nothing waits for them).
template <class T>
void clip_factor(const ExecSpace& exec, double max_norm, const Kokkos::View<double, MemSpace>& norm_sq,
                 const Kokkos::View<double, MemSpace>& factor);

}  // namespace kgpt::optim
