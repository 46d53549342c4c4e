// Depth recurrence (model.recur_start, model.recur_count) over the family registry: every family
// reads both keys and honours them. A model that runs block 0 twice is checked against finite
// differences, and against the model of one more block unrolled from it: the same loss, and the
// repeated block's gradient the sum of its two copies' gradients.
#include <catch2/catch.hpp>

#include <cmath>
#include <string>
#include <vector>

#include "config/family_rules.hpp"
#include "core/host_copy.hpp"
#include "model/block_sequence.hpp"
#include "model/family.hpp"
#include "model/language_model.hpp"
#include "model/parameters.hpp"
#include "model/gradcheck.hpp"

using namespace kgpt;

namespace {

// A tiny model of `family` that each family's rules accept.
config::ModelConfig tiny(const std::string& family, int n_layer) {
  config::ModelConfig m;
  m.family = family;
  m.vocab_size = 23;
  m.n_layer = n_layer;
  m.d_model = 16;
  m.n_head = 4;
  m.n_kv_head = family == "gpt2" ? 4 : 2;  // gpt2: multi-head attention
  m.mlp_mult = 2;
  m.rope_base = 100.0;
  m.logit_softcap = 5.0;
  return m;
}

// The tensors of block `block` in declaration order.
std::vector<const model::TensorEntry*> block_tensors(const model::ParameterLayout& layout, int block) {
  std::vector<const model::TensorEntry*> found;
  for (const auto& e : layout.entries()) {
    if (e.spec.block == block) found.push_back(&e);
  }
  return found;
}

}  // namespace

TEST_CASE("every family reads the depth-recurrence keys and its gradient under them matches finite differences",
          "[model][recurrence][gradcheck]") {
  REQUIRE(model::families().size() >= 3);
  for (const model::Family* family : model::families()) {
    INFO("family " << family->name);
    const config::FamilyRules& rules = config::family_rules(family->name);
    CHECK(rules.reads_key("model.recur_start"));
    CHECK(rules.reads_key("model.recur_count"));
    for (const auto& [start, count] : std::vector<std::pair<int, int>>{{1, 1}, {0, 2}}) {
      INFO("recur_start " << start << " recur_count " << count);
      config::ModelConfig m = tiny(family->name, 3);
      m.recur_start = start;
      m.recur_count = count;
      CHECK(model::run_layers(m) == 3 + count);
      const auto built = family->make_double(m, 2, 6);
      random::fill_normal(built->parameters().values(), 97, 0, 0.5);
      test::check_model_gradient(*built, test::random_tokens(2, 5, 23, 3), test::random_tokens(2, 5, 23, 4));
    }
  }
}

TEST_CASE("every family's model that runs block 0 twice is the model of one more block with a copy of it",
          "[model][recurrence]") {
  for (const model::Family* family : model::families()) {
    INFO("family " << family->name);
    config::ModelConfig recurrent_config = tiny(family->name, 2);
    recurrent_config.recur_start = 0;  // layers run blocks 0, 0, 1
    recurrent_config.recur_count = 1;
    const auto recurrent = family->make_double(recurrent_config, 2, 6);
    const auto once = family->make_double(tiny(family->name, 2), 2, 6);
    const auto unrolled = family->make_double(tiny(family->name, 3), 2, 6);
    const model::ParameterLayout& r = recurrent->parameters().layout();
    const model::ParameterLayout& u = unrolled->parameters().layout();
    random::fill_normal(recurrent->parameters().values(), 96, 0, 0.5);
    Kokkos::deep_copy(once->parameters().values(), recurrent->parameters().values());
    // The unrolled model's blocks 0, 1, 2 hold the recurrent model's blocks 0, 0, 1; the rest by name.
    const std::vector<double> values = to_host(recurrent->parameters().values());
    std::vector<double> copied(u.buffer_size(), 0.0);
    const int source_block[] = {0, 0, 1};
    for (int b = 0; b < 3; ++b) {
      const auto from = block_tensors(r, source_block[b]), to = block_tensors(u, b);
      REQUIRE(from.size() == to.size());
      for (std::size_t k = 0; k < from.size(); ++k) {
        REQUIRE(from[k]->spec.shape == to[k]->spec.shape);
        std::copy(values.begin() + from[k]->offset, values.begin() + from[k]->offset + from[k]->size,
                  copied.begin() + to[k]->offset);
      }
    }
    for (const auto& e : u.entries()) {
      if (e.spec.block >= 0) continue;
      REQUIRE(r.contains(e.spec.name));
      const auto& source = r.find(e.spec.name);
      REQUIRE(source.spec.shape == e.spec.shape);
      std::copy(values.begin() + source.offset, values.begin() + source.offset + source.size, copied.begin() + e.offset);
    }
    from_host(copied, unrolled->parameters().values());

    const auto inputs = test::random_tokens(2, 6, 23, 5), targets = test::random_tokens(2, 6, 23, 6);
    const auto [loss, grad] = test::loss_and_gradient(*recurrent, inputs, targets);
    const auto [unrolled_loss, unrolled_grad] = test::loss_and_gradient(*unrolled, inputs, targets);
    const auto [once_loss, once_grad] = test::loss_and_gradient(*once, inputs, targets);
    CHECK(loss == unrolled_loss);  // the same kernels on the same values
    CHECK(std::abs(loss - once_loss) > 1e-6);  // the keys act: running block 0 once is another model
    // Block 0's gradient is the sum of its two copies'; block 1's is the last copy's; the rest equal.
    const auto expect = [&](const model::TensorEntry& mine, std::vector<const model::TensorEntry*> copies) {
      for (std::size_t i = 0; i < mine.size; ++i) {
        double sum = 0;
        for (const auto* c : copies) sum += unrolled_grad[c->offset + i];
        CHECK(grad[mine.offset + i] == Approx(sum).epsilon(1e-10).margin(1e-13));
      }
    };
    const auto r0 = block_tensors(r, 0), r1 = block_tensors(r, 1);
    const auto u0 = block_tensors(u, 0), u1 = block_tensors(u, 1), u2 = block_tensors(u, 2);
    for (std::size_t k = 0; k < r0.size(); ++k) expect(*r0[k], {u0[k], u1[k]});
    for (std::size_t k = 0; k < r1.size(); ++k) expect(*r1[k], {u2[k]});
    for (const auto& e : r.entries()) {
      if (e.spec.block < 0) expect(e, {&u.find(e.spec.name)});
    }
  }
}
