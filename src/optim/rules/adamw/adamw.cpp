#include "optim/rules/adamw/adamw.hpp"

#include "core/error.hpp"
#include "optim/rules/adamw/updates.hpp"

namespace kgpt::optim {

namespace {

// Where each of the rule's tensors keeps its moments, and the segments of adam_update_all.
struct Plan {
  std::size_t moments = 0;
  std::vector<std::size_t> state_at;  // by the rule's tensors, in their order
  std::vector<AdamSegment> segments;
  std::size_t chunks = 0;
};

Plan plan_of(const RuleSetup& setup) {
  Plan plan;
  for (const std::size_t i : setup.tensors) {
    const model::TensorEntry& e = setup.layout->entries()[i];
    plan.state_at.push_back(plan.moments);
    if (e.size > 0) {
      AdamSegment segment;
      segment.param = e.offset;
      segment.state = plan.moments;
      segment.size = e.size;
      segment.first_chunk = plan.chunks;
      segment.group = static_cast<int>(e.spec.group());
      plan.segments.push_back(segment);
      plan.chunks += (e.size + kUpdateChunk - 1) / kUpdateChunk;
    }
    plan.moments = aligned_elements(plan.moments + e.size);
  }
  return plan;
}

template <class T>
class AdamW final : public Rule<T> {
 public:
  AdamW(const model::Parameters<T>& params, const RuleSetup& setup, const Plan& plan)
      : params_(params),
        setup_(setup),
        state_at_(plan.state_at),
        m_(buffer_of<Vector<T>>("kgpt::optim::adam_m", plan.moments)),
        v_(buffer_of<Vector<T>>("kgpt::optim::adam_v", plan.moments)),
        segments_(table_of("kgpt::optim::adam_segments", plan.segments)),
        chunks_(plan.chunks) {}

  void step(const RuleStep& s) override {
    if (one_launch_) {
      AdamSettings groups[4];
      for (int group = 0; group < 4; ++group) groups[group] = settings(s, group);
      adam_update_all<T>(s.exec, params_.values().data(), params_.grads().data(), m_.data(), v_.data(), segments_,
                         chunks_, AdamStep<T>(groups, s.step + 1), s.grad_factor, s.own_norms, packs_);
      return;
    }
    const auto& entries = setup_.layout->entries();
    for (std::size_t k = 0; k < setup_.tensors.size(); ++k) {
      const std::size_t index = setup_.tensors[k];
      const model::TensorEntry& e = entries[index];
      T* p = params_.values().data() + e.offset;
      T* g = params_.grads().data() + e.offset;
      adam_update<T>(s.exec, Vector<T>(p, e.size), ConstVector<T>(g, e.size), Vector<T>(m_.data() + state_at_[k], e.size),
                     Vector<T>(v_.data() + state_at_[k], e.size), settings(s, static_cast<int>(e.spec.group())),
                     s.step + 1, s.grad_factor,
                     s.tensor_norms != nullptr ? s.tensor_norms + index : nullptr);
    }
  }

  const Vector<T>& state(const std::string& name) const override {
    if (name == "adam_m") return m_;
    if (name == "adam_v") return v_;
    throw Error(ExitCode::failure, "optimizer: adamw keeps no state '" + name + "'");
  }

  std::vector<Placement> placements(const std::string&) const override { return placements_of(setup_, state_at_); }

  void arrange(bool one_launch, bool packs) override {
    one_launch_ = one_launch;
    packs_ = packs;
  }

 private:
  // A group's settings for the step: its scheduled rate and decay, the run's betas and epsilon.
  AdamSettings settings(const RuleStep& s, int group) const {
    const config::OptimConfig& optim = setup_.config->optim;
    AdamSettings out;
    out.lr = s.rates.lr[group];
    out.beta1 = optim.beta1;
    out.beta2 = optim.beta2;
    out.eps = optim.adam_eps;
    out.weight_decay = s.rates.weight_decay[group];
    return out;
  }

  const model::Parameters<T>& params_;
  RuleSetup setup_;
  std::vector<std::size_t> state_at_;
  Vector<T> m_, v_;
  Kokkos::View<AdamSegment*, MemSpace> segments_;
  std::size_t chunks_ = 0;
  bool one_launch_ = backend::Traits::fused_adam;
  bool packs_ = backend::Traits::packed_elementwise;
};

template <class T>
std::unique_ptr<Rule<T>> make(const model::Parameters<T>& params, const RuleSetup& setup) {
  return std::make_unique<AdamW<T>>(params, setup, plan_of(setup));
}

template <class T>
std::size_t bytes(const RuleSetup& setup) {
  const Plan plan = plan_of(setup);
  return 2 * plan.moments * sizeof(T) + plan.segments.size() * sizeof(AdamSegment);
}

}  // namespace

RuleEntry adamw_rule() {
  RuleEntry entry;
  entry.name = "adamw";
  entry.summary = "Adam with decoupled weight decay";
  entry.state = {"adam_m", "adam_v"};
  entry.memory = "Adam moments";
  entry.norm_slots = 1;  // adam_update_all's, over all its tensors
  entry.for_float = {make<float>, bytes<float>};
  entry.for_double = {make<double>, bytes<double>};
  return entry;
}

}  // namespace kgpt::optim
