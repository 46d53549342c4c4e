// Optimizer rules (optim/rule.hpp) through their registry: each registered rule is a choice of
// optim.matrix_optimizer whose own keys exist, plans the memory it allocates, keeps state for
// exactly the tensors the core gives it, under its own names, and that state comes back from the
// checkpoint's form into a fresh optimizer that then steps the same, bit for bit.
#include <catch2/catch.hpp>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "config/optimizer_rules.hpp"
#include "config/schema.hpp"
#include "core/host_copy.hpp"
#include "core/profile.hpp"
#include "core/random.hpp"
#include "model/families/golf/golf.hpp"
#include "optim/optimizer.hpp"
#include "optim/rules/registry.hpp"
#include "support/tiny_golf.hpp"

using namespace kgpt;

TEST_CASE("every registered rule is a choice of the deck, with keys of the schema and names of its own",
          "[optim][rules]") {
  REQUIRE(optim::registered_rules().size() >= 2);
  const config::KeySpec* choice = config::find_key("optim.matrix_optimizer");
  REQUIRE(choice != nullptr);
  std::set<std::string> states;
  for (const optim::RuleEntry& entry : optim::registered_rules()) {
    INFO(entry.name);
    CHECK(std::count(choice->choices.begin(), choice->choices.end(), entry.name) == 1);
    CHECK(config::find_optimizer_rules(entry.name) == &entry);
    for (const std::string& key : entry.reads) CHECK(config::find_key(key) != nullptr);
    CHECK(!entry.state.empty());
    for (const std::string& name : entry.state) CHECK(states.insert(name).second);  // no name twice
    CHECK(!entry.memory.empty());
    CHECK(entry.for_float.make != nullptr);
    CHECK(entry.for_double.bytes != nullptr);
  }
  CHECK_THROWS_WITH(optim::rule_entry("sgd"), Catch::Contains("the rules are adamw, muon"));
}

TEST_CASE("an optimizer of every registered rule allocates the bytes it plans", "[optim][rules]") {
  for (const optim::RuleEntry& entry : optim::registered_rules()) {
    for (const config::Precision precision : {config::Precision::fp32, config::Precision::bf16}) {
      for (const int ranks : {1, 3}) {
        config::Config c = testing::tiny_golf(entry.name);
        c.model.precision = precision;
        c.model.attention = config::Attention::gemm;
        INFO(entry.name << ", " << config::name_of(precision) << ", " << ranks << " sharing");
        const model::GolfModel<float> model(c.model, 1, 8);
        const model::ParameterLayout& layout = model.parameters().layout();
        const optim::Sharing sharing{ranks - 1, ranks};
        const std::size_t planned =
            optim::Optimizer<float>::state_bytes(layout, c, optim::whole_layout(layout), sharing);
        profile::track_memory(false);
        REQUIRE(profile::track_memory(true));  // counting from zero
        {
          const optim::Optimizer<float> optimizer(model.parameters(), c, optim::whole_layout(layout), sharing);
          CHECK(profile::peak_memory_bytes() == static_cast<double>(planned));
        }
        profile::track_memory(false);
      }
    }
  }
}

TEST_CASE("each tensor keeps the state of its group's rule only, and it reads back bit for bit", "[optim][rules]") {
  for (const optim::RuleEntry& matrices : optim::registered_rules()) {
    const config::Config c = testing::tiny_golf(matrices.name);
    INFO("optim.matrix_optimizer: " << matrices.name);
    model::GolfModel<double> model(c.model, 2, 8), copy(c.model, 2, 8);
    model::initialize(model.parameters(), 9);
    optim::Optimizer<double> optimizer(model.parameters(), c);
    CHECK(optimizer.state_names() == optim::state_names(c));
    for (int step = 0; step < 2; ++step) {
      random::fill_normal(model.parameters().grads(), 3, static_cast<std::uint64_t>(step), 0.1);
      optimizer.step(ExecSpace(), step, 1.0);
    }
    // A tensor's span is nonzero in exactly the states of its group's rule.
    const auto& layout = model.parameters().layout();
    for (const std::string& name : optimizer.state_names()) {
      const std::vector<double> state = optimizer.state_to_host(name);
      for (const model::TensorEntry& e : layout.entries()) {
        INFO(name << " of " << e.spec.name);
        const optim::RuleEntry& rule = optim::rule_entry(optim::rule_of(e.spec.group(), c));
        const bool kept = std::count(rule.state.begin(), rule.state.end(), name) > 0;
        const auto begin = state.begin() + static_cast<std::ptrdiff_t>(e.offset);
        const bool nonzero = std::any_of(begin, begin + static_cast<std::ptrdiff_t>(e.size), [](double v) { return v != 0; });
        CHECK(nonzero == kept);
      }
    }
    // Into a fresh optimizer, which then steps as the first one does.
    Kokkos::deep_copy(copy.parameters().values(), model.parameters().values());
    optim::Optimizer<double> fresh(copy.parameters(), c);
    for (const std::string& name : optimizer.state_names()) fresh.state_from_host(name, optimizer.state_to_host(name));
    random::fill_normal(model.parameters().grads(), 3, 2, 0.1);
    Kokkos::deep_copy(copy.parameters().grads(), model.parameters().grads());
    optimizer.step(ExecSpace(), 2, 1.0);
    fresh.step(ExecSpace(), 2, 1.0);
    CHECK(to_host(copy.parameters().values()) == to_host(model.parameters().values()));
    for (const std::string& name : optimizer.state_names()) CHECK(fresh.state_to_host(name) == optimizer.state_to_host(name));
  }
}
