#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "core/bf16.hpp"
#include "core/fp8.hpp"
#include "core/random.hpp"
#include "model/gradcheck.hpp"
#include "model/ops/linear.hpp"
#include "model/precision_check.hpp"

using namespace kgpt;
using model::ops::Fp8Operands;
using model::ops::Linear;
using test::host_values;

namespace {

// Every finite value of a format, decoded from its 8 bits by the format's definition: sign, then
// exponent bits e and mantissa bits m; e = 0 is subnormal (m 2^(1 - bias - M)), else
// (1 + m 2^-M) 2^(e - bias); e4m3's all-ones code S.1111.111 is NaN, e5m2's all-ones exponent is
// infinity and NaN. Returned with each value's code, so that ties can go to the even code.
struct Decoded {
  double value;
  unsigned code;
};

std::vector<Decoded> decode_all(int exponent_bits, int mantissa_bits) {
  const int bias = (1 << (exponent_bits - 1)) - 1;
  std::vector<Decoded> values;
  for (unsigned code = 0; code < 256; ++code) {
    const unsigned e = (code >> mantissa_bits) & ((1u << exponent_bits) - 1), m = code & ((1u << mantissa_bits) - 1);
    const bool negative = (code & 0x80u) != 0;
    if (exponent_bits == 4 && e == 15 && m == 7) continue;  // e4m3's NaN
    if (exponent_bits == 5 && e == 31) continue;            // e5m2's infinities and NaNs
    const double magnitude = e == 0 ? std::ldexp(static_cast<double>(m), 1 - bias - mantissa_bits)
                                    : std::ldexp(1.0 + std::ldexp(static_cast<double>(m), -mantissa_bits),
                                                 static_cast<int>(e) - bias);
    values.push_back({negative ? -magnitude : magnitude, code});
  }
  return values;
}

// The nearest value of the table, ties to the even code (its lowest mantissa bit clear); beyond the
// largest finite value, that value (saturation).
double nearest(const std::vector<Decoded>& table, double x) {
  double largest = 0;
  for (const Decoded& d : table) largest = std::max(largest, d.value);
  x = std::min(std::max(x, -largest), largest);
  double best = 0, best_distance = std::numeric_limits<double>::infinity();
  unsigned best_code = 0;
  for (const Decoded& d : table) {
    const double distance = std::fabs(d.value - x);
    if (distance < best_distance || (distance == best_distance && (d.code & 1u) == 0 && (best_code & 1u) != 0)) {
      best = d.value;
      best_distance = distance;
      best_code = d.code;
    }
  }
  return best;
}

float float_of_bits(std::uint32_t word) {
  float v;
  std::memcpy(&v, &word, sizeof v);
  return v;
}

template <Fp8Format F>
float round_on_host(float v) {
  return fp8_round<F>(v);
}

}  // namespace

TEST_CASE("fp8 rounding of chosen values: steps, ties to even, subnormals, saturation", "[fp8]") {
  constexpr auto e4 = Fp8Format::e4m3;
  constexpr auto e5 = Fp8Format::e5m2;
  // e4m3 between 1 and 2 steps by 1/8: 1.0625 is a tie between 1 (even) and 1.125 (odd).
  CHECK(round_on_host<e4>(1.0625f) == 1.0f);
  CHECK(round_on_host<e4>(1.1875f) == 1.25f);   // between 1.125 (odd) and 1.25 (even)
  CHECK(round_on_host<e4>(1.07f) == 1.125f);
  CHECK(round_on_host<e4>(-3.3f) == -3.25f);
  CHECK(round_on_host<e4>(448.0f) == 448.0f);
  CHECK(round_on_host<e4>(440.0f) == 448.0f);    // step 32 above 256
  CHECK(round_on_host<e4>(1e6f) == 448.0f);      // saturated
  CHECK(round_on_host<e4>(-std::numeric_limits<float>::infinity()) == -448.0f);
  CHECK(round_on_host<e4>(0.001953125f) == 0.001953125f);  // 2^-9, the smallest subnormal
  CHECK(round_on_host<e4>(0.0009765625f) == 0.0f);         // half of it: a tie, to zero (even)
  CHECK(round_on_host<e4>(0.00098f) == 0.001953125f);
  CHECK(round_on_host<e4>(0.0029296875f) == 0.00390625f);  // 1.5 x 2^-9: a tie, to 2 x 2^-9
  CHECK(std::signbit(round_on_host<e4>(-1e-30f)));         // -0 keeps its sign
  CHECK(std::isnan(round_on_host<e4>(std::numeric_limits<float>::quiet_NaN())));
  // e5m2 between 1 and 2 steps by 1/4.
  CHECK(round_on_host<e5>(1.125f) == 1.0f);
  CHECK(round_on_host<e5>(1.375f) == 1.5f);
  CHECK(round_on_host<e5>(57344.0f) == 57344.0f);
  CHECK(round_on_host<e5>(60000.0f) == 57344.0f);
  CHECK(round_on_host<e5>(std::ldexp(1.0f, -16)) == std::ldexp(1.0f, -16));  // the smallest subnormal
  CHECK(round_on_host<e5>(std::ldexp(1.0f, -17)) == 0.0f);
}

TEST_CASE("fp8 rounding equals the nearest value of the formats' decoded tables for every bf16 input", "[fp8]") {
  const std::vector<Decoded> e4m3 = decode_all(4, 3), e5m2 = decode_all(5, 2);
  REQUIRE(e4m3.size() == 254);  // 256 codes less e4m3's two NaNs
  REQUIRE(e5m2.size() == 248);  // less e5m2's two infinities and six NaNs
  std::size_t checked = 0, e4_wrong = 0, e5_wrong = 0;
  // Every bf16 value covers every exponent and the ties between FP8 steps (bf16 has 7 mantissa bits).
  for (std::uint32_t top = 0; top < 0x10000u; ++top) {
    const float x = float_of_bits(top << 16);
    if (!std::isfinite(x)) continue;
    ++checked;
    if (round_on_host<Fp8Format::e4m3>(x) != static_cast<float>(nearest(e4m3, x))) ++e4_wrong;
    if (round_on_host<Fp8Format::e5m2>(x) != static_cast<float>(nearest(e5m2, x))) ++e5_wrong;
  }
  CHECK(checked == 65280);
  CHECK(e4_wrong == 0);
  CHECK(e5_wrong == 0);
}

TEST_CASE("fp8 bits: every finite value of each format gets its own code back, NaN the format's NaN", "[fp8]") {
  std::size_t e4_wrong = 0, e5_wrong = 0;
  for (const Decoded& d : decode_all(4, 3)) e4_wrong += fp8_bits<Fp8Format::e4m3>(static_cast<float>(d.value)) != d.code;
  for (const Decoded& d : decode_all(5, 2)) e5_wrong += fp8_bits<Fp8Format::e5m2>(static_cast<float>(d.value)) != d.code;
  CHECK(e4_wrong == 0);
  CHECK(e5_wrong == 0);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  CHECK(fp8_bits<Fp8Format::e4m3>(nan) == 0x7f);
  CHECK(fp8_bits<Fp8Format::e5m2>(-nan) == 0xff);
  CHECK(fp8_bits<Fp8Format::e4m3>(-0.0f) == 0x80);
  CHECK(fp8_bits<Fp8Format::e4m3>(448.0f) == 0x7e);    // S.1111.110
  CHECK(fp8_bits<Fp8Format::e5m2>(57344.0f) == 0x7b);  // S.11110.11
  CHECK(fp8_bits<Fp8Format::e4m3>(std::ldexp(3.0f, -9)) == 0x03);  // a subnormal: 3 steps of 2^-9
}

TEST_CASE("fp8 scale: the largest power of two that keeps the largest magnitude in range", "[fp8]") {
  CHECK(fp8_scale_exponent<Fp8Format::e4m3>(448.0f) == 0);
  CHECK(fp8_scale_exponent<Fp8Format::e4m3>(449.0f) == -1);
  CHECK(fp8_scale_exponent<Fp8Format::e4m3>(1.0f) == 8);
  CHECK(fp8_scale_exponent<Fp8Format::e4m3>(1.75f) == 8);
  CHECK(fp8_scale_exponent<Fp8Format::e4m3>(1.76f) == 7);
  CHECK(fp8_scale_exponent<Fp8Format::e4m3>(0.001f) == 18);  // 0.001 x 2^18 = 262
  CHECK(fp8_scale_exponent<Fp8Format::e5m2>(1.0f) == 15);
  CHECK(fp8_scale_exponent<Fp8Format::e5m2>(1e-7f) == 39);  // 1e-7 x 2^39 = 54,976
  CHECK(fp8_scale_exponent<Fp8Format::e4m3>(0.0f) == 0);
  CHECK(fp8_scale_exponent<Fp8Format::e4m3>(-std::numeric_limits<float>::max()) == 0);  // an empty tensor's amax
  CHECK(fp8_scale_exponent<Fp8Format::e4m3>(std::numeric_limits<float>::infinity()) == 0);
  CHECK(fp8_scale_exponent<Fp8Format::e4m3>(1e-40f) == 126);
  for (float amax : {0.3f, 7.0f, 1234.5f, 3e-5f}) {
    const int k = fp8_scale_exponent<Fp8Format::e4m3>(amax);
    CHECK(std::ldexp(amax, k) <= 448.0f);
    CHECK(std::ldexp(amax, k + 1) > 448.0f);
  }
}

namespace {

// x rounded as a product's FP8 operand, on the host: at the scale of its own largest magnitude.
template <Fp8Format F>
std::vector<double> rounded_operand(const std::vector<double>& x) {
  float amax = 0;
  for (double v : x) amax = std::max(amax, std::fabs(static_cast<float>(v)));
  const int k = fp8_scale_exponent<F>(amax);
  std::vector<double> out;
  for (double v : x) out.push_back(std::ldexp(static_cast<double>(fp8_round<F>(std::ldexp(static_cast<float>(v), k))), -k));
  return out;
}

// Columns first .. first + cols - 1 of every row of `wide`, row by row: what a subview of them holds.
template <class A>
std::vector<double> column_block(const Matrix<A>& wide, std::size_t first, std::size_t cols) {
  const auto values = host_values(wide);
  std::vector<double> block;
  for (std::size_t i = 0; i < wide.extent(0); ++i) {
    for (std::size_t j = 0; j < cols; ++j) block.push_back(values[i * wide.extent(1) + first + j]);
  }
  return block;
}

}  // namespace

TEMPLATE_TEST_CASE("fp8 operands: each a tensor rounded at its own scale, strided rows included", "[fp8]", float, bf16) {
  using A = TestType;
  const std::size_t n = 7, c = 24;
  Matrix<A> wide("wide", n, c + 8);
  random::fill_normal(wide, 91, 0, 3.0);
  const auto x = Kokkos::subview(wide, Kokkos::ALL(), std::make_pair(std::size_t(4), std::size_t(4 + c)));
  Fp8Operands<A> operands("test::", n, c, c, c * c);
  const Matrix<A> in = operands.input(ExecSpace(), x), grad = operands.gradient(ExecSpace(), x);
  const auto got_in = host_values(in), got_grad = host_values(grad);
  const std::vector<double> x_values = column_block(wide, 4, c);
  const auto want_in = rounded_operand<Fp8Format::e4m3>(x_values), want_grad = rounded_operand<Fp8Format::e5m2>(x_values);
  double in_diff = 0, grad_diff = 0;
  std::size_t changed = 0;
  for (std::size_t e = 0; e < n * c; ++e) {
    in_diff = std::max(in_diff, std::fabs(got_in[e] - want_in[e]));
    grad_diff = std::max(grad_diff, std::fabs(got_grad[e] - want_grad[e]));
    if (got_in[e] != x_values[e]) ++changed;
  }
  CHECK(in_diff == 0);
  CHECK(grad_diff == 0);
  CHECK(changed > n * c / 2);  // e4m3 keeps 4 significant bits: most values move
}

TEMPLATE_TEST_CASE("fp8 bytes: each operand's FP8 codes at its own scale, as it is and transposed", "[fp8]", float, bf16) {
  using A = TestType;
  const std::size_t n = 32, c = 24;
  Matrix<A> wide("wide", n, c + 8);
  random::fill_normal(wide, 93, 0, 5.0);
  const auto x = Kokkos::subview(wide, Kokkos::ALL(), std::make_pair(std::size_t(8), std::size_t(8 + c)));
  Kokkos::View<std::uint8_t*, MemSpace> as_is("as_is", n * c), transposed("transposed", n * c);
  Kokkos::View<float*, MemSpace> scalars("scalars", 2);
  const ExecSpace exec;
  model::ops::fp8_amax(exec, x, scalars.data());
  model::ops::fp8_encode_scaled<Fp8Format::e4m3>(exec, x, as_is.data(), transposed.data(), scalars.data(),
                                                 scalars.data() + 1);
  exec.fence();
  const auto got = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), as_is);
  const auto got_t = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), transposed);
  const auto got_scalars = host_values(scalars);
  const std::vector<double> x_values = column_block(wide, 8, c);
  double amax = 0;
  for (const double v : x_values) amax = std::max(amax, std::fabs(v));
  const int k = fp8_scale_exponent<Fp8Format::e4m3>(static_cast<float>(amax));
  CHECK(got_scalars[1] == std::ldexp(1.0, -k));
  // The codes decoded by the format's definition, times the scale, are the rounded operand.
  std::vector<double> by_code(256, std::numeric_limits<double>::quiet_NaN());
  for (const Decoded& d : decode_all(4, 3)) by_code[d.code] = d.value;
  const auto want = rounded_operand<Fp8Format::e4m3>(x_values);
  std::size_t wrong = 0, wrong_t = 0;
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t j = 0; j < c; ++j) {
      wrong += by_code[got(i * c + j)] * got_scalars[1] != want[i * c + j];
      wrong_t += got_t(j * n + i) != got(i * c + j);
    }
  }
  CHECK(wrong == 0);
  CHECK(wrong_t == 0);
}

namespace {

// A layer of N x C inputs to F outputs, with bias, its products on FP8 operands.
template <class T, class A>
struct Fp8Layer {
  std::size_t n, c, f;
  Matrix<A> x{"x", n, c}, w{"w", f, c}, y{"y", n, f}, r{"r", n, f}, dy{"dy", n, f}, dx{"dx", n, c};
  Vector<A> b{"b", f};
  Matrix<T> g{"g", f, c};
  Vector<T> gb{"gb", f};
  Fp8Operands<A> operands{"test::", n, c, f, f * c};
  Fp8Layer(std::size_t rows, std::size_t in, std::size_t out) : n(rows), c(in), f(out) {
    random::fill_normal(x, 17, 0, 2.0);
    random::fill_normal(w, 17, 1, 0.3);
    random::fill_normal(b, 17, 2, 0.5);
    random::fill_normal(r, 17, 3, 1.0);
    random::fill_normal(dy, 17, 4, 1e-3);  // gradients are small: e5m2's scale must follow
    random::fill_normal(g, 17, 5, 1.0);    // dW accumulates
  }
  Linear<T, A> layer() const { return Linear<T, A>(w, g, b, gb).with_fp8(&operands); }
};

}  // namespace

TEMPLATE_TEST_CASE("a linear layer's FP8 products equal the definitions on independently rounded operands", "[fp8]",
                   float, bf16) {
  using A = TestType;
  // 10 rows: bf16 products of rounded operands everywhere; 32: a GPU's FP8 products for bf16.
  const std::size_t rows = GENERATE(10, 32);
  Fp8Layer<float, A> t(rows, 16, 48);
  CHECK(Fp8Operands<A>::native(t.n, t.c, t.f) ==
        (backend::Traits::fp8_products && std::is_same<A, bf16>::value && rows % 16 == 0));
  const auto g_before = host_values(t.g);
  model::ops::linear_forward(ExecSpace(), t.layer(), t.x, t.r, t.y);
  model::ops::linear_backward(ExecSpace(), t.layer(), t.x, t.dy, t.dx);
  const auto xq = rounded_operand<Fp8Format::e4m3>(host_values(t.x)), wq = rounded_operand<Fp8Format::e4m3>(host_values(t.w));
  const auto dyq = rounded_operand<Fp8Format::e5m2>(host_values(t.dy));
  const auto b = host_values(t.b), r = host_values(t.r), y = host_values(t.y), dx = host_values(t.dx), g = host_values(t.g);
  // The products accumulate in fp32 (and round y and dx to A once): the tolerance is A's rounding
  // of the results; an operand not rounded to FP8 moves them by FP8's 2^-4 relative.
  const double tol = std::is_same<A, bf16>::value ? 8e-3 : 1e-5;
  double y_err = 0, dx_err = 0, g_err = 0, y_from_unrounded = 0;
  const auto x = host_values(t.x), w = host_values(t.w);
  for (std::size_t i = 0; i < t.n; ++i) {
    for (std::size_t o = 0; o < t.f; ++o) {
      double want = b[o] + r[i * t.f + o], plain = want;
      for (std::size_t p = 0; p < t.c; ++p) {
        want += xq[i * t.c + p] * wq[o * t.c + p];
        plain += x[i * t.c + p] * w[o * t.c + p];
      }
      y_err = std::max(y_err, std::fabs(y[i * t.f + o] - want) / (1 + std::fabs(want)));
      y_from_unrounded = std::max(y_from_unrounded, std::fabs(y[i * t.f + o] - plain) / (1 + std::fabs(plain)));
    }
    for (std::size_t p = 0; p < t.c; ++p) {
      double want = 0, scale = 0;
      for (std::size_t o = 0; o < t.f; ++o) {
        want += dyq[i * t.f + o] * wq[o * t.c + p];
        scale += std::fabs(dyq[i * t.f + o] * wq[o * t.c + p]);
      }
      dx_err = std::max(dx_err, std::fabs(dx[i * t.c + p] - want) / (scale + 1e-30));
    }
  }
  for (std::size_t o = 0; o < t.f; ++o) {
    for (std::size_t p = 0; p < t.c; ++p) {
      double want = g_before[o * t.c + p];
      for (std::size_t i = 0; i < t.n; ++i) want += dyq[i * t.f + o] * xq[i * t.c + p];
      g_err = std::max(g_err, std::fabs(g[o * t.c + p] - want));
    }
  }
  INFO("y " << y_err << ", dx " << dx_err << ", dW " << g_err << "; y from the unrounded operands " << y_from_unrounded);
  CHECK(y_err <= tol);
  CHECK(dx_err <= tol);
  CHECK(g_err <= 1e-5);  // fp32 accumulation of 10 products of FP8 values, into values near 1
  CHECK(y_from_unrounded > 4 * tol);  // the operands were rounded
}

TEMPLATE_TEST_CASE("gpt2's MLP with FP8 products gives the same with and without the GELU epilogue", "[fp8]", float, bf16) {
  using A = TestType;
  const std::size_t n = GENERATE(12, 32), c = 16, f = n == 12 ? 40 : 48;
  Matrix<A> x("x", n, c), w_up("w_up", f, c), w_down("w_down", c, f), dy("dy", n, c);
  Vector<A> b_up("b_up", f);
  Matrix<float> g_up("g_up", f, c), g_down("g_down", c, f);
  Vector<float> gb_up("gb_up", f);
  random::fill_normal(x, 23, 0, 1.0);
  random::fill_normal(w_up, 23, 1, 0.5);
  random::fill_normal(w_down, 23, 2, 0.5);
  random::fill_normal(b_up, 23, 3, 0.5);
  random::fill_normal(dy, 23, 4, 1e-2);
  Fp8Operands<A> operands("test::", n, f, f, f * c);
  const auto up = Linear<float, A>(w_up, g_up, b_up, gb_up).with_fp8(&operands);
  const auto down = Linear<float, A>(w_down, g_down).with_fp8(&operands);
  std::vector<std::vector<double>> results;
  for (bool epilogue : {true, false}) {
    Matrix<A> pre("pre", n, f), act("act", n, f), d_pre("d_pre", n, f);
    model::ops::linear_gelu_forward(ExecSpace(), up, x, pre, act, epilogue);
    model::ops::linear_backward_into_gelu(ExecSpace(), down, act, pre, dy, d_pre, epilogue);
    results.push_back(host_values(act));
    results.push_back(host_values(d_pre));
  }
  const double tol = std::is_same<A, bf16>::value ? 1e-2 : 1e-5;
  CHECK(test::max_difference(results[0], results[2]) <= tol);
  CHECK(test::max_difference(results[1], results[3]) <= tol * 1e-2);
  // The forward's x goes through e4m3: act differs from GELU of the unrounded product.
  std::vector<double> plain(n * f);
  const auto xh = host_values(x), wh = host_values(w_up), bh = host_values(b_up);
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t o = 0; o < f; ++o) {
      double z = bh[o];
      for (std::size_t p = 0; p < c; ++p) z += xh[i * c + p] * wh[o * c + p];
      plain[i * f + o] = 0.5 * z * (1 + std::tanh(0.7978845608028654 * (z + 0.044715 * z * z * z)));
    }
  }
  CHECK(test::max_difference(results[0], plain) > 4 * tol);
}
