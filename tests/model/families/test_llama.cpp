#include <catch2/catch.hpp>

#include <cmath>
#include <type_traits>
#include <vector>

#include "model/families/llama/kernels.hpp"
#include "model/families/llama/llama.hpp"
#include "model/family.hpp"
#include "model/gradcheck.hpp"
#include "model/ops/rmsnorm.hpp"
#include "model/precision_check.hpp"

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

// RoPE of 4 query and 2 key heads of D = 16 over 3 tokens of a sequence of 4, and the weighted
// RMSNorm over C = 64, with 16-byte packs per lane (a GPU's kernels) or one element per lane; the
// host runs both. A: the activations' type.
template <class A, bool Packs>
std::vector<std::vector<double>> llama_rows() {
  using T = compute_t<A>;
  using CM = ConstMatrix<A>;
  const ExecSpace exec;
  const int n = 6, seq = 4, heads = 4, kv = 2, dim = 16, width = (heads + 2 * kv) * dim, c = 64;
  const model::ops::QkShape s{heads, kv, dim, seq, 0, heads * dim};
  Matrix<double> raw_d("raw", n, width), dq_d("dq", n, heads * dim), dk_d("dk", n, kv * dim);
  Matrix<double> x_d("x", n, c), dy_d("dy", n, c);
  Vector<double> w_d("w", c);
  random::fill_normal(raw_d, 7, 0, 1.0);
  random::fill_normal(dq_d, 7, 1, 1.0);
  random::fill_normal(dk_d, 7, 2, 1.0);
  random::fill_normal(x_d, 7, 3, 2.0);
  random::fill_normal(dy_d, 7, 4, 1.0);
  random::fill_normal(w_d, 7, 5, 1.0);
  const auto raw = test::converted<Matrix<A>>("raw", raw_d), dq = test::converted<Matrix<A>>("dq", dq_d);
  const auto dk = test::converted<Matrix<A>>("dk", dk_d), x = test::converted<Matrix<A>>("x", x_d);
  const auto dy = test::converted<Matrix<A>>("dy", dy_d);
  const auto w = test::converted<Vector<A>>("w", w_d);
  Matrix<T> cos_table("cos", seq, dim / 2), sin_table("sin", seq, dim / 2);
  model::ops::rope_tables(cos_table, sin_table, 100.0);
  const ConstMatrix<T> cos_t(cos_table), sin_t(sin_table);
  Matrix<A> q("q", n, heads * dim), k("k", n, kv * dim), d_raw("d_raw", n, width), y("y", n, c), dx("dx", n, c);
  Vector<T> rstd("rstd", n), dw("dw", c);
  if (Packs) {  // else the packed kernels would not run
    constexpr int P = 16 / sizeof(A);
    REQUIRE(model::ops::detail::qk_packs_fit<P>(s, raw, q, k, cos_t, sin_t));
    REQUIRE(model::ops::detail::qk_packs_fit<P>(s, d_raw, dq, dk, cos_t, sin_t));
    REQUIRE(model::ops::PackedRows<P>::fits(c, x, y, dy, dx));
    REQUIRE(model::ops::PackedRows<P>::aligned(w.data()));
  }
  model::llama::rope_forward<T, Packs>(exec, CM(raw), s, cos_t, sin_t, q, k);
  model::llama::rope_backward<T, Packs>(exec, s, cos_t, sin_t, CM(dq), CM(dk), d_raw);
  model::ops::weighted_rmsnorm_forward<T, Packs>(exec, CM(x), ConstVector<A>(w), y, rstd, T(1e-5));
  model::ops::weighted_rmsnorm_backward<T, Packs>(exec, CM(x), ConstVector<A>(w), ConstVector<T>(rstd), CM(dy), dx,
                                                  dw);
  return {host_values(q), host_values(k), host_values(d_raw), host_values(y), host_values(rstd), host_values(dx),
          host_values(dw)};
}

template <class A>
void check_packed_rows() {
  const auto rows = llama_rows<A, false>(), packed = llama_rows<A, true>();
  // The same arithmetic per element; on a GPU the rows' sums in another order (a few ulps of r), so
  // a value stored in bf16 may round to its neighbour.
  const double allowed = std::is_same<A, bf16>::value ? 1.0 / 128 : 1e-5;
  const char* names[] = {"q", "k", "d_raw", "y", "rstd", "dx", "dw"};
  for (std::size_t i = 0; i < rows.size(); ++i) {
    INFO(names[i]);
    CHECK(test::max_difference(packed[i], rows[i]) <= allowed);
  }
}

}  // namespace

TEST_CASE("llama: RoPE and the weighted RMSNorm read 16 bytes at a time give what one element per lane gives",
          "[model][llama][packed]") {
  SECTION("float") { check_packed_rows<float>(); }
  SECTION("bf16") { check_packed_rows<bf16>(); }
}

TEST_CASE("llama: the RoPE backward is the forward's transpose", "[model][llama][rope]") {
  // <rope(x), dz> = <x, rope^T(dz)> for the q and k columns; the v columns of d_raw stay untouched.
  const int n = 6, seq = 4, heads = 4, kv = 2, dim = 8, width = (heads + 2 * kv) * dim;
  const model::ops::QkShape s{heads, kv, dim, seq, 0, heads * dim};
  Matrix<double> raw("raw", n, width), q("q", n, heads * dim), k("k", n, kv * dim), dq("dq", n, heads * dim);
  Matrix<double> dk("dk", n, kv * dim), d_raw("d_raw", n, width);
  random::fill_normal(raw, 8, 0, 1.0);
  random::fill_normal(dq, 8, 1, 1.0);
  random::fill_normal(dk, 8, 2, 1.0);
  Kokkos::deep_copy(d_raw, 7.0);
  Matrix<double> cos_table("cos", seq, dim / 2), sin_table("sin", seq, dim / 2);
  model::ops::rope_tables(cos_table, sin_table, 100.0);
  model::llama::rope_forward<double>(ExecSpace(), ConstMatrix<double>(raw), s, ConstMatrix<double>(cos_table),
                                     ConstMatrix<double>(sin_table), q, k);
  model::llama::rope_backward<double>(ExecSpace(), s, ConstMatrix<double>(cos_table), ConstMatrix<double>(sin_table),
                                      ConstMatrix<double>(dq), ConstMatrix<double>(dk), d_raw);
  const auto hr = host_values(raw), hq = host_values(q), hk = host_values(k), hdq = host_values(dq);
  const auto hdk = host_values(dk), hd = host_values(d_raw);
  double forward_side = 0, backward_side = 0;
  for (std::size_t i = 0; i < hq.size(); ++i) forward_side += hq[i] * hdq[i];
  for (std::size_t i = 0; i < hk.size(); ++i) forward_side += hk[i] * hdk[i];
  for (int row = 0; row < n; ++row) {
    for (int col = 0; col < (heads + kv) * dim; ++col) backward_side += hr[row * width + col] * hd[row * width + col];
    for (int col = (heads + kv) * dim; col < width; ++col) CHECK(hd[row * width + col] == 7.0);
  }
  CHECK(forward_side == Approx(backward_side).epsilon(1e-13));
  // And the rotation is Hugging Face's: z[i] = x[i] cos - x[i + D/2] sin at token 1, head 0.
  const auto hc = host_values(cos_table), hs = host_values(sin_table);
  const int token = 1, t = token % seq, half = dim / 2;
  for (int i = 0; i < half; ++i) {
    const double x1 = hr[token * width + i], x2 = hr[token * width + i + half];
    CHECK(hq[token * heads * dim + i] == Approx(x1 * hc[t * half + i] - x2 * hs[t * half + i]).epsilon(1e-14));
    CHECK(hq[token * heads * dim + i + half] == Approx(x2 * hc[t * half + i] + x1 * hs[t * half + i]).epsilon(1e-14));
  }
}

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
  model::ops::weighted_rmsnorm_forward<double>(ExecSpace(), x, w, y, rstd, 1e-5);
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
