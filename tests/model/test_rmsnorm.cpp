#include <catch2/catch.hpp>

#include <cmath>
#include <tuple>

#include "model/gradcheck.hpp"
#include "model/precision_check.hpp"
#include "model/ops/rmsnorm.hpp"

using namespace kgpt;

TEST_CASE("rmsnorm forward matches its definition", "[model][rmsnorm]") {
  Matrix<double> x("x", 3, 5), y("y", 3, 5);
  Vector<double> rstd("rstd", 3);
  random::fill_normal(x, 1, 0, 2.0);
  model::ops::rmsnorm_forward<double>(ExecSpace(), x, y, rstd, 1e-6);
  auto hx = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), x);
  auto hy = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), y);
  for (int i = 0; i < 3; ++i) {
    double mean_sq = 0;
    for (int j = 0; j < 5; ++j) mean_sq += hx(i, j) * hx(i, j) / 5;
    for (int j = 0; j < 5; ++j) CHECK(hy(i, j) == Approx(hx(i, j) / std::sqrt(mean_sq + 1e-6)).epsilon(1e-12));
  }
}

TEST_CASE("rmsnorm backward matches finite differences", "[model][rmsnorm][gradcheck]") {
  const int n = 6, c = 16;
  Matrix<double> x("x", n, c), y("y", n, c), dx("dx", n, c);
  Vector<double> rstd("rstd", n);
  random::fill_normal(x, 2, 0, 1.5);
  const auto w = test::random_like("w", y, 7);
  auto loss = [&] {
    model::ops::rmsnorm_forward<double>(ExecSpace(), x, y, rstd, 1e-5);
    return test::dot(w, y);
  };
  loss();
  model::ops::rmsnorm_backward<double>(ExecSpace(), x, rstd, w, dx);
  test::check_gradient("rmsnorm dx", x, dx, loss);
}

TEST_CASE("rmsnorm in float agrees with double", "[model][rmsnorm][float]") {
  const int n = 8, c = 96;
  Matrix<double> x("x", n, c), dy("dy", n, c);
  random::fill_normal(x, 3, 0, 3.0);
  random::fill_normal(dy, 3, 1, 1.0);
  auto run = [&](auto zero) {
    using T = decltype(zero);
    const auto xt = test::converted<Matrix<T>>("x", x);
    const auto dyt = test::converted<Matrix<T>>("dy", dy);
    Matrix<T> y("y", n, c), dx("dx", n, c);
    Vector<T> rstd("rstd", n);
    model::ops::rmsnorm_forward<T>(ExecSpace(), xt, y, rstd, T(1.1920928955078125e-07));
    model::ops::rmsnorm_backward<T>(ExecSpace(), xt, rstd, dyt, dx);
    return std::make_tuple(y, rstd, dx);
  };
  const auto [y64, rstd64, dx64] = run(0.0);
  const auto [y32, rstd32, dx32] = run(0.0f);
  // Float rounds inputs and each operation at about 6e-8; a row's sum of 96 squares adds a few.
  CHECK(test::max_difference(y32, y64) < 1e-6);
  CHECK(test::max_difference(rstd32, rstd64) < 1e-6);
  CHECK(test::max_difference(dx32, dx64) < 1e-6);
}
