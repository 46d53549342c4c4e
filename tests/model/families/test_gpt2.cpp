#include <catch2/catch.hpp>

#include <cmath>

#include "model/families/gpt2/gpt2.hpp"
#include "model/gradcheck.hpp"

using namespace kgpt;

namespace {

config::ModelConfig tiny_gpt2() {
  config::ModelConfig m;
  m.family = "gpt2";
  m.mlp_mult = 4;
  m.tied_embed_init_std = 0.02;
  m.vocab_size = 23;
  m.n_layer = 2;
  m.d_model = 12;
  m.n_head = 3;
  m.n_kv_head = 3;
  m.logit_softcap = 0.0;
  return m;
}


}  // namespace

TEST_CASE("gpt2: the loss at initialisation is close to ln(vocab)", "[model][gpt2]") {
  config::ModelConfig m = tiny_gpt2();
  m.vocab_size = 257;
  m.d_model = 48;
  model::Gpt2Model<float> model(m, 4, 16);
  model::initialize(model.parameters(), 1337);
  const double loss = model.forward(ExecSpace(), test::random_tokens(4, 16, 257, 1), test::random_tokens(4, 16, 257, 2));
  CHECK(std::abs(loss - std::log(257.0)) < 0.1);
}

TEST_CASE("gpt2: the whole model's gradient matches finite differences", "[model][gpt2][gradcheck]") {
  for (double cap : {0.0, 4.0}) {
    INFO("softcap " << cap);
    config::ModelConfig m = tiny_gpt2();
    m.logit_softcap = cap;
    model::Gpt2Model<double> model(m, 2, 6);
    random::fill_normal(model.parameters().values(), 98, 0, 0.5);
    const auto inputs = test::random_tokens(2, 5, 23, 3), targets = test::random_tokens(2, 5, 23, 4);
    test::check_model_gradient(model, inputs, targets);
  }
}

TEST_CASE("gpt2: logits at positions up to t do not depend on later tokens", "[model][gpt2]") {
  model::Gpt2Model<double> model(tiny_gpt2(), 1, 6);
  random::fill_normal(model.parameters().values(), 97, 0, 0.5);
  auto inputs = test::random_tokens(1, 6, 23, 8);
  const auto targets = test::random_tokens(1, 6, 23, 9);
  model.forward(ExecSpace(), inputs, targets);
  auto before = Kokkos::create_mirror(model.logits());
  Kokkos::deep_copy(before, model.logits());
  auto host = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), inputs);
  host(0, 3) = (host(0, 3) + 7) % 23;
  Kokkos::deep_copy(inputs, host);
  model.forward(ExecSpace(), inputs, targets);
  auto after = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), model.logits());
  for (int t = 0; t < 6; ++t) {
    bool same = true;
    for (int v = 0; v < 23; ++v) same = same && before(t, v) == after(t, v);
    CHECK(same == (t < 3));
  }
}

TEST_CASE("gpt2: fused and GEMM attention give the same loss and gradients", "[model][gpt2][flash]") {
  config::ModelConfig m = tiny_gpt2();
  m.d_model = 24;  // head dimension 8, which the fused kernels take
  test::check_attention_kinds_agree<model::Gpt2Model<double>>(m, 23, [](auto& model) { random::fill_normal(model.parameters().values(), 5, 0, 0.5); });
  m.attention = config::Attention::fused;
  model::Gpt2Model<double> fused(m, 2, 7);
  random::fill_normal(fused.parameters().values(), 6, 0, 0.5);
  test::check_model_gradient(fused, test::random_tokens(2, 7, 23, 9), test::random_tokens(2, 7, 23, 10));
}

TEST_CASE("gpt2: the bf16 model's loss and gradients stay within bf16 rounding of the float model", "[model][gpt2][bf16]") {
  config::ModelConfig m = tiny_gpt2();
  m.d_model = 24;
  model::Gpt2Model<float> fp32(m, 2, 8);
  m.precision = config::Precision::bf16;
  model::Gpt2Model<float, bf16> low(m, 2, 8);
  random::fill_normal(fp32.parameters().values(), 96, 0, 0.3);
  Kokkos::deep_copy(low.parameters().values(), fp32.parameters().values());
  const auto inputs = test::random_tokens(2, 8, 23, 13), targets = test::random_tokens(2, 8, 23, 14);
  test::check_bf16_near_float(fp32, low, inputs, targets);
}
