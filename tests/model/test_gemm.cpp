#include <catch2/catch.hpp>

#include "core/error.hpp"
#include "core/random.hpp"
#include "model/gemm.hpp"

using namespace kgpt;
using model::Op;

namespace {

// C = alpha * op(A) op(B) + beta * C0 by the definition, on host copies.
template <class T>
void check_gemm(Op op_a, Op op_b, int m, int n, int k, double tol) {
  Matrix<T> a("a", op_a == Op::none ? m : k, op_a == Op::none ? k : m);
  Matrix<T> b("b", op_b == Op::none ? k : n, op_b == Op::none ? n : k);
  Matrix<T> c("c", m, n);
  random::fill_normal(a, 3, 0, 1.0);
  random::fill_normal(b, 3, 1, 1.0);
  random::fill_normal(c, 3, 2, 1.0);
  auto ha = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), a);
  auto hb = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), b);
  auto hc0 = Kokkos::create_mirror(c);
  Kokkos::deep_copy(hc0, c);
  const T alpha = T(0.5), beta = T(-2);
  model::gemm(ExecSpace(), op_a, op_b, alpha, ConstMatrix<T>(a), ConstMatrix<T>(b), beta, c);
  auto hc = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), c);
  for (int i = 0; i < m; ++i) {
    for (int j = 0; j < n; ++j) {
      double sum = 0;
      for (int p = 0; p < k; ++p) {
        const double av = op_a == Op::none ? ha(i, p) : ha(p, i);
        const double bv = op_b == Op::none ? hb(p, j) : hb(j, p);
        sum += av * bv;
      }
      const double expected = alpha * sum + beta * hc0(i, j);
      REQUIRE(std::abs(hc(i, j) - expected) <= tol * (1 + std::abs(expected)));
    }
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
