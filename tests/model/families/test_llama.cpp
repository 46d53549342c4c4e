#include <catch2/catch.hpp>

#include <cmath>

#include "model/families/llama/kernels.hpp"
#include "model/families/llama/llama.hpp"
#include "model/family.hpp"
#include "model/gradcheck.hpp"

using namespace kgpt;

namespace {

// The family's defaults (untied head, MLP 3C, AdamW, no softcap), scaled down.
config::ModelConfig tiny_llama() {
  config::Config c;
  c.model.family = "llama";
  config::resolve_contextual_defaults(c);
  config::ModelConfig m = c.model;
  m.vocab_size = 23;
  m.n_layer = 2;
  m.d_model = 16;
  m.n_head = 4;
  m.n_kv_head = 2;
  m.rope_base = 100.0;
  return m;
}

}  // namespace

TEST_CASE("llama: the registry gives its defaults, layout and names", "[model][llama]") {
  const config::ModelConfig m = tiny_llama();
  CHECK(m.mlp_mult == 3);
  CHECK_FALSE(m.tie_embeddings);
  CHECK(m.logit_softcap == 0.0);
  const model::ParameterLayout layout = model::family("llama").layout(m, 8);
  CHECK(layout.contains("model.embed_tokens.weight"));
  CHECK(layout.contains("model.layers.1.self_attn.k_proj.weight"));
  CHECK(layout.find("model.layers.0.self_attn.k_proj.weight").spec.shape == std::vector<std::size_t>{8, 16});
  CHECK(layout.find("model.layers.0.mlp.down_proj.weight").spec.shape == std::vector<std::size_t>{16, 48});
  CHECK(layout.contains("lm_head.weight"));
  // 2 blocks of (2 norms + q, k, v, o + gate, up, down) + embedding, final norm, head.
  CHECK(layout.entries().size() == 2 * 9 + 3);
  CHECK(model::family("llama").activation_bytes(m, 2, 8) > 0);
}

TEST_CASE("llama: the loss at initialisation is close to ln(vocab)", "[model][llama]") {
  config::ModelConfig m = tiny_llama();
  m.vocab_size = 257;
  m.d_model = 64;
  const auto model = model::make_model<float>(m, 4, 16);
  model::initialize(model->parameters(), 1337);
  const double loss = model->forward(ExecSpace(), test::random_tokens(4, 16, 257, 1), test::random_tokens(4, 16, 257, 2));
  CHECK(std::abs(loss - std::log(257.0)) < 0.1);
}

TEST_CASE("llama: the whole model's gradient matches finite differences", "[model][llama][gradcheck]") {
  // Tied and untied, softcapped or not, and with q, k, v (and gate, up) read as one product or as
  // three where the layout's alignment leaves gaps between them (d_model 10).
  for (const bool tied : {false, true}) {
    for (const int width : {16, 10}) {
      INFO("tied " << tied << ", d_model " << width);
      config::ModelConfig m = tiny_llama();
      m.tie_embeddings = tied;
      m.d_model = width;
      m.n_head = width == 10 ? 5 : 4;
      m.n_kv_head = 1;
      m.logit_softcap = tied ? 3.0 : 0.0;
      model::LlamaModel<double> model(m, 2, 6);
      random::fill_normal(model.parameters().values(), 98, 0, 0.5);
      const auto inputs = test::random_tokens(2, 5, 23, 3), targets = test::random_tokens(2, 5, 23, 4);
      test::check_model_gradient(model, inputs, targets);
    }
  }
}

TEST_CASE("llama: its kernels match their definitions", "[model][llama]") {
  const int n = 5, c = 6, f = 3;
  Matrix<double> x("x", n, c), y("y", n, c), gu("gu", n, 2 * f), act("act", n, f);
  Vector<double> w("w", c), rstd("rstd", n);
  random::fill_normal(x, 1, 0, 1.0);
  random::fill_normal(w, 1, 1, 1.0);
  random::fill_normal(gu, 1, 2, 1.0);
  model::llama::rmsnorm_forward<double>(ExecSpace(), x, w, y, rstd, 1e-5);
  model::llama::swiglu_forward<double>(ExecSpace(), gu, act);
  auto hx = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), x);
  auto hw = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), w);
  auto hy = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), y);
  auto hg = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), gu);
  auto ha = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), act);
  for (int i = 0; i < n; ++i) {
    double ms = 0;
    for (int j = 0; j < c; ++j) ms += hx(i, j) * hx(i, j) / c;
    for (int j = 0; j < c; ++j) CHECK(hy(i, j) == Approx(hx(i, j) / std::sqrt(ms + 1e-5) * hw(j)).epsilon(1e-12));
    for (int j = 0; j < f; ++j) {
      const double g = hg(i, j), u = hg(i, f + j);
      CHECK(ha(i, j) == Approx(g / (1 + std::exp(-g)) * u).epsilon(1e-12));
    }
  }
}

TEST_CASE("llama: logits at positions up to t do not depend on later tokens", "[model][llama]") {
  model::LlamaModel<double> model(tiny_llama(), 1, 6);
  random::fill_normal(model.parameters().values(), 97, 0, 0.5);
  auto inputs = test::random_tokens(1, 6, 23, 8);
  const auto targets = test::random_tokens(1, 6, 23, 9);
  model.forward(ExecSpace(), inputs, targets);
  const auto before = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), model.logits());
  auto host = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), inputs);
  host(0, 3) = (host(0, 3) + 7) % 23;
  Kokkos::deep_copy(inputs, host);
  model.forward(ExecSpace(), inputs, targets);
  const auto after = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), model.logits());
  for (int t = 0; t < 6; ++t) {
    bool same = true;
    for (int v = 0; v < 23; ++v) same = same && before(t, v) == after(t, v);
    CHECK(same == (t < 3));
  }
}

TEST_CASE("llama: fused and GEMM attention give the same loss and gradients", "[model][llama][flash]") {
  config::ModelConfig m = tiny_llama();
  m.d_model = 32;  // head dimension 8, which the fused kernels take
  test::check_attention_kinds_agree<model::LlamaModel<double>>(m, 23, [](auto& model) {
    random::fill_normal(model.parameters().values(), 5, 0, 0.5);
  });
}

TEST_CASE("llama: the bf16 model's loss and gradients stay within bf16 rounding of the float model", "[model][llama][bf16]") {
  config::ModelConfig m = tiny_llama();
  m.d_model = 32;
  model::LlamaModel<float> fp32(m, 2, 8);
  m.precision = config::Precision::bf16;
  model::LlamaModel<float, bf16> low(m, 2, 8);
  random::fill_normal(fp32.parameters().values(), 96, 0, 0.3);
  Kokkos::deep_copy(low.parameters().values(), fp32.parameters().values());
  const auto inputs = test::random_tokens(2, 8, 23, 13), targets = test::random_tokens(2, 8, 23, 14);
  test::check_bf16_near_float(fp32, low, inputs, targets);
}
