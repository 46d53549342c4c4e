#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "core/backend.hpp"
#include "model/gradcheck.hpp"
#include "model/ops/gelu_definition.hpp"
#include "model/ops/linear.hpp"
#include "model/precision_check.hpp"

using namespace kgpt;
using model::ops::Linear;
using test::host_values;
using test::max_difference;

namespace {

// gpt2's MLP at small sizes: up (F x C, bias) into GELU, then down (C x F, bias); N rows of x. F = 40
// gives GELU's input a leading dimension that cuBLASLt's GELU epilogues take (a multiple of 8), F = 36
// one they refuse, so a GPU runs both the fused and the separate path in bf16.
template <class T, class A>
struct Mlp {
  std::size_t n, c, f;
  Matrix<A> x, w_up, w_down, pre, act, dy, d_pre;
  Vector<A> b_up, b_down;
  Matrix<T> g_up, g_down;
  Vector<T> gb_up, gb_down;

  Mlp(std::size_t rows, std::size_t width, std::size_t hidden, bool bias)
      : n(rows), c(width), f(hidden), x("x", n, c), w_up("w_up", f, c), w_down("w_down", c, f), pre("pre", n, f),
        act("act", n, f), dy("dy", n, c), d_pre("d_pre", n, f), b_up("b_up", bias ? f : 0), b_down("b_down", bias ? c : 0),
        g_up("g_up", f, c), g_down("g_down", c, f), gb_up("gb_up", bias ? f : 0), gb_down("gb_down", bias ? c : 0) {
    random::fill_normal(x, 40, 0, 1.0);
    random::fill_normal(w_up, 40, 1, 0.5);
    random::fill_normal(w_down, 40, 2, 0.5);
    random::fill_normal(dy, 40, 3, 1.0);
    if (bias) {
      random::fill_normal(b_up, 40, 4, 0.5);
      random::fill_normal(b_down, 40, 5, 0.5);
      random::fill_normal(gb_down, 40, 6, 1.0);  // the gradients accumulate
    }
    random::fill_normal(g_down, 40, 7, 1.0);
  }
  Linear<T, A> up() const { return Linear<T, A>(w_up, g_up, b_up, gb_up); }
  Linear<T, A> down() const { return Linear<T, A>(w_down, g_down, b_down, gb_down); }

  // epilogue: model.gelu_epilogue, GELU in the products where the backend has them.
  void forward(bool epilogue = true) { model::ops::linear_gelu_forward(ExecSpace(), up(), x, pre, act, epilogue); }
  void backward(bool epilogue = true) {
    Kokkos::deep_copy(d_pre, A(std::numeric_limits<float>::quiet_NaN()));  // every element must be written
    model::ops::linear_backward_into_gelu(ExecSpace(), down(), act, pre, dy, d_pre, epilogue);
  }
};

// The definitions, in long double from the values the op read (its own pre and act where they are
// inputs), for one Mlp: pre, act, d_pre, and the accumulated dW and db of the layer below GELU.
template <class T, class A>
void check_against_definition(bool bias, std::size_t f, double tol) {
  Mlp<T, A> m(12, 16, f, bias);
  const auto g_down_before = host_values(m.g_down), gb_down_before = host_values(m.gb_down);
  m.forward();
  m.backward();
  const auto x = host_values(m.x), w_up = host_values(m.w_up), w_down = host_values(m.w_down), b_up = host_values(m.b_up);
  const auto pre = host_values(m.pre), act = host_values(m.act), dy = host_values(m.dy);
  std::vector<double> pre_ref(m.n * f), act_ref(m.n * f), d_pre_ref(m.n * f), g_down_ref(g_down_before),
      gb_down_ref(gb_down_before);
  for (std::size_t i = 0; i < m.n; ++i) {
    for (std::size_t j = 0; j < f; ++j) {
      long double z = bias ? b_up[j] : 0;
      for (std::size_t p = 0; p < m.c; ++p) z += static_cast<long double>(x[i * m.c + p]) * w_up[j * m.c + p];
      pre_ref[i * f + j] = static_cast<double>(z);
      // GELU and its gradient of the pre-activation the op kept: the rounding of pre does not count.
      act_ref[i * f + j] = static_cast<double>(test::gelu_tanh(pre[i * f + j]));
      long double back = 0;
      for (std::size_t p = 0; p < m.c; ++p) back += static_cast<long double>(dy[i * m.c + p]) * w_down[p * f + j];
      d_pre_ref[i * f + j] = static_cast<double>(back * test::gelu_tanh_derivative(pre[i * f + j]));
    }
  }
  for (std::size_t p = 0; p < m.c; ++p) {
    for (std::size_t j = 0; j < f; ++j) {
      long double sum = 0;
      for (std::size_t i = 0; i < m.n; ++i) sum += static_cast<long double>(dy[i * m.c + p]) * act[i * f + j];
      g_down_ref[p * f + j] += static_cast<double>(sum);
    }
    if (bias) {
      long double sum = 0;
      for (std::size_t i = 0; i < m.n; ++i) sum += dy[i * m.c + p];
      gb_down_ref[p] += static_cast<double>(sum);
    }
  }
  CHECK(max_difference(pre, pre_ref) < tol);
  CHECK(max_difference(act, act_ref) < tol);
  CHECK(max_difference(host_values(m.d_pre), d_pre_ref) < tol);
  CHECK(max_difference(host_values(m.g_down), g_down_ref) < tol);
  CHECK(max_difference(host_values(m.gb_down), gb_down_ref) < tol);
}

}  // namespace

TEST_CASE("linear layers into GELU match the definition, forward and backward", "[model][linear]") {
  for (const bool bias : {true, false}) {
    for (const std::size_t f : {std::size_t(40), std::size_t(36)}) {
      INFO((bias ? "with" : "without") << " biases, F = " << f);
      check_against_definition<double, double>(bias, f, 1e-12);
      // float: sums of 16 products and GELU's exp, rounded at 6e-8 each (an erf GELU would be up to
      // 4.7e-4 off).
      check_against_definition<float, float>(bias, f, 2e-6);
      // bf16 activations: pre, act and d_pre are each rounded once to 8 bits (2^-8 relative).
      check_against_definition<float, bf16>(bias, f, 1e-2);
    }
  }
}

TEST_CASE("linear layers into GELU equal the product and the activation's kernel apart", "[model][linear]") {
  // Without the epilogue, and always on the host, the values are the separate ops' bit for bit; a
  // GPU may put GELU into the product, which rounds the pre-activation after GELU reads it.
  for (const bool bias : {true, false}) {
    for (const bool epilogue : {true, false}) {
      INFO((bias ? "with" : "without") << " biases, model.gelu_epilogue " << epilogue);
      Mlp<float, bf16> as_asked(12, 16, 40, bias), apart(12, 16, 40, bias);
      as_asked.forward(epilogue);
      as_asked.backward(epilogue);
      model::ops::linear_forward(ExecSpace(), apart.up(), apart.x, apart.pre);
      model::ops::gelu_tanh_forward<float>(ExecSpace(), apart.pre, apart.act);
      model::ops::linear_backward(ExecSpace(), apart.down(), apart.act, apart.dy, apart.d_pre, false);
      model::ops::gelu_tanh_backward<float>(ExecSpace(), apart.pre, apart.d_pre, apart.d_pre);
      const bool rounded_apart = backend::on_gpu && epilogue;
      const double allowed = rounded_apart ? 1e-2 : 0.0;
      CHECK(max_difference(host_values(as_asked.pre), host_values(apart.pre)) <= allowed);
      CHECK(max_difference(host_values(as_asked.act), host_values(apart.act)) <= allowed);
      CHECK(max_difference(host_values(as_asked.d_pre), host_values(apart.d_pre)) <= allowed);
      CHECK(max_difference(host_values(as_asked.gb_down), host_values(apart.gb_down)) <= allowed);
      // dW of the layer above GELU sums dy x act over the rows: each act's rounding difference, times
      // dy, adds up (0.04 at these sizes). What it must equal is dy^T times the acts' difference.
      const std::vector<double> g_asked = host_values(as_asked.g_down), g_apart = host_values(apart.g_down);
      const std::vector<double> act_asked = host_values(as_asked.act), act_apart = host_values(apart.act);
      const std::vector<double> dy = host_values(apart.dy);
      double worst = 0;
      for (std::size_t j = 0; j < apart.c; ++j) {
        for (std::size_t k = 0; k < apart.f; ++k) {
          double expected = 0;
          for (std::size_t row = 0; row < apart.n; ++row) {
            expected += dy[row * apart.c + j] * (act_asked[row * apart.f + k] - act_apart[row * apart.f + k]);
          }
          worst = std::max(worst, std::abs(g_asked[j * apart.f + k] - g_apart[j * apart.f + k] - expected));
        }
      }
      CHECK(worst <= (rounded_apart ? 1e-4 : 0.0));
    }
  }
}

TEST_CASE("linear layers into GELU: the backward matches finite differences", "[model][linear][gradcheck]") {
  // loss = sum(W * down(GELU(up(x)))): the gradients of x and of both layers' weights and biases.
  Mlp<double, double> m(6, 8, 16, true);
  Matrix<double> y("y", m.n, m.c), dx("dx", m.n, m.c);
  const auto loss = [&] {
    m.forward();
    model::ops::linear_forward(ExecSpace(), m.down(), m.act, y);
    return test::dot(m.dy, y);  // dy is W, the upstream gradient
  };
  Kokkos::deep_copy(m.g_down, 0.0);
  Kokkos::deep_copy(m.gb_down, 0.0);
  loss();
  m.backward();
  model::ops::linear_backward(ExecSpace(), m.up(), m.x, m.d_pre, dx);
  test::check_gradient("x", m.x, dx, loss);
  test::check_gradient("up weight", m.w_up, m.g_up, loss);
  test::check_gradient("up bias", m.b_up, m.gb_up, loss);
  test::check_gradient("down weight", m.w_down, m.g_down, loss);
  test::check_gradient("down bias", m.b_down, m.gb_down, loss);
}

TEST_CASE("gemm_gelu refuses a bias in the backward and mismatched shapes", "[model][linear]") {
  Matrix<float> a("a", 4, 3), b("b", 8, 3), pre("pre", 4, 8), d("d", 4, 8), wrong("wrong", 4, 7);
  Vector<float> bias("bias", 8);
  CHECK_THROWS_AS(model::gemm_gelu(ExecSpace(), model::GeluEpilogue::backward, model::Op::none, model::Op::transpose, a,
                                   b, bias, pre, d),
                  Error);
  CHECK_THROWS_AS(model::gemm_gelu(ExecSpace(), model::GeluEpilogue::forward, model::Op::none, model::Op::transpose, a,
                                   b, bias, wrong, d),
                  Error);
  CHECK_THROWS_AS(model::gemm_gelu(ExecSpace(), model::GeluEpilogue::forward, model::Op::none, model::Op::none, a, b,
                                   bias, pre, d),
                  Error);
}
