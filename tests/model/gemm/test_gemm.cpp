#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <string>
#include <type_traits>
#include <vector>

#include "core/error.hpp"
#include "core/random.hpp"
#include "model/gemm/gemm.hpp"
#include "model/precision_check.hpp"

using namespace kgpt;
using model::Op;

namespace {

// model::gemm on random operands (C = alpha op(A) op(B) + beta C0), each element with its exact
// value and its scale |alpha| sum_p |op(A)_ip op(B)_pj| + |beta C0_ij|, in double on host copies.
struct GemmOutcome {
  std::vector<double> got, expected, scale;
};

template <class T>
GemmOutcome run_gemm(Op op_a, Op op_b, int m, int n, int k, T alpha, T beta, std::uint64_t seed) {
  Matrix<T> a("a", op_a == Op::none ? m : k, op_a == Op::none ? k : m);
  Matrix<T> b("b", op_b == Op::none ? k : n, op_b == Op::none ? n : k);
  Matrix<T> c("c", m, n);
  random::fill_normal(a, seed, 0, 1.0);
  random::fill_normal(b, seed, 1, 1.0);
  random::fill_normal(c, seed, 2, 1.0);
  auto ha = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), a);
  auto hb = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), b);
  auto hc0 = Kokkos::create_mirror(c);  // a copy even where c is host memory
  Kokkos::deep_copy(hc0, c);
  model::gemm(ExecSpace(), op_a, op_b, alpha, ConstMatrix<T>(a), ConstMatrix<T>(b), beta, c);
  auto hc = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), c);
  GemmOutcome outcome;
  for (int i = 0; i < m; ++i) {
    for (int j = 0; j < n; ++j) {
      double sum = 0, magnitude = 0;
      for (int p = 0; p < k; ++p) {
        const double term = double(op_a == Op::none ? ha(i, p) : ha(p, i)) * double(op_b == Op::none ? hb(p, j) : hb(j, p));
        sum += term;
        magnitude += std::abs(term);
      }
      outcome.got.push_back(double(hc(i, j)));
      outcome.expected.push_back(double(alpha) * sum + double(beta) * double(hc0(i, j)));
      outcome.scale.push_back(std::abs(double(alpha)) * magnitude + std::abs(double(beta) * double(hc0(i, j))));
    }
  }
  return outcome;
}

template <class T>
void check_gemm(Op op_a, Op op_b, int m, int n, int k, double tol) {
  const GemmOutcome r = run_gemm<T>(op_a, op_b, m, n, k, T(0.5), T(-2), 3);
  for (std::size_t e = 0; e < r.got.size(); ++e) {
    REQUIRE(std::abs(r.got[e] - r.expected[e]) <= tol * (1 + std::abs(r.expected[e])));
  }
}

}  // namespace

TEST_CASE("gemm matches the definition for every transpose combination", "[model][gemm]") {
  for (Op op_a : {Op::none, Op::transpose}) {
    for (Op op_b : {Op::none, Op::transpose}) {
      check_gemm<double>(op_a, op_b, 7, 5, 9, 1e-12);
      check_gemm<float>(op_a, op_b, 33, 17, 65, 1e-5);
    }
  }
}

TEST_CASE("gemm works on row-block subviews and refuses mismatched shapes", "[model][gemm]") {
  Matrix<double> a("a", 8, 4), b("b", 4, 3), c("c", 8, 3);
  random::fill_normal(a, 5, 0, 1.0);
  random::fill_normal(b, 5, 1, 1.0);
  auto a_rows = Kokkos::subview(a, Kokkos::make_pair(2, 6), Kokkos::ALL());
  auto c_rows = Kokkos::subview(c, Kokkos::make_pair(2, 6), Kokkos::ALL());
  model::gemm(ExecSpace(), Op::none, Op::none, 1.0, a_rows, b, 0.0, c_rows);
  auto ha = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), a);
  auto hb = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), b);
  auto hc = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), c);
  for (int i = 0; i < 8; ++i) {
    for (int j = 0; j < 3; ++j) {
      double expected = 0;
      if (i >= 2 && i < 6) {
        for (int p = 0; p < 4; ++p) expected += ha(i, p) * hb(p, j);
      }
      CHECK(hc(i, j) == Approx(expected).margin(1e-12));
    }
  }
  Matrix<double> wrong("wrong", 5, 3);
  CHECK_THROWS_AS(model::gemm(ExecSpace(), Op::none, Op::none, 1.0, a, b, 0.0, wrong), Error);
}

namespace {

// bf16 copies of random operands, and their values on the host (exact: every bf16 is a float).
struct Bf16Operand {
  Matrix<bf16> m;
  std::vector<double> host;
  Bf16Operand(const std::string& label, std::size_t rows, std::size_t cols, std::uint64_t seed) : m(label, rows, cols) {
    Matrix<float> f("f", rows, cols);
    random::fill_normal(f, seed, 0, 1.0);
    auto hf = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), f);
    auto hm = Kokkos::create_mirror_view(m);
    for (std::size_t i = 0; i < f.span(); ++i) {
      hm.data()[i] = bf16(hf.data()[i]);
      host.push_back(float(hm.data()[i]));
    }
    Kokkos::deep_copy(m, hm);
  }
  double at(std::size_t cols, std::size_t i, std::size_t j) const { return host[i * cols + j]; }
};

}  // namespace

TEST_CASE("bf16 GEMMs accumulate in fp32 and write fp32 or bf16", "[model][gemm][bf16]") {
  for (Op op_a : {Op::none, Op::transpose}) {
    for (Op op_b : {Op::none, Op::transpose}) {
      INFO("op_a " << int(op_a) << " op_b " << int(op_b));
      const int m = 48, n = 40, k = 256;
      const std::size_t ar = op_a == Op::none ? m : k, ac = op_a == Op::none ? k : m;
      const std::size_t br = op_b == Op::none ? k : n, bc = op_b == Op::none ? n : k;
      const Bf16Operand a("a", ar, ac, 8), b("b", br, bc, 9);
      Matrix<float> c32("c32", m, n);
      Matrix<bf16> c16("c16", m, n);
      model::gemm(ExecSpace(), op_a, op_b, 0.75f, a.m, b.m, 0.0f, c32);
      model::gemm(ExecSpace(), op_a, op_b, 0.75f, a.m, b.m, 0.0f, c16);
      auto h32 = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), c32);
      auto h16 = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), c16);
      double worst32 = 0, worst16 = 0;
      for (int i = 0; i < m; ++i) {
        for (int j = 0; j < n; ++j) {
          double sum = 0, magnitude = 0;
          for (int p = 0; p < k; ++p) {
            const double term = (op_a == Op::none ? a.at(ac, i, p) : a.at(ac, p, i)) *
                                (op_b == Op::none ? b.at(bc, p, j) : b.at(bc, j, p));
            sum += term;
            magnitude += std::abs(term);
          }
          const double exact = 0.75 * sum, scale = 0.75 * magnitude;
          worst32 = std::max(worst32, std::abs(h32(i, j) - exact) / scale);
          worst16 = std::max(worst16, std::abs(double(float(h16(i, j))) - exact) / (std::abs(exact) + 1e-6 * scale));
        }
      }
      // The inputs are exact bf16 values: what remains is fp32 accumulation (1e-6 of the scale) and,
      // for a bf16 output, one rounding of the result (2^-8 relative).
      CHECK(worst32 < 1e-5);
      CHECK(worst16 <= std::ldexp(1.0, -8) * 1.05);
    }
  }
}

TEST_CASE("gemm_ex adds a separate C and a bias per column, and leaves C alone", "[model][gemm]") {
  const int m = 9, n = 6, k = 5;
  Matrix<float> a("a", m, k), b("b", n, k), c("c", m, n), d("d", m, n);
  Vector<float> bias("bias", n);
  random::fill_normal(a, 11, 0, 1.0);
  random::fill_normal(b, 11, 1, 1.0);
  random::fill_normal(c, 11, 2, 1.0);
  random::fill_normal(bias, 11, 3, 1.0);
  auto c_before = Kokkos::create_mirror(c);
  Kokkos::deep_copy(c_before, c);
  model::gemm_ex(ExecSpace(), Op::none, Op::transpose, 2.0f, a, b, 1.0f, c, d, bias);
  auto ha = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), a);
  auto hb = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), b);
  auto hc = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), c);
  auto hd = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), d);
  auto hbias = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), bias);
  for (int i = 0; i < m; ++i) {
    for (int j = 0; j < n; ++j) {
      double sum = 0;
      for (int p = 0; p < k; ++p) sum += double(ha(i, p)) * double(hb(j, p));
      CHECK(hd(i, j) == Approx(2 * sum + hc(i, j) + hbias(j)).epsilon(1e-5).margin(1e-5));
      CHECK(hc(i, j) == c_before(i, j));
    }
  }
  Vector<float> wrong("wrong", n + 1);
  CHECK_THROWS_AS(model::gemm_ex(ExecSpace(), Op::none, Op::transpose, 1.0f, a, b, 0.0f, c, d, wrong), Error);
}

TEST_CASE("gemm_batched equals the definition for every item and leaves gaps and other columns alone",
          "[model][gemm]") {
  auto check = [](auto input) {
    using TA = decltype(input);
    const bool rounded_inputs = std::is_same<TA, bf16>::value;
    for (Op op_a : {Op::none, Op::transpose}) {
      for (Op op_b : {Op::none, Op::transpose}) {
        INFO("bf16 " << rounded_inputs << " op_a " << int(op_a) << " op_b " << int(op_b));
        const int count = 3, m = 6, n = 5, k = 7, gap = 4, spare = 2;
        const std::size_t ar = op_a == Op::none ? m : k, ac = op_a == Op::none ? k : m;
        const std::size_t br = op_b == Op::none ? k : n, bc = op_b == Op::none ? n : k;
        // Each item is a block of columns of a wider matrix (leading dimension ld > cols), items
        // apart by a gap.
        const std::size_t a_ld = ac + spare, b_ld = bc + spare, c_ld = n + spare;
        const std::size_t a_stride = ar * a_ld + gap, b_stride = br * b_ld + gap, c_stride = m * c_ld + gap;
        Vector<float> a32("a", count * a_stride), b32("b", count * b_stride), c("c", count * c_stride);
        random::fill_normal(a32, 9, 0, 1.0);
        random::fill_normal(b32, 9, 1, 1.0);
        random::fill_normal(c, 9, 2, 1.0);
        const auto a = test::converted<Vector<TA>>("a", a32), b = test::converted<Vector<TA>>("b", b32);
        auto ha = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), a);
        auto hb = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), b);
        auto hc0 = Kokkos::create_mirror(c);  // a copy even where c is host memory
        Kokkos::deep_copy(hc0, c);
        const float alpha = 2.0f, beta = -1.0f;
        model::gemm_batched<TA, float>(ExecSpace(), op_a, op_b, alpha, {a.data(), ar, ac, a_ld, a_stride},
                                       {b.data(), br, bc, b_ld, b_stride}, beta,
                                       {c.data(), std::size_t(m), std::size_t(n), c_ld, c_stride}, count);
        auto hc = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), c);
        for (int item = 0; item < count; ++item) {
          for (std::size_t i = 0; i < std::size_t(m); ++i) {
            for (std::size_t j = 0; j < c_ld; ++j) {
              const std::size_t at = item * c_stride + i * c_ld + j;
              if (j >= std::size_t(n)) {
                REQUIRE(hc(at) == hc0(at));  // columns beyond the item's
                continue;
              }
              double sum = 0, magnitude = 0;
              for (std::size_t p = 0; p < std::size_t(k); ++p) {
                const std::size_t ia = item * a_stride + (op_a == Op::none ? i * a_ld + p : p * a_ld + i);
                const std::size_t ib = item * b_stride + (op_b == Op::none ? p * b_ld + j : j * b_ld + p);
                const double term = double(float(ha(ia))) * double(float(hb(ib)));
                sum += term;
                magnitude += std::abs(term);
              }
              const double expected = alpha * sum + beta * double(hc0(at));
              REQUIRE(std::abs(double(hc(at)) - expected) <= 1e-5 * (alpha * magnitude + std::abs(double(hc0(at)))));
            }
          }
          for (std::size_t g = m * c_ld; g < c_stride; ++g) REQUIRE(hc(item * c_stride + g) == hc0(item * c_stride + g));
        }
      }
    }
  };
  check(0.0f);
  check(bf16(0.0f));
  Vector<float> x("x", 64);
  auto mismatched = [&] {
    model::gemm_batched<float, float>(ExecSpace(), Op::none, Op::none, 1.0f, {x.data(), 2, 3, 3, 6}, {x.data(), 4, 2, 2, 8},
                                      0.0f, {x.data(), 2, 2, 2, 4}, 2);
  };
  CHECK_THROWS_AS(mismatched(), Error);
}
