#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/random.hpp"
#include "model/gemm.hpp"

using namespace kgpt;
using model::Op;

namespace {

// model::gemm on random operands (C = alpha op(A) op(B) + beta C0), each element with its exact
// value and its scale |alpha| sum_p |op(A)_ip op(B)_pj| + |beta C0_ij|, in double on host copies.
struct GemmOutcome {
  std::vector<double> got, expected, scale;
};

template <class T>
GemmOutcome run_gemm(Op op_a, Op op_b, int m, int n, int k, T alpha, T beta, std::uint64_t seed,
                     model::GemmPrecision precision = model::GemmPrecision::fp32) {
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
  model::gemm(ExecSpace(), op_a, op_b, alpha, ConstMatrix<T>(a), ConstMatrix<T>(b), beta, c, precision);
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

// Largest |C - exact| / scale over C, on float operands.
double worst_scaled_error_float(Op op_a, Op op_b, int m, int n, int k, model::GemmPrecision precision) {
  const GemmOutcome r = run_gemm<float>(op_a, op_b, m, n, k, 0.75f, 0.5f, 8, precision);
  double worst = 0;
  for (std::size_t e = 0; e < r.got.size(); ++e) worst = std::max(worst, std::abs(r.got[e] - r.expected[e]) / r.scale[e]);
  return worst;
}

}  // namespace

TEST_CASE("bf16 GEMM precision: bf16 rounding bounds on CUDA, exact fp32 on the host", "[model][gemm][precision]") {
  const model::GemmPrecision precision = model::gemm_precision(config::Precision::bf16);
  const bool on_cuda = backend::on_gpu;
  CHECK(precision == (on_cuda ? model::GemmPrecision::bf16 : model::GemmPrecision::fp32));
  CHECK(std::string(model::gemm_precision_name(precision)) == (on_cuda ? "bf16" : "fp32"));
  for (Op op_a : {Op::none, Op::transpose}) {
    for (Op op_b : {Op::none, Op::transpose}) {
      INFO("op_a " << int(op_a) << " op_b " << int(op_b));
      const double worst = worst_scaled_error_float(op_a, op_b, 48, 40, 256, precision);
      if (on_cuda) {
        // Each operand rounded to bf16 (unit roundoff 2^-9) makes each product off by at most about
        // 2^-8 relative; fp32 accumulation adds far less. Above fp32 level: the rounding really ran.
        CHECK(worst <= std::ldexp(1.0, -8) * 1.01);
        CHECK(worst > 1e-5);
      } else {
        CHECK(worst < 1e-6);
      }
    }
  }
}

TEST_CASE("gemm_batched equals the definition for every item and leaves the gaps between items alone",
          "[model][gemm]") {
  for (config::Precision requested : {config::Precision::fp32, config::Precision::bf16}) {
    const model::GemmPrecision precision = model::gemm_precision(requested);
    const bool rounded = precision == model::GemmPrecision::bf16;
    for (Op op_a : {Op::none, Op::transpose}) {
      for (Op op_b : {Op::none, Op::transpose}) {
        const int count = 3, m = 6, n = 5, k = 7, gap = 4;
        const std::size_t ar = op_a == Op::none ? m : k, ac = op_a == Op::none ? k : m;
        const std::size_t br = op_b == Op::none ? k : n, bc = op_b == Op::none ? n : k;
        const std::size_t a_stride = ar * ac + gap, b_stride = br * bc + gap, c_stride = m * n + gap;
        Vector<float> a("a", count * a_stride), b("b", count * b_stride), c("c", count * c_stride);
        random::fill_normal(a, 9, 0, 1.0);
        random::fill_normal(b, 9, 1, 1.0);
        random::fill_normal(c, 9, 2, 1.0);
        auto ha = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), a);
        auto hb = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), b);
        auto hc0 = Kokkos::create_mirror(c);  // a copy even where c is host memory
        Kokkos::deep_copy(hc0, c);
        const float alpha = 2.0f, beta = -1.0f;
        model::gemm_batched<float>(ExecSpace(), op_a, op_b, alpha, {a.data(), ar, ac, a_stride},
                                   {b.data(), br, bc, b_stride}, beta, {c.data(), std::size_t(m), std::size_t(n), c_stride},
                                   count, precision);
        auto hc = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), c);
        const double tol = rounded ? std::ldexp(1.0, -7) : 1e-5;
        for (int item = 0; item < count; ++item) {
          const float* pa = ha.data() + item * a_stride;
          const float* pb = hb.data() + item * b_stride;
          for (int i = 0; i < m; ++i) {
            for (int j = 0; j < n; ++j) {
              double sum = 0, magnitude = 0;
              for (int p = 0; p < k; ++p) {
                const double term = double(op_a == Op::none ? pa[i * ac + p] : pa[p * ac + i]) *
                                    double(op_b == Op::none ? pb[p * bc + j] : pb[j * bc + p]);
                sum += term;
                magnitude += std::abs(term);
              }
              const std::size_t at = item * c_stride + i * n + j;
              const double expected = alpha * sum + beta * double(hc0(at));
              INFO("precision " << int(precision) << " op_a " << int(op_a) << " op_b " << int(op_b) << " item " << item << " i " << i << " j " << j << " got " << hc(at) << " want " << expected);
              REQUIRE(std::abs(double(hc(at)) - expected) <= tol * (alpha * magnitude + std::abs(double(hc0(at)))));
            }
          }
          for (std::size_t g = m * n; g < c_stride; ++g) {
            REQUIRE(hc(item * c_stride + g) == hc0(item * c_stride + g));
          }
        }
      }
    }
  }
  Vector<float> x("x", 64);
  CHECK_THROWS_AS(model::gemm_batched<float>(ExecSpace(), Op::none, Op::none, 1.0f, {x.data(), 2, 3, 6}, {x.data(), 4, 2, 8},
                                             0.0f, {x.data(), 2, 2, 4}, 2),
                  Error);
}
