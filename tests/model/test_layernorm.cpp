#include <catch2/catch.hpp>

#include <cmath>

#include "model/gradcheck.hpp"
#include "model/ops/elementwise.hpp"
#include "model/ops/layernorm.hpp"

using namespace kgpt;

TEST_CASE("layernorm matches its definition and finite differences", "[model][layernorm][gradcheck]") {
  const int n = 5, c = 12;
  Matrix<double> x("x", n, c), y("y", n, c), dx("dx", n, c);
  Vector<double> w("w", c), b("b", c), dw("dw", c), db("db", c), mean("mean", n), rstd("rstd", n);
  random::fill_normal(x, 110, 0, 2.0);
  random::fill_normal(w, 110, 1, 1.0);
  random::fill_normal(b, 110, 2, 1.0);
  model::ops::layernorm_forward<double>(ExecSpace(), x, w, b, y, mean, rstd, 1e-5);
  auto hx = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), x);
  auto hy = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), y);
  auto hw = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), w);
  auto hb = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), b);
  for (int i = 0; i < n; ++i) {
    double mu = 0, var = 0;
    for (int j = 0; j < c; ++j) mu += hx(i, j) / c;
    for (int j = 0; j < c; ++j) var += (hx(i, j) - mu) * (hx(i, j) - mu) / c;
    for (int j = 0; j < c; ++j) {
      CHECK(hy(i, j) == Approx((hx(i, j) - mu) / std::sqrt(var + 1e-5) * hw(j) + hb(j)).epsilon(1e-12));
    }
  }
  const auto up = test::random_like("up", y, 111);
  auto loss = [&] {
    model::ops::layernorm_forward<double>(ExecSpace(), x, w, b, y, mean, rstd, 1e-5);
    return test::dot(up, y);
  };
  loss();
  model::ops::layernorm_backward<double>(ExecSpace(), x, w, mean, rstd, up, dx, dw, db);
  test::check_gradient("layernorm dx", x, dx, loss);
  test::check_gradient("layernorm dw", w, dw, loss);
  test::check_gradient("layernorm db", b, db, loss);
}

TEST_CASE("bias add and its column-sum gradient", "[model][elementwise][gradcheck]") {
  Matrix<double> y_in("y_in", 4, 3), y("y", 4, 3);
  Vector<double> bias("bias", 3), dbias("dbias", 3);
  random::fill_normal(y_in, 120, 0, 1.0);
  random::fill_normal(bias, 120, 1, 1.0);
  const auto up = test::random_like("up", y, 121);
  auto loss = [&] {
    Kokkos::deep_copy(y, y_in);
    model::ops::bias_forward<double>(ExecSpace(), bias, y);
    return test::dot(up, y);
  };
  loss();
  model::ops::bias_backward<double>(ExecSpace(), up, dbias);
  test::check_gradient("bias", bias, dbias, loss);
}
