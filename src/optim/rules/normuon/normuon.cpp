#include "optim/rules/normuon/normuon.hpp"

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "optim/rules/muon/muon.hpp"
#include "optim/rules/muon/muon_rule.hpp"
#include "optim/rules/normuon/updates.hpp"

namespace kgpt::optim {

namespace {

// Where each matrix keeps its second moments (one per index of its longer side), and the same
// offsets in Muon's batch order.
struct SecondPlan {
  std::size_t elements = 0;
  std::vector<std::size_t> at, size;  // by the rule's tensors, in their order
  std::vector<std::size_t> batch_at;  // by batch item (MuonBatch::first_offset + j)
  std::size_t largest_batch = 0;
};

// NorMuon splits no work among ranks: its setup is Muon's for one rank.
RuleSetup unshared(RuleSetup setup) {
  setup.sharing = Sharing{};
  return setup;
}

SecondPlan second_plan(const RuleSetup& setup, const MuonPlan& muon) {
  SecondPlan plan;
  for (const std::size_t i : setup.tensors) {
    const model::TensorEntry& e = setup.layout->entries()[i];
    const std::size_t longer = std::max(e.spec.shape[0], e.spec.shape[1]);
    plan.at.push_back(plan.elements);
    plan.size.push_back(longer);
    plan.elements = aligned_elements(plan.elements + longer);
  }
  for (const MuonBatch& batch : muon.batches) {
    for (const std::size_t k : batch.tensors) plan.batch_at.push_back(plan.at[k]);
    plan.largest_batch = std::max(plan.largest_batch, batch.tensors.size());
  }
  return plan;
}

template <class T>
class NorMuon final : public MuonRule<T> {
 public:
  NorMuon(const model::Parameters<T>& params, const RuleSetup& setup, const MuonPlan& muon, const SecondPlan& plan)
      : MuonRule<T>(params, setup, muon, "normuon_momentum"),
        plan_(plan),
        second_(buffer_of<Vector<T>>("kgpt::optim::normuon_second", plan.elements)),
        batch_at_(table_of("kgpt::optim::normuon_batch_at", plan.batch_at)),
        norms_(buffer_of<Kokkos::View<double*, MemSpace>>("kgpt::optim::normuon_norms", 2 * plan.largest_batch)),
        beta2_(setup.config->optim.beta2) {}

  const Vector<T>& state(const std::string& name) const override {
    if (name == "normuon_second") return second_;
    return MuonRule<T>::state(name);
  }

  std::vector<Placement> placements(const std::string& name) const override {
    if (name != "normuon_second") return MuonRule<T>::placements(name);
    // The first max(rows, cols) elements of each matrix's span.
    return placements_of(this->setup(), plan_.at, &plan_.size);
  }

 protected:
  void adjust(const ExecSpace& exec, const Orthogonalised<T>& o, const MuonBatch& batch) override {
    normalise_neurons<T, T>(exec, o, second_.data(), batch_at_.data() + batch.first_offset, beta2_, norms_.data());
  }
  void adjust(const ExecSpace& exec, const Orthogonalised<bf16>& o, const MuonBatch& batch) override {
    normalise_neurons<T, bf16>(exec, o, second_.data(), batch_at_.data() + batch.first_offset, beta2_, norms_.data());
  }

 private:
  SecondPlan plan_;
  Vector<T> second_;
  Kokkos::View<std::size_t*, MemSpace> batch_at_;
  Kokkos::View<double*, MemSpace> norms_;
  double beta2_;
};

template <class T>
std::unique_ptr<Rule<T>> make(const model::Parameters<T>& params, const RuleSetup& setup) {
  const RuleSetup own = unshared(setup);
  const MuonPlan muon = muon_plan<T>(own);
  return std::make_unique<NorMuon<T>>(params, own, muon, second_plan(own, muon));
}

template <class T>
std::size_t bytes(const RuleSetup& setup) {
  const RuleSetup own = unshared(setup);
  const MuonPlan muon = muon_plan<T>(own);
  const SecondPlan plan = second_plan(own, muon);
  return muon_plan_bytes<T>(muon) + plan.elements * sizeof(T) + plan.batch_at.size() * sizeof(std::size_t) +
         2 * plan.largest_batch * sizeof(double);
}

}  // namespace

RuleEntry normuon_rule() {
  RuleEntry entry;
  entry.name = "normuon";
  entry.summary = "Muon with each neuron's update normalised by a running second moment at optim.beta2";
  entry.reads = kMuonKeys;
  entry.rules = kMuonKeyRules;
  entry.check = check_muon_keys;
  entry.state = {"normuon_momentum", "normuon_second"};
  entry.memory = "NorMuon momentum, neuron second moments and Newton-Schulz workspaces";
  entry.for_float = {make<float>, bytes<float>};
  entry.for_double = {make<double>, bytes<double>};
  return entry;
}

}  // namespace kgpt::optim
